"""The one check every command makes before it writes: no path it writes is one it reads.

A command names every file it reads and every file it writes (its output, and the manifest,
summary, plot and rejects files beside it). Paths are compared after resolving links, and
files that already exist are also compared by device and inode (a hard link, or a path
spelled through a link to a folder, is still the same file). Standard input/output (`-`) is
never a clash.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from solm.core.errors import SolmError

PathLike = str | os.PathLike | None


def _is_stdio(p: PathLike) -> bool:
    return p is None or str(p) in ("-", "")


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """True when `a` and `b` name one file (through links; either may not exist yet)."""
    pa, pb = Path(a), Path(b)
    if pa.exists() and pb.exists():
        try:
            return os.path.samefile(pa, pb)
        except OSError:
            pass
    return pa.resolve() == pb.resolve()


def refuse_overlap(inputs: Iterable[PathLike], outputs: Iterable[PathLike]) -> None:
    """Raise a SolmError naming both paths when an output is also an input."""
    reads = [p for p in inputs if not _is_stdio(p)]
    for out in outputs:
        if _is_stdio(out):
            continue
        for source in reads:
            if same_file(out, source):
                if str(out) == str(source):
                    raise SolmError(f"{source}: the output is also an input, and writing it "
                                    f"would destroy it; choose another output path")
                raise SolmError(f"{out}: this command writes it, and it is the input {source} "
                                f"(the same file); writing it would destroy that input; "
                                f"choose another output path")


def _cannot_write_in(folder: Path) -> str | None:
    """Why a file cannot be created in `folder` (tried, then removed), or None. Permission
    bits say nothing of /proc or a read-only mount, and root passes every access() test."""
    import os
    import tempfile

    try:
        fd, name = tempfile.mkstemp(prefix=".solm-probe-", dir=folder)
    except OSError as e:
        return e.strerror or type(e).__name__
    os.close(fd)
    os.unlink(name)
    return None


def refuse_unwritable(outputs: Iterable[PathLike]) -> None:
    """An output that is a folder, or whose folder is a file, is named before any work."""
    for out in outputs:
        if _is_stdio(out):
            continue
        path = Path(str(out))
        if path.is_dir():
            raise SolmError(f"{path}: is a folder; expected a file path for this output")
        for parent in path.parents:
            if parent.exists():
                if not parent.is_dir():
                    raise SolmError(f"{path}: cannot be written, {parent} is a file, not a "
                                    f"folder")
                reason = _cannot_write_in(parent)
                if reason:
                    raise SolmError(f"{path}: cannot be written, nothing can be created in "
                                    f"{parent} ({reason}); choose another output")
                break


def outputs_beside(output: PathLike, *suffixes: str) -> list[Path]:
    """`output`, its manifest, and each `output + suffix` the command writes beside it."""
    from solm.core.provenance import manifest_path

    if _is_stdio(output):
        return []
    out = Path(str(output))
    return [out, manifest_path(out), *(Path(str(out) + s) for s in suffixes)]

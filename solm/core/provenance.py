"""Record how an output was made: command, settings, model, package versions, input hashes."""

from __future__ import annotations

import hashlib
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

from solm.core.errors import SolmError

_PACKAGES = ("solm", "torch", "transformers", "trl", "peft", "datasets", "accelerate")
_SECRET_HINTS = ("key", "token", "secret", "password")


def file_sha256(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def package_versions() -> dict[str, str]:
    out = {}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def _scrub(settings: dict[str, Any]) -> dict[str, Any]:
    clean = {}
    for k, v in settings.items():
        if any(h in k.lower() for h in _SECRET_HINTS) and "tokens" not in k.lower():
            continue
        clean[k] = str(v) if isinstance(v, Path) else v
    return clean


def redacted_argv(argv: list[str]) -> list[str]:
    """argv with the values of secret-looking flags (--api-key, --token...) replaced."""
    out, hide_next = [], False
    for a in argv:
        flag = a.split("=", 1)[0].lower()
        secret_flag = a.startswith("--") and any(h in flag for h in ("key", "secret", "password",
                                                                      "auth"))
        if hide_next:
            out.append("***")
            hide_next = False
        elif secret_flag and "=" in a:
            out.append(a.split("=", 1)[0] + "=***")
        else:
            out.append(a)
            hide_next = secret_flag
    return out


MANIFEST_NAME = "solm_manifest.json"  # a folder output's manifest


def read_manifest(path: Path) -> dict:
    from solm.core.jsonl import read_json_file

    record = read_json_file(path, "manifest")
    return record if isinstance(record, dict) else {}


def manifest_path(output: str | os.PathLike) -> Path:
    """`out.jsonl` -> `out.jsonl.manifest.json`; a folder -> `folder/solm_manifest.json`."""
    output = Path(output)
    if output.is_dir():
        return output / MANIFEST_NAME
    return output.with_name(output.name + ".manifest.json")


def check_rerun_settings(output: str | os.PathLike, row_settings: dict[str, Any],
                         force: bool = False,
                         hint: str = "pass --force to append anyway",
                         defaults: dict[str, Any] | None = None) -> bool:
    """Refuse to append to `output` with settings that change what a row contains (model,
    annotator, prompt version, decoding settings) when its manifest says its rows were made
    with others: resuming would mix two kinds of rows silently. Settings that do not change
    rows (--limit, --quiet, concurrency) are not passed here, so raising --limit resumes.
    A setting the recorded ones lack is compared with its value in `defaults` (what rows made
    before the setting existed used). Returns True when the rows will be mixed (`force`)."""
    if str(output) == "-" or not Path(output).is_file() or Path(output).stat().st_size == 0:
        return False
    path = manifest_path(output)
    if not path.exists():
        return False
    recorded = read_manifest(path).get("row_settings")
    if recorded is None:
        return False
    # a setting the manifest does not name came later: its rows were made with the
    # setting's default (`defaults`), which a rerun must then keep
    implied = {**_scrub(defaults or {}), **recorded}
    changed = {k: (implied.get(k), v) for k, v in _scrub(row_settings).items()
               if k in implied and implied[k] != v}
    if changed and not force:
        what = ", ".join(f"{k}={old!r} (now {new!r})" for k, (old, new) in changed.items())
        raise SolmError(f"{output} holds rows made with {what}; rerun with the same settings, "
                        f"choose another output, or {hint}")
    return bool(changed)


def _changed(recorded: dict[str, Any], row_settings: dict[str, Any]) -> dict[str, tuple]:
    return {k: (recorded.get(k), v) for k, v in _scrub(row_settings).items()
            if recorded.get(k) != v}


def move_aside(files: Iterable[Path], into: Path) -> Path | None:
    """Move the files that exist into the new folder `into` (a restart deletes nothing);
    returns it, or None when there was nothing to move."""
    present = [Path(f) for f in files if Path(f).exists()]
    if not present:
        return None
    into.mkdir(parents=True, exist_ok=False)
    for f in present:
        os.replace(f, into / f.name)
    return into


def differing_keys(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The keys whose values differ between two settings records (missing counts)."""
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def guard_folder(folder: str | os.PathLike, row_settings: dict[str, Any], restart: bool,
                 results: Iterable[str], option: str = "--restart") -> Path | None:
    """A resumable folder output reused by a rerun: its manifest's row settings (model,
    judge, data, settings) must be the rerun's, or the rerun would mix or relabel results.
    With `restart`, the folder's results and manifest are moved into
    `folder/previous-TIME/` (nothing is deleted) and the run starts afresh; returns that
    folder. A folder without a manifest (or new) is taken as it is."""
    folder = Path(folder)
    path = folder / MANIFEST_NAME
    present = [n for n in results if (folder / n).exists()]
    if restart:
        return move_aside([folder / n for n in present + [MANIFEST_NAME]],
                          folder / time.strftime("previous-%Y%m%d-%H%M%S"))
    if not path.exists() or not present:
        return None
    recorded = read_manifest(path).get("row_settings")
    if recorded is None:
        return None
    changed = _changed(recorded, row_settings)
    if changed:
        what = ", ".join(f"{k}={old!r} (now {new!r})" for k, (old, new) in changed.items())
        raise SolmError(f"{folder} holds results made with {what}; rerun with the same "
                        f"settings, choose another output, or pass {option} to start again "
                        f"(the old results are moved into {folder}/previous-TIME/)")
    return None


def write_manifest(output: str | os.PathLike, command: str, settings: dict[str, Any],
                   inputs: list[str | os.PathLike] = (), model: str | None = None,
                   extra: dict[str, Any] | None = None,
                   row_settings: dict[str, Any] | None = None,
                   mixed: bool = False) -> Path | None:
    """Write the manifest next to `output` (never containing secrets) and return its path;
    nothing for standard output (`-`), which has no "next to"."""
    if str(output) == "-":
        return None
    record = {
        "command": command,
        "argv": redacted_argv(sys.argv),
        "settings": _scrub(settings),
        "model": model,
        "inputs": {str(p): file_sha256(p) for p in inputs
                   if p and str(p) != "-" and Path(p).is_file()},
        "versions": package_versions(),
        "python": platform.python_version(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if extra:
        record.update(extra)
    if row_settings is not None:
        record["row_settings"] = _scrub(row_settings)
        previous = manifest_path(output)
        was_mixed = previous.exists() and read_manifest(previous).get("mixed_settings")
        record["mixed_settings"] = bool(mixed or was_mixed)
    from solm.core.jsonl import write_json_file

    path = manifest_path(output)
    write_json_file(path, record, indent=2)
    return path

"""Sharding a job by prompt across processes, and merging the shards' outputs by id.

A command given `--shard K/N` (or `--shard auto`, which reads the RANK / WORLD_SIZE that
`accelerate launch` and `torchrun` set) keeps the prompts at positions K, K+N, K+2N, ... of
its input (after `--limit`), so N processes split the work with no coordination, and each
writes beside the unsharded output:

- a file output `out.jsonl` becomes `out.shard-K-of-N.jsonl`;
- a folder output `run/` becomes `run/shard-K-of-N/` (the same layout inside).

`merge` puts them back: a file's shards become `out.jsonl` (in the prompts' order and
checked complete when the prompts are given: every id exactly once); a folder's shards
become the folder's JSONL files (a file every shard holds byte for byte, such as a run's
settings, is copied). A prompt id found in two shards is refused, and so is a
missing shard. Rows are copied as written: a merge of greedy, batch-independent decodes
equals the unsharded decode.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence, TypeVar

from solm.core.errors import SolmError
from solm.core.jsonl import read_jsonl_numbered, write_jsonl

T = TypeVar("T")
_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
_FILE_SHARD = re.compile(r"^(?P<stem>.+)\.shard-(?P<k>\d+)-of-(?P<n>\d+)(?P<suffix>\.[^.]+)$")
_DIR_SHARD = re.compile(r"^shard-(?P<k>\d+)-of-(?P<n>\d+)$")


@dataclass(frozen=True)
class Shard:
    index: int
    count: int
    local_rank: int = 0  # the process's GPU on its machine (auto), else 0

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise SolmError(f"--shard: expected K/N with 0 <= K < N, got "
                            f"{self.index}/{self.count}")

    @classmethod
    def parse(cls, spec: str | None, env: dict[str, str] | None = None) -> "Shard | None":
        """`K/N`, `auto` (RANK and WORLD_SIZE of the launcher; None when they are unset or
        the world is one process) or None."""
        if spec is None or spec == "":
            return None
        if spec.strip() == "auto":
            env = os.environ if env is None else env
            world = int(env.get("WORLD_SIZE", "1") or 1)
            if world <= 1:
                return None
            return cls(int(env.get("RANK", "0")), world, int(env.get("LOCAL_RANK", "0")))
        m = _SPEC.match(spec)
        if not m:
            raise SolmError(f"--shard: expected K/N (e.g. 0/8) or auto, got {spec!r}")
        return cls(int(m.group(1)), int(m.group(2)))

    @property
    def tag(self) -> str:
        return f"shard-{self.index}-of-{self.count}"

    def take(self, items: Iterable[T]) -> list[T]:
        """The items at positions index, index + count, ..."""
        return [x for i, x in enumerate(items) if i % self.count == self.index]

    def file(self, out: str | os.PathLike) -> Path:
        out = Path(out)
        return out.with_name(f"{out.stem}.{self.tag}{out.suffix or '.jsonl'}")

    def folder(self, out: str | os.PathLike) -> Path:
        return Path(out) / self.tag

    def device(self, device: str | None) -> str | None:
        """An explicit device stays; under a launcher on a CUDA machine each process takes
        its own GPU."""
        if device is not None:
            return device
        import torch

        return f"cuda:{self.local_rank}" if torch.cuda.is_available() else None


def shard_file(out: Path, shard: Shard | None) -> Path:
    return out if shard is None else shard.file(out)


def shard_folder(out: Path, shard: Shard | None) -> Path:
    return out if shard is None else shard.folder(out)


def take(items: Sequence[T], shard: Shard | None) -> list[T]:
    return list(items) if shard is None else shard.take(items)


# ---- merging ---------------------------------------------------------------------------

def _complete_set(found: dict[int, Path], count: int, where: Path) -> list[Path]:
    missing = [k for k in range(count) if k not in found]
    if missing:
        raise SolmError(f"{where}: shard(s) {', '.join(map(str, missing))} of {count} are "
                        "missing; run them (or wait for them) before merging")
    return [found[k] for k in range(count)]


def file_shards(out: Path) -> list[Path]:
    """The shard files of `out` (all N of one N), in shard order."""
    out = Path(out)
    by_n: dict[int, dict[int, Path]] = {}
    for p in out.parent.glob(f"{out.stem}.shard-*-of-*{out.suffix}"):
        m = _FILE_SHARD.match(p.name)
        if m and m.group("stem") == out.stem and m.group("suffix") == out.suffix:
            by_n.setdefault(int(m.group("n")), {})[int(m.group("k"))] = p
    return _one_count(by_n, out)


def folder_shards(out: Path) -> list[Path]:
    by_n: dict[int, dict[int, Path]] = {}
    for p in Path(out).glob("shard-*-of-*"):
        m = _DIR_SHARD.match(p.name)
        if m and p.is_dir():
            by_n.setdefault(int(m.group("n")), {})[int(m.group("k"))] = p
    return _one_count(by_n, out)


def _one_count(by_n: dict[int, dict[int, Path]], out: Path) -> list[Path]:
    if not by_n:
        raise SolmError(f"{out}: no shard outputs found (expected "
                        f"{'shard-K-of-N folders inside' if out.is_dir() else 'files named ' + out.stem + '.shard-K-of-N' + out.suffix})")
    if len(by_n) > 1:
        raise SolmError(f"{out}: shards of different counts ({', '.join(map(str, sorted(by_n)))})"
                        "; remove the stale ones")
    (n, found), = by_n.items()
    return _complete_set(found, n, out)


def _read_shard(path: Path) -> list[tuple[int, dict]]:
    return list(read_jsonl_numbered(path, skip_partial_last_line=True))


def _read_disjoint(files: list[Path]) -> list[dict]:
    """The rows of the shard files, in shard order; an id found in two shards is refused."""
    owner: dict[str, Path] = {}
    rows = []
    for path in files:
        for line, row in _read_shard(path):
            if "id" in row:
                key = str(row["id"])
                if owner.setdefault(key, path) != path:
                    raise SolmError(f"{path}:{line} [field 'id']: id {key!r} is also in "
                                    f"{owner[key]}; shards must split the prompts")
            rows.append(row)
    return rows


def merge_file(out: Path, prompt_ids: Sequence[str] | None = None) -> dict:
    """Merge `out`'s shard files into `out`. With `prompt_ids` (the input's ids, in order),
    rows follow that order and every id must be there exactly once."""
    files = file_shards(out)
    rows = _read_disjoint(files)
    if prompt_ids is not None:
        by_id: dict[str, dict] = {}
        for row in rows:
            key = str(row.get("id"))
            if key in by_id:
                raise SolmError(f"{out}: id {key!r} appears twice in the shards")
            by_id[key] = row
        expected = [str(i) for i in prompt_ids]
        missing = [i for i in expected if i not in by_id]
        extra = sorted(set(by_id) - set(expected))
        if missing or extra:
            raise SolmError(f"{out}: the shards do not hold every prompt exactly once: "
                            f"{len(missing)} missing (first: {missing[:3]}), {len(extra)} not "
                            f"in the prompts (first: {extra[:3]}); finish the shards first")
        rows = [by_id[i] for i in expected]
    write_jsonl(out, rows)
    return {"output": str(out), "shards": [str(f) for f in files], "rows": len(rows)}


def merge_folder(out: Path) -> dict:
    """Merge every JSONL file of `out`'s shard folders into the same path under `out`."""
    shards = folder_shards(out)
    names = sorted({p.relative_to(s) for s in shards for p in s.rglob("*.jsonl")})
    merged = {}
    for name in names:
        rows = _read_disjoint([s / name for s in shards if (s / name).exists()])
        write_jsonl(out / name, rows)
        merged[str(name)] = len(rows)
    copied, differing = _copy_identical(shards, out)
    return {"output": str(out), "shards": [str(s) for s in shards], "files": merged,
            "copied": copied, "differing": differing}


def _copy_identical(shards: list[Path], out: Path) -> tuple[list[str], list[str]]:
    """Other files (a run's settings, run.json) are copied when every shard has the same
    bytes and the folder has none yet; the ones that differ are named, not copied."""
    import shutil

    names = sorted({p.relative_to(s) for s in shards for p in s.rglob("*")
                    if p.is_file() and p.suffix != ".jsonl"})
    copied, differing = [], []
    for name in names:
        files = [s / name for s in shards]
        if not all(f.exists() for f in files) or len({f.read_bytes() for f in files}) > 1:
            differing.append(str(name))
        elif not (out / name).exists():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(files[0], out / name)
            copied.append(str(name))
    return copied, differing

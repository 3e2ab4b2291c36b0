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
from typing import Iterable, Sequence, TypeVar

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
            return cls._from_launcher(os.environ if env is None else env)
        m = _SPEC.match(spec)
        if not m:
            raise SolmError(f"--shard: expected K/N (e.g. 0/8) or auto, got {spec!r}")
        return cls(int(m.group(1)), int(m.group(2)))

    @classmethod
    def _from_launcher(cls, env) -> "Shard | None":
        """`auto`: the launcher's RANK / WORLD_SIZE (None for a world of one process). Run
        without a launcher, `auto` is refused: silently doing the whole job in every
        process is what it must not do."""
        if "WORLD_SIZE" not in env or "RANK" not in env:
            missing = [k for k in ("RANK", "WORLD_SIZE") if k not in env]
            raise SolmError(f"--shard auto: {' and '.join(missing)} not set; run under "
                            f"`accelerate launch` or `torchrun`, or give --shard K/N")
        try:
            world, rank = int(env["WORLD_SIZE"]), int(env["RANK"])
            local = int(env.get("LOCAL_RANK", "0") or 0)
        except ValueError:
            raise SolmError(f"--shard auto: RANK={env['RANK']!r} / WORLD_SIZE="
                            f"{env['WORLD_SIZE']!r} are not integers") from None
        if world == 1 and rank == 0:
            return None
        return cls(rank, world, local)

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


# A shard's marker: which prompts it was given, and whether its command ended. A merge
# refuses a shard whose command did not end or whose rows lack some of its prompts.
MARKER_SUFFIX = ".shard.json"
FOLDER_MARKER = "shard.json"


def marker_path(shard_out: str | os.PathLike, folder: bool) -> Path:
    shard_out = Path(shard_out)
    return shard_out / FOLDER_MARKER if folder else \
        shard_out.with_name(shard_out.name + MARKER_SUFFIX)


def mark_started(shard: "Shard", shard_out: str | os.PathLike, folder: bool,
                 ids: Sequence[str] | None) -> None:
    """Written when a sharded command starts: its prompt ids, not yet complete."""
    _write_marker(marker_path(shard_out, folder),
                  {"shard": shard.tag, "ids": None if ids is None else [str(i) for i in ids],
                   "complete": False})


def mark_finished(shard: "Shard | None", shard_out: str | os.PathLike, folder: bool) -> None:
    """Written when the sharded command ended normally."""
    if shard is None:
        return
    path = marker_path(shard_out, folder)
    record = _read_marker(path) or {"shard": shard.tag, "ids": None}
    _write_marker(path, {**record, "complete": True})


def _write_marker(path: Path, record: dict) -> None:
    from solm.core.jsonl import write_json_file

    write_json_file(path, record)


def _read_marker(path: Path) -> dict | None:
    from solm.core.jsonl import read_json_file

    if not path.exists():
        return None
    record = read_json_file(path, "shard marker")
    if not isinstance(record, dict):
        raise SolmError(f"{path}: not a shard marker (expected a JSON object)")
    return record


def _check_finished(shard_out: Path, folder: bool, rows: list[dict] | None,
                    checked_by_prompts: bool) -> None:
    """Refuse a shard whose command did not end, or (a file) whose rows lack a prompt it
    was given. Without a marker only the prompts' id check (--prompts) can tell."""
    marker = _read_marker(marker_path(shard_out, folder))
    if marker is None:
        if checked_by_prompts:
            return
        raise SolmError(f"{shard_out}: no shard marker ({marker_path(shard_out, folder).name}), "
                        f"so nothing says its command finished; give --prompts to check that "
                        f"every prompt is there, or rerun the shard")
    if not marker.get("complete"):
        raise SolmError(f"{shard_out}: this shard's command has not finished (its marker says "
                        f"complete: false); rerun it, then merge")
    if rows is not None and marker.get("ids") is not None:
        have = {str(r.get("id")) for r in rows}
        lacking = [i for i in marker["ids"] if i not in have]
        if lacking:
            raise SolmError(f"{shard_out}: holds {len(marker['ids']) - len(lacking)} of its "
                            f"{len(marker['ids'])} prompts (first missing: {lacking[0]!r}); "
                            f"rerun the shard, then merge")


def _read_shard(path: Path) -> list[tuple[int, dict]]:
    return list(read_jsonl_numbered(path, skip_partial_last_line=True))


def _read_disjoint(files: list[Path]) -> tuple[list[dict], dict[Path, list[dict]]]:
    """The rows of the shard files, in shard order (and per file); an id found in two
    shards is refused."""
    owner: dict[str, Path] = {}
    rows, per_file = [], {}
    for path in files:
        mine = per_file.setdefault(path, [])
        for line, row in _read_shard(path):
            if "id" in row:
                key = str(row["id"])
                if owner.setdefault(key, path) != path:
                    raise SolmError(f"{path}:{line} [field 'id']: id {key!r} is also in "
                                    f"{owner[key]}; shards must split the prompts")
            rows.append(row)
            mine.append(row)
    return rows, per_file


def _canonical(row: dict) -> str:
    import json

    return json.dumps(row, sort_keys=True, ensure_ascii=False)


def _with_existing(out: Path, shard_rows: list[dict]) -> tuple[list[dict], list[dict], int]:
    """(rows already in `out`, shard rows to add, shard rows already there). A prompt id that
    `out` already holds is taken from the shards only when the shards hold exactly rows `out`
    has (a merge run twice); otherwise the merge is refused and nothing is written."""
    if not out.exists():
        return [], shard_rows, 0
    existing = [row for _, row in _read_shard(out)]
    held: dict[str, set[str]] = {}
    for row in existing:
        if "id" in row:
            held.setdefault(str(row["id"]), set()).add(_canonical(row))
    plain = {_canonical(r) for r in existing if "id" not in r}
    add, repeated = [], 0
    for row in shard_rows:
        text = _canonical(row)
        key = str(row["id"]) if "id" in row else None
        if key is not None and key in held:
            if text not in held[key]:
                raise SolmError(f"{out} already holds rows for id {key!r} that differ from the "
                                f"shards'; nothing was written (move {out.name} aside to merge "
                                f"into a fresh output, or remove its shards if it is complete)")
            repeated += 1
        elif key is None and text in plain:
            repeated += 1
        else:
            add.append(row)
    return existing, add, repeated


def _agreed_row_settings(outputs: list[Path], where: Path) -> dict | None:
    """The row settings every shard's manifest records (None when none records any);
    shards made with different settings are refused."""
    from solm.core.provenance import differing_keys, manifest_path, read_manifest

    found = {}
    for o in outputs:
        m = manifest_path(o)
        if m.exists():
            found[o] = read_manifest(m).get("row_settings")
    values = [v for v in found.values() if v is not None]
    if not values:
        return None
    if any(v != values[0] for v in values[1:]):
        a, b = [o for o, v in found.items() if v is not None][:2]
        diff = differing_keys(found[a], found[b])
        raise SolmError(f"{where}: the shards were made with different settings "
                        f"({', '.join(diff) or 'see their manifests'} differ between {a} and "
                        f"{b}); rerun them alike")
    return values[0]


def _merge_manifest(out: Path, shards: list[Path], row_settings: dict | None,
                    result: dict) -> None:
    """The merged output's manifest carries the shards' row settings, so the command's
    rerun on it keeps refusing other settings; an output's own manifest (checked to agree
    by `_merge_manifest_check`) is kept."""
    from solm.core.provenance import manifest_path, read_manifest, write_manifest

    own = manifest_path(out)
    if own.exists() and read_manifest(own).get("command") != "solm merge":
        return
    write_manifest(out, "solm merge", {"shards": [str(s) for s in shards]},
                   inputs=[s for s in shards if s.is_file()], extra={"merge": result},
                   row_settings=row_settings)


def merge_file(out: Path, prompt_ids: Sequence[str] | None = None) -> dict:
    """Merge `out`'s shard files into `out`, keeping the rows it already holds. With
    `prompt_ids` (the input's ids, in order), rows follow that order and every id must be
    there exactly once."""
    files = file_shards(out)
    rows, per_file = _read_disjoint(files)
    for f in files:
        _check_finished(f, False, per_file[f], checked_by_prompts=prompt_ids is not None)
    row_settings = _agreed_row_settings(files, out)
    _merge_manifest_check(out, row_settings)
    existing, add, repeated = _with_existing(out, rows)
    rank = _prompt_order(files)
    if rank is not None:  # the shards' rows back in the order of the prompts they split
        add = sorted(add, key=lambda r: rank.get(str(r.get("id")), len(rank)))
    rows = existing + add
    if prompt_ids is not None:
        by_id: dict[str, dict] = {}
        for row in rows:
            key = str(row.get("id"))
            if key in by_id:
                raise SolmError(f"{out}: id {key!r} appears twice in the shards")
            by_id[key] = row
        expected = [str(i) for i in prompt_ids]
        missing = [i for i in expected if i not in by_id]
        extra = sorted(set(by_id) - set(expected) - {str(r.get("id")) for r in existing})
        if missing or extra:
            raise SolmError(f"{out}: the shards do not hold every prompt exactly once: "
                            f"{len(missing)} missing (first: {missing[:3]}), {len(extra)} not "
                            f"in the prompts (first: {extra[:3]}); finish the shards first")
        wanted = set(expected)
        rows = [by_id[i] for i in expected] + [r for r in existing
                                              if str(r.get("id")) not in wanted]
    write_jsonl(out, rows)
    result = {"output": str(out), "shards": [str(f) for f in files], "rows": len(rows),
              "kept": len(existing), "added": len(add), "already_there": repeated}
    _merge_manifest(out, files, row_settings, result)
    return result


def _prompt_order(files: list[Path]) -> dict[str, int] | None:
    """Prompt id -> its position in the input, from the shards' markers: shard K of N took
    the prompts at positions K, K+N, K+2N, ... in order (None when a marker lacks its ids)."""
    count = len(files)
    rank: dict[str, int] = {}
    for path in files:
        m = _FILE_SHARD.match(path.name)
        marker = _read_marker(marker_path(path, False))
        if m is None or marker is None or marker.get("ids") is None:
            return None
        k = int(m["k"])
        for i, key in enumerate(marker["ids"]):
            rank[str(key)] = k + i * count
    return rank


def _merge_manifest_check(out: Path, row_settings: dict | None) -> None:
    """Before writing: an output whose manifest records other settings is refused."""
    from solm.core.provenance import differing_keys, manifest_path, read_manifest

    own = manifest_path(out)
    if row_settings is None or not own.exists():
        return
    recorded = read_manifest(own).get("row_settings")
    if recorded is not None and recorded != row_settings:
        diff = differing_keys(recorded, row_settings)
        raise SolmError(f"{out}: holds rows made with other settings than its shards' "
                        f"({', '.join(diff)} differ); nothing was written")


def merge_folder(out: Path) -> dict:
    """Merge every JSONL file of `out`'s shard folders into the same path under `out`,
    keeping the rows each already holds."""
    shards = folder_shards(out)
    for s in shards:
        _check_finished(s, True, None, checked_by_prompts=False)
    row_settings = _agreed_row_settings(shards, out)
    _merge_manifest_check(out, row_settings)
    names = sorted({p.relative_to(s) for s in shards for p in s.rglob("*.jsonl")})
    planned = []
    for name in names:  # every file checked before any is written
        rows, _ = _read_disjoint([s / name for s in shards if (s / name).exists()])
        existing, add, repeated = _with_existing(out / name, rows)
        planned.append((name, existing + add, len(existing), len(add)))
    merged, kept = {}, {}
    for name, rows, n_existing, n_added in planned:
        write_jsonl(out / name, rows)
        merged[str(name)] = len(rows)
        if n_existing:
            kept[str(name)] = n_existing
    copied, differing = _copy_identical(shards, out)
    result = {"output": str(out), "shards": [str(s) for s in shards], "files": merged,
              "kept": kept, "copied": copied, "differing": differing}
    _merge_manifest(out, shards, row_settings, result)
    return result


def _copy_identical(shards: list[Path], out: Path) -> tuple[list[str], list[str]]:
    """Other files (a run's settings, run.json) are copied when every shard has the same
    bytes and the folder has none yet; the ones that differ are named, not copied."""
    import shutil

    from solm.core.provenance import MANIFEST_NAME

    skip = {FOLDER_MARKER, MANIFEST_NAME}
    names = sorted({p.relative_to(s) for s in shards for p in s.rglob("*")
                    if p.is_file() and p.suffix != ".jsonl" and p.name not in skip
                    and not p.name.endswith(".tmp")})
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

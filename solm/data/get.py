"""`solm data get` / `solm data list`: fetch a set's raw files from the Hugging Face hub (or
take a local copy), convert them to solm JSONL in the data folder, and record where every
row came from in the folder's SOURCE.json.

The data folder is `--data-dir`, else `$SOLM_DATA`, else `~/.cache/solm/data` (`DATA=` in
make). A set is written whole to a temporary file and renamed into place, so a killed run
leaves either the old file or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from solm.core.errors import DataError, SolmError
from solm.data.sets import DataSet, MissingField, Row

SOURCE_FILE = "SOURCE.json"


def data_root(override: str | os.PathLike | None = None) -> Path:
    if override:
        return Path(override).expanduser()
    return Path(os.environ.get("SOLM_DATA") or Path.home() / ".cache" / "solm" / "data")


def read_raw(path: Path) -> Iterator[tuple[str, Row]]:
    """(where, row) for each row of a JSON list, a JSONL file or a Parquet file."""
    from solm.core.jsonl import read_jsonl_numbered, read_rows_located

    if not path.exists():
        raise DataError("file not found", path=str(path))
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        n = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=512):
            for row in batch.to_pylist():
                n += 1
                yield f"{path}: row {n}", row
        return
    if path.suffix == ".json":
        yield from ((where, row) for where, row in read_rows_located(path))
        return
    for line, row in read_jsonl_numbered(path):
        yield f"{path}:{line}", row


def first_sentence(text: str, limit: int = 200) -> str:
    """A library's message shortened to its first sentence, never cut inside a word."""
    text = " ".join(text.split())
    end = re.search(r"[.!?](\s|$)", text)
    if end:
        text = text[:end.start() + 1]
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0] + " ..."


def hub_unreachable() -> str | None:
    """Why the hub cannot be reached from here (offline mode, its host unknown or refusing),
    found in well under a second; None when it may be reachable."""
    import os
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return "HF_HUB_OFFLINE is set"
    try:
        from huggingface_hub import constants
        endpoint = constants.ENDPOINT
    except Exception:  # pragma: no cover - the hub client is a dependency
        endpoint = "https://huggingface.co"
    url = urlparse(endpoint)
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https"
                                                                 else 80)
    try:
        with socket.create_connection((host, port), timeout=3):
            return None
    except socket.gaierror as e:
        return f"the hub's host {host} cannot be resolved here ({e.strerror or e})"
    except OSError as e:
        return f"the hub at {host}:{port} cannot be reached ({e.strerror or type(e).__name__})"


def hub_files(ds: DataSet, revision: str) -> tuple[list[Path], str | None]:
    """Download the set's raw files; returns them and the commit they came from."""
    fallback = f"on a machine without the hub, convert a local copy: solm data get {ds.name} " \
               f"--from FILE"
    unreachable = hub_unreachable()
    if unreachable:  # at once, instead of the hub client's retries
        raise SolmError(f"could not download {ds.name} ({ds.repo}): {unreachable}; {fallback}")
    try:
        from huggingface_hub import hf_hub_download

        paths = [Path(hf_hub_download(ds.repo, name, repo_type="dataset", revision=revision))
                 for name in ds.files]
    except Exception as e:  # offline, no hub, a gated or moved repository
        raise SolmError(
            f"could not download {ds.name} ({ds.repo}, {', '.join(ds.files)}) from the Hugging "
            f"Face hub ({type(e).__name__}: {first_sentence(str(e))}); {fallback}") from None
    commit = re.search(r"snapshots/([0-9a-f]{40})/", paths[0].as_posix())
    return paths, commit.group(1) if commit else None


@dataclass
class Built:
    name: str
    path: Path
    rows: int
    skipped: bool = False


def convert_files(ds: DataSet, sources: list[Path], out: Path, limit: int | None) -> int:
    """Write `out` from the sources' rows (converted); returns the row count."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    n = 0
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for source in sources:
                for where, raw in read_raw(source):
                    if limit is not None and n >= limit:
                        break
                    if not isinstance(raw, dict):
                        raise DataError("expected an object per row", path=where)
                    try:
                        row = ds.convert(raw, n)
                    except MissingField as e:
                        raise DataError(f"{e} (a {ds.name} row from {ds.repo} needs it)",
                                        path=where, field=e.field) from None
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")
                    n += 1
        if n == 0:
            raise DataError(f"no rows: nothing to write for {ds.name}", path=str(sources[0]))
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return n


def read_sources(folder: Path) -> dict:
    from solm.core.jsonl import read_json_file

    path = folder / SOURCE_FILE
    if not path.exists():
        return {}
    record = read_json_file(path, SOURCE_FILE)
    return record if isinstance(record, dict) else {}


def record_source(folder: Path, name: str, entry: dict) -> None:
    sources = read_sources(folder)
    sources[name] = entry
    tmp = folder / (SOURCE_FILE + ".tmp")
    tmp.write_text(json.dumps(sources, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, folder / SOURCE_FILE)


def get_set(ds: DataSet, folder: Path, local: list[Path] | None = None,
            revision: str | None = None, limit: int | None = None,
            force: bool = False) -> Built:
    """Make `folder/NAME.jsonl` from the hub (or from `local` files) unless it is there."""
    from solm import __version__
    from solm.core.provenance import file_sha256

    out = folder / ds.filename
    if out.exists() and not force:
        rows = sum(1 for line in open(out, encoding="utf-8") if line.strip())
        return Built(ds.name, out, rows, skipped=True)
    if local:
        for path in local:
            if not path.is_file():
                raise DataError("file not found (given with --from)", path=str(path))
        sources, commit = local, None
        origin = {"from": [str(p.resolve()) for p in local]}
    else:
        sources, commit = hub_files(ds, revision or ds.revision)
        origin = {"repo": ds.repo, "revision": revision or ds.revision,
                  "resolved_commit": commit}
    rows = convert_files(ds, sources, out, limit)
    record_source(folder, ds.name, {
        **origin, "files": [{"name": name, "sha256": file_sha256(path)}
                            for name, path in zip(
                                ds.files if not local else [p.name for p in local], sources)],
        "file": ds.filename, "rows": rows, "limit": limit, "license": ds.license,
        "description": ds.description, "solm": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    return Built(ds.name, out, rows)


def listing(folder: Path) -> list[dict]:
    """Every known set, its full size, and whether (and how) it is in `folder`."""
    from solm.data.sets import SETS

    sources = read_sources(folder)
    out = []
    for ds in SETS.values():
        path = folder / ds.filename
        entry = sources.get(ds.name, {})
        out.append({"name": ds.name, "repo": ds.repo, "rows": ds.rows,
                    "download_mb": ds.download_mb, "on_disk": path.exists(),
                    "rows_on_disk": entry.get("rows") if path.exists() else None,
                    "from": ("local copy" if "from" in entry else
                             entry.get("resolved_commit") or entry.get("revision"))
                    if path.exists() else None,
                    "description": ds.description})
    return out

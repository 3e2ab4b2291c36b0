"""Streaming JSONL reading and crash-safe appending writers.

Writers append and flush after every record, so a killed job loses at most the record in
flight; `done_ids` lets a rerun skip what was already written.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator

from solm.core.errors import DataError


STDIO = "-"  # a path that means standard input (reading) or standard output (writing)


BOM = b"\xef\xbb\xbf"


def is_stdio(path: str | os.PathLike | None) -> bool:
    return path is not None and str(path) == STDIO


def read_jsonl(path: str | os.PathLike, skip_partial_last_line: bool = False) -> Iterator[dict]:
    """Yield one dict per non-empty line; a malformed line raises DataError naming file and line.
    `-` reads standard input.

    With `skip_partial_last_line`, a last line without a trailing newline that does not parse is
    ignored: that is what a writer killed mid-record leaves behind.
    """
    for _, record in read_jsonl_numbered(path, skip_partial_last_line):
        yield record


def _raw_lines(path: str | os.PathLike) -> tuple[Path, list[bytes]]:
    if is_stdio(path):
        return Path("<stdin>"), sys.stdin.buffer.readlines()
    path = Path(path)
    if not path.exists():
        raise DataError("file not found", path=str(path))
    if path.is_dir():
        raise DataError("is a folder; expected a JSONL file", path=str(path))
    with open(path, "rb") as f:
        return path, f.readlines()


def read_jsonl_numbered(path: str | os.PathLike, skip_partial_last_line: bool = False
                        ) -> Iterator[tuple[int, dict]]:
    """`read_jsonl` with each record's line number (for errors that name file:line)."""
    path, lines = _raw_lines(path)
    for number, raw in enumerate(lines, start=1):
        is_partial_tail = number == len(lines) and not raw.endswith(b"\n")
        if number == 1 and raw.startswith(BOM):
            raw = raw[len(BOM):]  # a UTF-8 byte-order mark some editors write first
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            if skip_partial_last_line and is_partial_tail:
                return
            raise DataError(f"not valid UTF-8 (byte {e.start + 1} of the line)",
                            path=str(path), line=number) from None
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            if skip_partial_last_line and is_partial_tail:
                return
            raise DataError(f"malformed JSON ({e.msg} at column {e.colno})", path=str(path),
                            line=number) from None
        if not isinstance(record, dict):
            raise DataError(f"expected a JSON object, got {type(record).__name__}",
                            path=str(path), line=number)
        yield number, record


def _repair_tail(path: Path) -> None:
    """Drop a trailing partial line left by a killed writer so appends start on a fresh line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        data = f.seek(0) or f.read()
        cut = data.rfind(b"\n") + 1
        f.truncate(cut)


class JsonlWriter:
    """Append records to a JSONL file, one flushed (and fsynced) line per record; `-` writes
    to standard output (flushed per line, for pipes)."""

    def __init__(self, path: str | os.PathLike, fsync: bool = True):
        self.path = Path(path)
        if is_stdio(path):
            self._file, self._fsync, self._owned = sys.stdout, False, False
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _repair_tail(self.path)
        self._file = open(self.path, "a", encoding="utf-8")
        self._fsync, self._owned = fsync, True

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._owned:
            self._file.close()

    def __enter__(self) -> "JsonlWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_jsonl(path: str | os.PathLike, records: Iterable[dict]) -> None:
    """Write all records to a fresh file (atomically replaced)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def done_ids(*paths: str | os.PathLike, key: str = "id") -> set[str]:
    """Ids already written to any of these files (missing files count as empty)."""
    seen: set[str] = set()
    for p in paths:
        if not is_stdio(p) and Path(p).exists():
            for r in read_jsonl(p, skip_partial_last_line=True):
                if key in r:
                    seen.add(str(r[key]))
    return seen


def read_rows_located(path: str | os.PathLike) -> list[tuple[str, Any]]:
    """The rows of a JSONL file or of a JSON list (AlpacaEval's files are lists), each with
    where it stands ("file:line", or "file: item i") for error messages."""
    path = Path(path)
    if not path.exists():
        raise DataError("file not found", path=str(path))
    with open(path, "r", encoding="utf-8-sig", errors="replace") as f:
        head = f.read(4096).lstrip()[:1]
    if head == "[":
        try:
            items = json.loads(path.read_text(encoding="utf-8-sig"))
        except json.JSONDecodeError as e:
            raise DataError(f"not valid JSON: {e.msg} (line {e.lineno})", path=str(path)) \
                from None
        return [(f"{path}: item {i}", row) for i, row in enumerate(items)]
    return [(f"{path}:{i}", row) for i, row in enumerate(read_jsonl(path), start=1)]


def write_json_file(path: str | os.PathLike, data: Any, indent: int | None = None) -> None:
    """A whole JSON file, written atomically (a reader never sees half of it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=indent, default=str) + "\n")
    os.replace(tmp, path)


def read_json_file(path: str | os.PathLike, what: str = "JSON file") -> Any:
    """A whole JSON file; unreadable or corrupt ones raise a DataError naming the path."""
    path = Path(path)
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise DataError(f"{what} not found", path=str(path)) from None
    except UnicodeDecodeError as e:
        raise DataError(f"corrupt {what}: not valid UTF-8 (byte {e.start + 1})",
                        path=str(path)) from None
    except json.JSONDecodeError as e:
        raise DataError(f"corrupt {what}: {e.msg} (line {e.lineno}, column {e.colno}); "
                        f"delete or repair it", path=str(path)) from None

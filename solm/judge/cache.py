"""An append-only on-disk cache of single-order verdicts.

Keyed by the judge (backend spec), the prompt version, the instruction, and the two responses
in the order shown, so a rerun, or a second evaluation that shares comparisons (the same
baseline output against the same model output, in either role), sends no request. Values are
small (the verdict, how it was read, the reply's first characters); responses are not stored.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from solm.core.jsonl import JsonlWriter, read_jsonl


def verdict_key(judge: str, version: str, instruction: str, first: str, second: str) -> str:
    blob = json.dumps([judge, version, instruction, first, second], ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


class VerdictCache:
    """`get` / `put` by key; `path=None` caches nothing."""

    FILE = "verdicts.jsonl"

    def __init__(self, folder: Path | None):
        self.path = Path(folder) / self.FILE if folder is not None else None
        self.entries: dict[str, dict] = {}
        self._writer: JsonlWriter | None = None
        if self.path is not None and self.path.exists():
            for row in read_jsonl(self.path, skip_partial_last_line=True):
                if isinstance(row.get("key"), str):
                    self.entries[row["key"]] = row

    def get(self, key: str) -> dict | None:
        return self.entries.get(key)

    def put(self, key: str, value: dict) -> None:
        row = {"key": key, **value}
        self.entries[key] = row
        if self.path is None:
            return
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = JsonlWriter(self.path, fsync=False)
        self._writer.write(row)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

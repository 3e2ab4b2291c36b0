"""The `solm.json` file that makes a training output folder self-describing."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from solm.core.jsonl import read_json_file

METADATA_FILE = "solm.json"


def read_metadata(folder: str | os.PathLike) -> dict[str, Any] | None:
    path = Path(folder) / METADATA_FILE
    if not path.exists():
        return None
    return read_json_file(path, "checkpoint metadata")


def write_metadata(folder: str | os.PathLike, meta: dict[str, Any]) -> Path:
    """Written last and atomically: its presence with complete=true marks a finished model."""
    path = Path(folder) / METADATA_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(meta, indent=2, default=str))
    os.replace(tmp, path)
    return path

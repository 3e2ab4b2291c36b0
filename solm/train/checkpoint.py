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


def resumed_schedule(checkpoint: str | os.PathLike, max_steps: int, epochs: float) -> int:
    """The optimizer steps a resumed run's checkpoint already took; refuses a run whose
    --max-steps or --epochs differ from the ones the checkpoint was started with (its
    scheduler would decay over the old total while the run stopped at the new one)."""
    path = Path(checkpoint) / "trainer_state.json"
    state = read_json_file(path, "trainer state")
    was_steps, was_epochs = state.get("max_steps"), state.get("num_train_epochs")
    how = (f"start over in a new --out (or delete {Path(checkpoint).parent}), or resume "
           "with the settings it was started with")
    was = f"{was_steps} steps ({float(was_epochs or 0):g} epochs)"
    if max_steps > 0 and was_steps is not None and int(was_steps) != max_steps:
        raise_changed(path, f"--max-steps {max_steps}", was, how)
    if max_steps <= 0 and was_epochs is not None and float(was_epochs) != float(epochs):
        raise_changed(path, f"--epochs {epochs:g}", was, how)
    return int(state.get("global_step", 0))


def raise_changed(path: Path, asked: str, was: str, how: str) -> None:
    from solm.core.errors import SolmError

    raise SolmError(f"{path}: field 'max_steps'/'num_train_epochs': this checkpoint's run was "
                    f"started for {was}; resuming it with {asked} would keep the old "
                    f"learning-rate schedule: {how}")

"""Settings written once: a dataclass field carries its default and its help, and the CLI
builds its options from the dataclass (`solm.cli.options`), so a trainer's config, its typer
command and the call between them cannot drift apart (TRL's `XConfig` beside `XTrainer`)."""

from __future__ import annotations

import dataclasses
from typing import Any


def setting(default: Any = dataclasses.MISSING, help: str = "", *, flags: tuple[str, ...] = (),
            cli_name: str | None = None, min: float | None = None, max: float | None = None,
            above: float | None = None, choices: tuple[str, ...] | None = None) -> Any:
    """A config field that is also a command-line option.

    `flags`: the option's spellings (default `--field-name`); `cli_name`: the option's name
    where it differs from the field (also its key in `--config` files, e.g. `lr`). A field
    without a default is required. `min` / `max` (inclusive), `above` (exclusive lower
    bound) and `choices` are checked before anything loads."""
    if not help:
        raise ValueError("every setting needs a help text")
    metadata = {"help": help, "flags": tuple(flags), "cli_name": cli_name, "min": min,
                "max": max, "above": above, "choices": choices}
    return dataclasses.field(default=default, metadata=metadata)


def is_setting(f: dataclasses.Field) -> bool:
    return "help" in f.metadata


def cli_name(f: dataclasses.Field) -> str:
    return f.metadata.get("cli_name") or f.name

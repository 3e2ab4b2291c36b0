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


def field_of(cls: type, name: str) -> dataclasses.Field:
    """The field `name` of the dataclass `cls`: its declaration (default, help, bounds)."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f
    raise KeyError(f"{cls.__name__} has no setting {name!r}")


def is_setting(f: dataclasses.Field) -> bool:
    return "help" in f.metadata


def cli_name(f: dataclasses.Field) -> str:
    return f.metadata.get("cli_name") or f.name


def rule_text(f: dataclasses.Field, integer: bool = False) -> str:
    """A setting's bounds in words ("in [0.1, 8]", "a finite number > 0", ...)."""
    m = f.metadata
    lo, hi, above = m.get("min"), m.get("max"), m.get("above")
    if m.get("choices"):
        return "one of " + ", ".join(m["choices"])
    if above is not None and hi is not None:
        return f"in ({above:g}, {hi:g}]"
    if lo is not None and hi is not None:
        return f"in [{lo:g}, {hi:g}]"
    kind = "an integer" if integer else "a finite number"
    if above is not None:
        return f"{kind} > {above:g}"
    if lo is not None:
        return f"{kind} >= {lo:g}"
    return kind


def check_settings(obj: Any) -> None:
    """Every setting of the dataclass `obj` within its declared bounds and choices (NaN and
    infinities refused; None passes for an optional setting); raises ValueError naming the
    field as `name must be RULE, got VALUE`."""
    import math

    for f in dataclasses.fields(obj):
        if not is_setting(f):
            continue
        value = getattr(obj, f.name)
        m = f.metadata
        if value is None or isinstance(value, bool) or isinstance(value, str) and \
                not m.get("choices"):
            continue
        integer = f.type in ("int", "Optional[int]", "int | None")
        if m.get("choices"):
            ok = value in m["choices"]
        elif isinstance(value, (int, float)):
            ok = (math.isfinite(value)
                  and (not integer or isinstance(value, int))
                  and (m.get("min") is None or value >= m["min"])
                  and (m.get("max") is None or value <= m["max"])
                  and (m.get("above") is None or value > m["above"]))
        else:
            ok = False
        if not ok:
            raise ValueError(f"{f.name} must be {rule_text(f, integer)}, got {value!r}")

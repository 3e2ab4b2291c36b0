"""A typer option made from a `setting()` field: its default, bounds, choices and help come
from the field, so a command that needs one decode or training setting takes it from its
config instead of declaring it again (a command may give its own default, or add to the
help)."""

from __future__ import annotations

import dataclasses
from typing import Any

import typer

from solm.cli.checks import one_of, within
from solm.core.settings import field_of, rule_text

_MISSING = dataclasses.MISSING


def option_for(f: dataclasses.Field, default: Any = _MISSING, *, from_model: bool = False,
               help_suffix: str = "", flags: tuple[str, ...] | None = None,
               why: str = "") -> Any:
    """The typer Option of setting `f`. `default`: the command's own (else the field's),
    which needs `why`: the reason, said in the help ("Default here: N, <why>."), so a
    default differs from its declaration in one place, for a stated reason; `from_model`:
    the option defaults to None (not given), a model's generation_config.json may set it
    (`solm.core.generation`), and the help says which default applies else."""
    meta = f.metadata
    own = default is not _MISSING and default != f.default
    if own and not why:
        raise ValueError(f"setting {f.name!r}: a command's own default ({default!r}, the "
                         f"declaration's is {f.default!r}) needs its reason (why=)")
    if default is _MISSING:
        default = ... if f.default is _MISSING else f.default
    help_text = meta["help"] + help_suffix
    if own and not from_model:
        help_text += f" Default here: {default}, {why}."
    if from_model:
        shown = default if isinstance(default, str) else f"{default:g}"
        help_text += f" Default: the model's generation_config.json, else {shown}."
        default = None
    checks = {k: meta[k] for k in ("min", "max") if meta.get(k) is not None}
    if meta.get("above") is not None:
        # an open lower end typer cannot show: one check and one wording for the whole range
        # (the help, the error and check_settings all say e.g. "in (0, 1]")
        rule = rule_text(f)
        checks = {"callback": within(rule, meta["above"], meta.get("max"))}
        help_text += f" Must be {rule}."
    elif meta.get("choices"):
        checks["callback"] = one_of(*meta["choices"])
    return typer.Option(default, *(meta["flags"] if flags is None else flags), help=help_text,
                        **checks)


def setting_option(cls: type, name: str, default: Any = _MISSING, **kw: Any) -> Any:
    """`option_for` the setting `name` of the dataclass `cls`."""
    return option_for(field_of(cls, name), default, **kw)

"""Option callbacks and path guards: values and files checked before anything loads."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Callable, Iterable

import typer

from solm.core.errors import SolmError


def one_of(*allowed: str) -> Callable:
    """Option callback: the value must be one of `allowed` (checked before anything loads)."""

    def check(value: str | None) -> str | None:
        if value is not None and value not in allowed:
            raise typer.BadParameter(f"'{value}' is not one of {', '.join(allowed)}")
        return value

    return check


def engine_list(value: str | None) -> list[str] | None:
    """Option callback: a comma-separated list of decoding engines, run side by side."""
    from solm.engines import ENGINE_CHOICES

    if value is None:
        return None
    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [n for n in names if n not in ENGINE_CHOICES]
    if not names or bad:
        raise typer.BadParameter(f"{','.join(bad) or repr(value)}: engines are "
                                 f"{', '.join(ENGINE_CHOICES)}, comma-separated")
    if len(set(names)) != len(names):
        raise typer.BadParameter(f"{value}: an engine is named twice")
    return names


def judge_spec(value: str | None) -> str | None:
    """Option callback: a judge / annotator backend spec (gemini:M, openai:M, hf:M), checked
    before anything loads."""
    if value is None:
        return None
    from solm.core.llm.spec import parse_spec

    try:
        parse_spec(value)
    except SolmError as e:
        raise typer.BadParameter(str(e)) from None
    return value


def greater_than(bound: float) -> Callable:
    """Option callback: the value must be > bound (an open lower end, which min= cannot say)."""

    def check(value: float | None) -> float | None:
        if value is not None and not value > bound:
            raise typer.BadParameter(f"must be > {bound:g}, got {value:g}")
        return value

    return check


def within(rule: str, above: float, most: float | None = None) -> Callable:
    """Option callback: above < value (<= most), the error naming the rule in words."""

    def check(value: float | None) -> float | None:
        if value is not None and not (math.isfinite(value) and value > above
                                      and (most is None or value <= most)):
            raise typer.BadParameter(f"must be {rule}, got {value:g}")
        return value

    return check


def at_least_below(least: float, below: float) -> Callable:
    """Option callback: least <= value < below."""

    def check(value: float | None) -> float | None:
        if value is not None and not (math.isfinite(value) and least <= value < below):
            raise typer.BadParameter(f"must be in [{least:g}, {below:g}), got {value:g}")
        return value

    return check


def finite_above(bound: float) -> Callable:
    """Option callback: a finite value > bound (inf and nan are refused)."""

    def check(value: float | None) -> float | None:
        if value is not None and not (math.isfinite(value) and value > bound):
            raise typer.BadParameter(f"must be a finite number > {bound:g}, got {value:g}")
        return value

    return check


def finite_at_least(bound: float) -> Callable:
    """Option callback: a finite value >= bound (inf and nan are refused)."""

    def check(value: float | None) -> float | None:
        if value is not None and not (math.isfinite(value) and value >= bound):
            raise typer.BadParameter(f"must be a finite number >= {bound:g}, got {value:g}")
        return value

    return check


def probability_mass(value: float | None) -> float | None:
    """Option callback for top-p: in (0, 1]."""
    if value is not None and not (math.isfinite(value) and 0 < value <= 1):
        raise typer.BadParameter(f"must be in (0, 1], got {value:g}")
    return value


def check_device(value: str | None) -> str | None:
    """Option callback: a device torch can use here (cpu, cuda, cuda:N, mps)."""
    if value is None:
        return None
    if not re.fullmatch(r"cpu|mps|cuda(:\d+)?", value):
        raise typer.BadParameter(f"'{value}' is not a device: use cpu, cuda, cuda:N or mps")
    if value.startswith("cuda"):
        import torch
        if not torch.cuda.is_available():
            raise typer.BadParameter(f"'{value}': this torch build sees no CUDA device")
        index = int(value.split(":")[1]) if ":" in value else 0
        if index >= torch.cuda.device_count():
            raise typer.BadParameter(f"'{value}': only {torch.cuda.device_count()} CUDA "
                                     f"device(s) here")
    if value == "mps":
        import torch
        if not torch.backends.mps.is_available():
            raise typer.BadParameter("'mps': not available on this machine")
    return value


def check_paths(inputs: Iterable[object], outputs: Iterable[object]) -> None:
    """Every command's one guard: no file it writes (output, manifest, summary, plot,
    rejects) is a file it reads, through links (`solm.core.paths.refuse_overlap`)."""
    from solm.core.paths import refuse_overlap, refuse_unwritable

    outputs = [None if o is None else str(o) for o in outputs]
    refuse_overlap([None if i is None else str(i) for i in inputs], outputs)
    refuse_unwritable(outputs)


def check_run_inputs(run_dir: Path, inputs: list) -> None:
    """A run writes everything under its folder (run.json, outputs/, judgments/,
    summary.json): no input may lie there."""
    folder = Path(run_dir).resolve()
    for source in inputs:
        if source is None or not Path(str(source)).exists():
            continue
        path = Path(str(source)).resolve()
        if path == folder or folder in path.parents:
            raise SolmError(f"{source}: lies in the run folder {run_dir}, which this command "
                            f"writes; choose another --out or move the file")
    check_paths([], [Path(run_dir) / "run.json"])  # the folder's place is writable

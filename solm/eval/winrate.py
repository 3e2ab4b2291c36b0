"""Win rates from pairwise judgments, the way AlpacaEval computes them.

A judgment's `preference` is AlpacaEval's encoding: 1 = output_1 (the baseline) better,
2 = output_2 (the model) better, fractional = soft (1 + P(output_2 better)), 1.5 or 0 = a tie.
The win rate is the mean of `preference - 1`, in percent: soft preferences count by their
confidence, ties as half. Rows whose preference is missing or outside [1, 2] are dropped, and
counted.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from solm.core.errors import DataError
from solm.core.jsonl import read_rows_located

REQUIRED = ("instruction", "output_1", "output_2", "preference")


@dataclass
class Judgment:
    instruction: str
    output_1: str
    output_2: str
    preference: float | None  # None: no verdict
    generator_1: str = "baseline"
    generator_2: str = "model"
    index: int | None = None  # position of the instruction in AlpacaEval's 805, when known
    id: str | None = None
    judge: str | None = None  # solm judgments name their judge; AlpacaEval's files do not


def _preference(value, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise DataError(f"field 'preference' must be a number in [1, 2], got {value!r}",
                        path=where)
    try:
        number = float(value)
    except ValueError:
        raise DataError(f"field 'preference' must be a number in [1, 2], got {value!r}",
                        path=where) from None
    return None if math.isnan(number) else number


def read_judgments(path: str | os.PathLike) -> list[Judgment]:
    """solm's judgments (JSONL from `pasta judge`) or AlpacaEval's annotations (a JSON list,
    or JSONL, with `instruction`, `output_1`, `output_2`, `generator_1`, `generator_2`,
    `preference`). A row that lacks a field raises DataError naming the file, row and field."""
    located = read_rows_located(path)
    out = []
    for where, row in located:
        if not isinstance(row, dict):
            raise DataError("expected an object", path=where)
        for name in REQUIRED:
            if name not in row:
                raise DataError(f"missing field '{name}'", path=where)
        for name in ("instruction", "output_1", "output_2"):
            if not isinstance(row[name], str):
                row[name] = "" if row[name] is None else str(row[name])
        index = row.get("index")
        out.append(Judgment(row["instruction"], row["output_1"], row["output_2"],
                            _preference(row["preference"], where),
                            str(row.get("generator_1") or "baseline"),
                            str(row.get("generator_2") or "model"),
                            int(index) if isinstance(index, (int, float)) and
                            not isinstance(index, bool) else None,
                            str(row["id"]) if row.get("id") is not None else None,
                            str(row["judge"]) if row.get("judge") is not None else None))
    return out


def valid_preferences(judgments: list[Judgment]) -> list[float]:
    """Preferences with a tie's legacy 0 read as 1.5, minus those missing or out of range."""
    prefs = [1.5 if j.preference == 0 else j.preference for j in judgments]
    return [p for p in prefs if p is not None and 1.0 <= p <= 2.0]


def win_rate(judgments: list[Judgment]) -> dict:
    """AlpacaEval's head-to-head figures: `win_rate` (soft, ties half) and its standard error,
    `discrete_win_rate` (each verdict rounded to a win, loss or tie), counts."""
    prefs = valid_preferences(judgments)
    n = len(prefs)
    if n == 0:
        return {"win_rate": None, "standard_error": None, "discrete_win_rate": None,
                "n": 0, "n_wins": 0, "n_wins_base": 0, "n_draws": 0,
                "n_dropped": len(judgments)}
    scores = [p - 1 for p in prefs]
    mean = sum(scores) / n
    sem = (math.sqrt(sum((s - mean) ** 2 for s in scores) / (n - 1) / n) if n > 1 else None)
    discrete = [0.5 if p == 1.5 else round(p) - 1 for p in prefs]  # half-to-even like pandas
    return {"win_rate": 100 * mean, "standard_error": None if sem is None else 100 * sem,
            "discrete_win_rate": 100 * sum(discrete) / n, "n": n,
            "n_wins": sum(s > 0.5 for s in scores), "n_wins_base": sum(s < 0.5 for s in scores),
            "n_draws": sum(p == 1.5 for p in prefs), "n_dropped": len(judgments) - n}


def recorded_judge(judgments: list[Judgment]) -> str | None:
    """The judge the judgments share, if exactly one is named."""
    judges = {j.judge for j in judgments} - {None}
    return judges.pop() if len(judges) == 1 else None

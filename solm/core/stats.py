"""Aggregates the benchmarks and reports share."""

from __future__ import annotations

import math


def geomean(values: list[float], floor: float | None = None,
            empty: float = float("nan")) -> float:
    """Geometric mean. Values <= 0 are dropped, or raised to `floor` when one is given
    (a row with no content then pulls the mean down instead of vanishing); `empty` when
    nothing is left."""
    if floor is not None:
        values = [max(v, floor) for v in values]
    values = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else empty

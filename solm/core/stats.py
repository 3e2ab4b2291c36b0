"""Aggregates the benchmarks and reports share."""

from __future__ import annotations

import math


Z95 = 1.959963984540054  # the normal quantile of a two-sided 95% interval


def geomean(values: list[float], floor: float | None = None,
            empty: float = float("nan")) -> float:
    """Geometric mean. Values <= 0 are dropped, or raised to `floor` when one is given
    (a row with no content then pulls the mean down instead of vanishing); `empty` when
    nothing is left."""
    if floor is not None:
        values = [max(v, floor) for v in values]
    values = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else empty


def repeated_ngram_share(tokens, n: int = 3) -> float:
    """Share of a sequence's n-grams that repeat an earlier n-gram of the same sequence."""
    tokens = list(tokens)
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    if not grams:
        return 0.0
    seen: set[tuple] = set()
    repeats = 0
    for g in grams:
        repeats += g in seen
        seen.add(g)
    return repeats / len(grams)


def bootstrap_geomean_ci(values: list[float], resamples: int = 2000, level: float = 0.95,
                         seed: int = 0, floor: float | None = None) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the geometric mean: the values (one per prompt, each
    already a paired ratio of method to baseline) drawn with replacement `resamples` times.
    None for fewer than two values."""
    import random

    if len(values) < 2:
        return None
    rng = random.Random(seed)
    k = len(values)
    means = sorted(geomean([values[rng.randrange(k)] for _ in range(k)], floor=floor)
                   for _ in range(resamples))
    tail = (1 - level) / 2
    return (means[int(tail * (resamples - 1))], means[int((1 - tail) * (resamples - 1))])


def wilson_interval(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    denom = 1 + z * z / n
    return max(0.0, (centre - half) / denom), min(1.0, (centre + half) / denom)

"""Scoring PASTA samples by speed and quality, and picking the best-against-worst pair.

score = theoretical speedup + λ × quality (`quality_weight`), the thesis' (`--score thesis`):

- theoretical speedup: the Baseline-SFT answer's tokens / the sample's critical path (the
  forward passes PASTA's runtime needs for it);
- quality: the sample's soft win rate in [0, 1] against the references (each judged in both
  orders, a tie worth one half);
- λ = inf orders by quality alone and breaks ties by speedup; λ = 0 is speed alone (no judge).

With `--score content` (no judge), a score that counts content instead:

score = passes saved + λ × min(1, content / the Baseline-SFT answer's content)
        - μ × repeated 3-grams

- passes saved: 1 - the sample's critical path / its own content tokens (the share of
  forward passes its parallel structure saves over writing the same text one token a step;
  length cannot raise it);
- content: the sample's text tokens over the Baseline-SFT answer's, capped at 1 (an answer
  shorter than the baseline's loses, a longer one gains nothing);
- repeated 3-grams: the share of the answer's word 3-grams repeating an earlier one (the
  evaluation's measure), weighted by μ (`repeat_weight`);
- guarded blocks: the share of the sample's blocks a guard closed (a block that ran past its
  promise + slack, or looped, lost its end), weighted by ν (`guard_weight`): promises kept
  are preferred.

Identical samples count once (n is the number of distinct samples). A malformed sample (not
valid Pasta-Lang, or cut by the runtime) scores below every well-formed one: it can be
rejected, never chosen. With a minimum length ratio, so is a sample whose text is shorter
than that share of the Baseline-SFT answer: the speedup above grows as an answer shrinks, so
without it speed alone (λ = 0) teaches a model to write less, not to write in parallel. A
prompt with no eligible sample, a single distinct sample, or a best sample that scores no
better than the worst (a tie teaches nothing), gives no pair.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

NO_WELL_FORMED = "no well-formed sample"
ALL_TOO_SHORT = "every well-formed sample shorter than --min-length-ratio allows"
ONE_DISTINCT = "a single distinct sample"
TIED = "best and worst samples score the same"


@dataclass
class Scored:
    sample: int  # the sample's index (its first copy's)
    well_formed: bool
    speedup: float
    quality: float | None  # None when nothing was judged (lambda 0)
    copies: int = 1
    extra: dict = field(default_factory=dict)
    too_short: bool = False  # under the minimum length ratio
    penalty: float = 0.0  # subtracted from the score (`--score content`: μ x repeated 3-grams)

    @property
    def eligible(self) -> bool:
        """May be chosen: well-formed and long enough."""
        return self.well_formed and not self.too_short


def sort_key(s: Scored, quality_weight: float) -> tuple:
    """Larger is better: eligible first, then the score (quality, then speedup, at inf)."""
    key = (s.eligible, score_value(s, quality_weight))
    return key + (s.speedup,) if math.isinf(quality_weight) else key


def score_value(s: Scored, quality_weight: float) -> float:
    """The score as a number (at inf: the quality; speedup breaks ties in `sort_key`)."""
    if math.isinf(quality_weight):
        return (s.quality if s.quality is not None else 0.0) - s.penalty
    return s.speedup + (quality_weight * (s.quality or 0.0) if quality_weight else 0.0) \
        - s.penalty


SCORES = ("thesis", "content")


def content_terms(content_tokens: int, critical_path: int, baseline_tokens: int,
                  response: str, repeat_weight: float) -> tuple[float, float, float]:
    """`--score content`'s (passes saved, capped content ratio, penalty) for one sample."""
    from solm.core.stats import repeated_ngram_share

    saved = 1.0 - critical_path / max(1, content_tokens)
    ratio = min(1.0, content_tokens / max(1, baseline_tokens))
    return saved, ratio, repeat_weight * repeated_ngram_share(response.split(), 3)


@dataclass
class Choice:
    chosen: Scored | None
    rejected: Scored | None
    n: int  # distinct samples
    skipped: str | None = None  # why no pair


def choose_pair(samples: Sequence[Scored], quality_weight: float) -> Choice:
    """Best eligible against worst (ties: the earlier sample is the better one, so the
    choice does not depend on how a sort breaks ties)."""
    n = len(samples)
    if n < 2:
        return Choice(None, None, n, ONE_DISTINCT)
    if not any(s.well_formed for s in samples):
        return Choice(None, None, n, NO_WELL_FORMED)
    if not any(s.eligible for s in samples):
        return Choice(None, None, n, ALL_TOO_SHORT)
    order = sorted(samples, key=lambda s: (sort_key(s, quality_weight), -s.sample),
                   reverse=True)
    best, worst = order[0], order[-1]
    if sort_key(best, quality_weight) == sort_key(worst, quality_weight):
        return Choice(None, None, n, TIED)  # a pair that prefers nothing teaches noise
    return Choice(best, worst, n)


def distinct(ids_per_sample: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """(first index, copies) for each distinct token sequence, in first-seen order."""
    first: dict[tuple[int, ...], int] = {}
    copies: dict[int, int] = {}
    for i, ids in enumerate(ids_per_sample):
        key = tuple(ids)
        if key in first:
            copies[first[key]] += 1
        else:
            first[key] = i
            copies[i] = 1
    return [(i, copies[i]) for i in first.values()]


def parse_quality_weight(text: str) -> float:
    """`--quality-weight`: a number >= 0 or `inf`."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"--quality-weight must be a number >= 0 or inf, got {text!r}") from None
    if math.isnan(value) or value < 0:
        raise ValueError(f"--quality-weight must be a number >= 0 or inf, got {text!r}")
    return value

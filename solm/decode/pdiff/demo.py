"""`pdiff demo`'s measurement: one Planned Diffusion answer timed against the baseline's
sequential decoding of as many tokens on the fastest sequential engine, side by side."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass
class RealizedTiming:
    """Decode seconds (prefill excluded from both) of each timed run, in the order run."""

    content_tokens: int
    pdiff_s: list[float] = field(default_factory=list)
    sequential_s: list[float] = field(default_factory=list)

    @property
    def pdiff_tokens_per_s(self) -> float:
        return self.content_tokens / max(min(self.pdiff_s), 1e-9)

    @property
    def sequential_tokens_per_s(self) -> float:
        return self.content_tokens / max(min(self.sequential_s), 1e-9)

    @property
    def realized(self) -> float:
        """Planned Diffusion's content tokens per second over the sequential decoding's, the
        fastest run of each (the least disturbed by anything else on the machine)."""
        return self.pdiff_tokens_per_s / self.sequential_tokens_per_s

    def to_dict(self) -> dict:
        return {"content_tokens": self.content_tokens, "pdiff_s": self.pdiff_s,
                "sequential_s": self.sequential_s,
                "pdiff_tokens_per_s": round(self.pdiff_tokens_per_s, 2),
                "sequential_tokens_per_s": round(self.sequential_tokens_per_s, 2),
                "realized": round(self.realized, 3)}


def time_side_by_side(pdiff: Callable[[], float], sequential: Callable[[], float],
                      content_tokens: int, repeats: int) -> RealizedTiming:
    """`repeats` timed runs of each side, alternating which goes first (a machine that
    speeds up or slows down over the runs then favours neither); each callable decodes
    once and returns its decode seconds."""
    out = RealizedTiming(content_tokens)
    for i in range(repeats):
        order = ((pdiff, out.pdiff_s), (sequential, out.sequential_s))
        for run, times in (order if i % 2 == 0 else order[::-1]):
            times.append(run())
    return out

"""What every engine's pass-cost probe feeds: k_max sequences of `context` tokens each, then
passes of one new token per sequence (`solm.eval.step_cost` times them)."""

from __future__ import annotations

# token ids the probes feed: any ordinary tokens do (a pass's cost does not depend on them)
FIRST_ID = 100


def context_ids(seq: int, context: int) -> list[int]:
    """The tokens already in sequence `seq`'s cache (each sequence its own)."""
    return [FIRST_ID + (seq * 7 + j) % 5000 for j in range(context)]

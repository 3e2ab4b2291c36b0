"""What every engine's pass-cost probe feeds: k_max sequences that share one context of
`context` tokens (sequence 0's: a prompt forked into k threads, as a PASTA decode does; an
engine that can share cells holds it once), then passes of one new token per sequence
(`solm.eval.step_cost` times them)."""

from __future__ import annotations

# token ids the probes feed: any ordinary tokens do (a pass's cost does not depend on them)
FIRST_ID = 100


def context_ids(seq: int, context: int) -> list[int]:
    """`context` tokens for sequence `seq` (the probes give every sequence sequence 0's)."""
    return [FIRST_ID + (seq * 7 + j) % 5000 for j in range(context)]

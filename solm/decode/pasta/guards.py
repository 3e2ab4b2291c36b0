"""The guards that keep a block to its promise, read by the runtime as each block token is
chosen (`PastaRuntime._advance`); each is a setting of `PastaDecodeConfig`, on by default.

- **Promise**: a promise `tokens="T"` announces a block of about 10·T tokens (the annotator
  writes T = ceil(tokens / 10): the smallest promise whose Pred-10X span holds the block).
  A block may run `slack(N) = max(4, N // 4)` tokens past its N = 10·T promised tokens;
  one that would run further is closed: its `</async>` takes the place of the next token.
- **Nudge** (`close_nudge`, off by default): from its promised N tokens on, a block's
  `</async>` logit rises by `close_nudge` x (tokens past N + 1) / (slack + 1), so the block
  ends where the model already leans to end it (a sentence's end) before the hard close cuts
  a sentence; the closer is still the model's own choice.
- **Repetition**: a block whose last `REPEAT_RUN` tokens occur for the k-th time in it (k =
  `block_repeats`) is looping; it is closed the same way.

A closed block's `</async>` goes through the tracker like a model-written one, so the
decoded structure is the one training builds for the same tokens.
"""

from __future__ import annotations

from typing import Sequence

REPEAT_RUN = 4  # tokens in the run the repetition guard compares
MIN_SLACK = 4


def promised_tokens(tens: int) -> int:
    """Tokens a promise of `tokens="tens"` announces."""
    return 10 * tens


def slack(promised: int) -> int:
    """Tokens a block may write past its promise before it is closed."""
    return max(MIN_SLACK, promised // 4)


def block_limit(tens: int) -> int:
    """The most content tokens (between `<async>` and `</async>`) a block of this promise
    may hold."""
    n = promised_tokens(tens)
    return n + slack(n)


def past_promise(content_tokens: int, tens: int) -> bool:
    """A block holding `content_tokens` may not take another: its next token is its closer."""
    return content_tokens >= block_limit(tens)


def close_bias(content_tokens: int, tens: int | None, nudge: float) -> float:
    """What the `close_nudge` adds to a block's `</async>` logit when it holds
    `content_tokens` under a promise of `tokens="tens"` (0 before its promised tokens)."""
    if not nudge or tens is None:
        return 0.0
    n = promised_tokens(tens)
    if content_tokens < n:
        return 0.0
    return nudge * (content_tokens - n + 1) / (slack(n) + 1)


def repeating(content: Sequence[int], times: int, run: int = REPEAT_RUN) -> bool:
    """The last `run` tokens of `content` occur `times` times or more in it (overlapping
    occurrences count); `times` 0 turns the guard off."""
    if times <= 0 or len(content) < run:
        return False
    tail = tuple(content[-run:])
    seen = sum(1 for i in range(len(content) - run + 1) if tuple(content[i:i + run]) == tail)
    return seen >= times

"""Control tokens of each system, as strings (`solm.core.vocabulary` adds them to a tokenizer).

Pasta-Lang's promise tag `<promise topic="T" tokens="N"/>` is spelled with an opening token
`<promise topic="`, free topic text, and one closing token per length `" tokens="N"/>`
(N = 1..MAX_PROMISE_TENS). A promise's predicted length is therefore carried by a single
token, which both structure() and the runtime read directly.
"""

from __future__ import annotations

PROMISE_OPEN = '<promise topic="'
MAX_PROMISE_TENS = 64
ASYNC_OPEN, ASYNC_CLOSE, SYNC = "<async>", "</async>", "<sync/>"
MASK_TOKEN = "<|mdm_mask|>"
PAD_TOKEN = "<|pdiff_pad|>"  # fills a Planned Diffusion chunk's unused slots
# distinct pad tokens a chunk's pads cycle through (Rainbow Padding, 2510.03680): one token
# for every pad concentrates probability on it and ends chunks early
PAD_CYCLE = 7


def promise_close(tens: int) -> str:
    return f'" tokens="{tens}"/>'


def pasta_tokens() -> list[str]:
    return [PROMISE_OPEN, ASYNC_OPEN, ASYNC_CLOSE, SYNC] + [
        promise_close(n) for n in range(1, MAX_PROMISE_TENS + 1)]


def pad_token(k: int) -> str:
    """The k-th pad of the cycle (the first keeps the single pad's name)."""
    return PAD_TOKEN if k == 0 else f"<|pdiff_pad_{k}|>"


def pad_cycle_tokens(cycle: int = PAD_CYCLE) -> list[str]:
    return [pad_token(k) for k in range(cycle)]


def pdiff_tokens() -> list[str]:
    return pasta_tokens() + [MASK_TOKEN, *pad_cycle_tokens()]


def tokens_to_add(tokens: list[str], present, pad_cycle: int | None = None) -> list[str]:
    """`tokens` less those `present` has, and less the pad cycle's pads past `pad_cycle`
    (None: past those `present` has, if it has the first: a model trained with one pad
    token keeps one)."""
    if pad_cycle is None:
        had = 0
        while had < PAD_CYCLE and pad_token(had) in present:
            had += 1
        pad_cycle = had or PAD_CYCLE
    dropped = set(pad_cycle_tokens()[max(1, pad_cycle):])
    return [t for t in tokens if t not in present and t not in dropped]


def register_token(i: int) -> str:
    return f"<reg_{i}>"


def tip_tokens(num_registers: int = 16) -> list[str]:
    return [register_token(i) for i in range(num_registers)]

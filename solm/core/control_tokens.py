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


def promise_close(tens: int) -> str:
    return f'" tokens="{tens}"/>'


def pasta_tokens() -> list[str]:
    return [PROMISE_OPEN, ASYNC_OPEN, ASYNC_CLOSE, SYNC] + [
        promise_close(n) for n in range(1, MAX_PROMISE_TENS + 1)]


def pdiff_tokens() -> list[str]:
    return pasta_tokens() + [MASK_TOKEN, PAD_TOKEN]


def register_token(i: int) -> str:
    return f"<reg_{i}>"


def tip_tokens(num_registers: int = 16) -> list[str]:
    return [register_token(i) for i in range(num_registers)]

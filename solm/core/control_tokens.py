"""Control tokens of each system, added to a tokenizer as whole tokens.

Pasta-Lang's promise tag `<promise topic="T" tokens="N"/>` is spelled with an opening token
`<promise topic="`, free topic text, and one closing token per length `" tokens="N"/>`
(N = 1..MAX_PROMISE_TENS). A promise's predicted length is therefore carried by a single
token, which both structure() and the runtime read directly.
"""

from __future__ import annotations

import torch

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


def system_tokens(system: str, num_registers: int = 16) -> list[str]:
    """The control tokens of a registered system (`solm.core.systems`)."""
    from solm.core.systems import get_system

    return get_system(system).control_tokens(num_registers)


def add_tokens_to_tokenizer(tokenizer, tokens: list[str]) -> int:
    """Add whole, non-normalized tokens; returns how many were new."""
    from tokenizers import AddedToken

    vocab = tokenizer.get_vocab()
    new = [AddedToken(t, special=False, normalized=False, lstrip=False, rstrip=False,
                      single_word=False) for t in tokens if t not in vocab]
    if new:
        tokenizer.add_tokens(new)
    return len(new)


def add_control_tokens(model, tokenizer, system: str, num_registers: int = 16) -> int:
    """Add `system`'s control tokens and grow the embeddings; idempotent.

    New input (and untied output) rows start at the mean of the existing rows, so the new
    tokens begin as an "average" token rather than random noise. Returns how many were added.
    """
    added = add_tokens_to_tokenizer(tokenizer, system_tokens(system, num_registers))
    if model is None:
        return added
    old = model.get_input_embeddings().weight.shape[0]
    needed = len(tokenizer)
    if needed > old:
        model.resize_token_embeddings(needed, mean_resizing=False)
        with torch.no_grad():
            emb = model.get_input_embeddings().weight
            emb[old:] = emb[:old].mean(dim=0, keepdim=True)
            out = model.get_output_embeddings()
            if out is not None and out.weight.data_ptr() != emb.data_ptr():
                out.weight[old:] = out.weight[:old].mean(dim=0, keepdim=True)
    return added

"""Growing a tokenizer and a model by a registered system's control tokens: the tokens come
from the system registry (`solm.core.systems`), their strings from `control_tokens`."""

from __future__ import annotations

import torch

from solm.core.control_tokens import tokens_to_add
from solm.core.systems import get_system


def system_tokens(system: str, num_registers: int = 16) -> list[str]:
    """The control tokens of a registered system (`solm.core.systems`)."""
    return get_system(system).control_tokens(num_registers)


def add_tokens_to_tokenizer(tokenizer, tokens: list[str], pad_cycle: int | None = None) -> int:
    """Add whole, non-normalized tokens (Planned Diffusion's pads up to `pad_cycle`; a model
    trained with one pad token keeps one: `control_tokens.tokens_to_add`); returns how many
    were new."""
    from tokenizers import AddedToken

    new = [AddedToken(t, special=False, normalized=False, lstrip=False, rstrip=False,
                      single_word=False)
           for t in tokens_to_add(tokens, tokenizer.get_vocab(), pad_cycle)]
    if new:
        tokenizer.add_tokens(new)
    return len(new)


def add_control_tokens(model, tokenizer, system: str, num_registers: int = 16,
                       pad_cycle: int | None = None) -> int:
    """Add `system`'s control tokens and grow the embeddings; idempotent.

    New input (and untied output) rows start at the mean of the existing rows, so the new
    tokens begin as an "average" token rather than random noise. TIP's registers are the
    exception: `<reg_i>` starts at the mean of the rows of the words "register i", since
    identical rows leave a model nothing to tell two registers apart by (a training step
    moves both the same way): a TIP-SFT model trained from identical rows gave `<reg_0>` and
    `<reg_1>` the same logit (32.44 against 32.46) where every trace said which. Returns how
    many were added.
    """
    added = add_tokens_to_tokenizer(tokenizer, system_tokens(system, num_registers), pad_cycle)
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
            untied = out is not None and out.weight.data_ptr() != emb.data_ptr()
            if untied:
                out.weight[old:] = out.weight[:old].mean(dim=0, keepdim=True)
            for token, words in register_words(tokenizer, old):
                emb[token] = emb[words].mean(dim=0)
                if untied:
                    out.weight[token] = out.weight[words].mean(dim=0)
    return added


def register_words(tokenizer, first_new: int) -> list[tuple[int, list[int]]]:
    """(id, ids of the words "register i") for each register token at or past `first_new`
    (the rows just added)."""
    import re

    out = []
    for text, token in tokenizer.get_added_vocab().items():
        m = re.fullmatch(r"<reg_(\d+)>", text)
        if m and token >= first_new:
            words = tokenizer(f" register {m.group(1)}", add_special_tokens=False).input_ids
            out.append((token, [w for w in words if w < first_new]))
    return [(t, w) for t, w in out if w]

"""The shape every system's structure has: who attends to whom, at which position, predicting
what, as a pure function of the token sequence.

Each system (`solm.core.systems.pasta`, `solm.core.systems.tip`, ...) reads a sequence into
per-token attributes (1-D tensors, one per name) and writes its visibility rule as small
named *mask terms*: functions of query attributes and key attributes that return a bool
tensor, elementwise with broadcasting. Terms compose with `or_masks` / `and_masks` (the
style of attention-gym's mask_mods), so a new rule is one more term, not a fork:

    visible = or_masks(main_up_to_promise, own_block, joined_after_sync)

The same term builds a dense [Q, K] mask (`pairwise`), one runtime row at a time (the
runtime's query and key slots), or a FlexAttention `mask_mod` over index tensors
(`as_mask_mod`), so training, decoding and block-sparse kernels share one definition.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Mapping

import torch

IGNORE = -100  # target of a token that predicts nothing (Hugging Face's ignore index)

Attrs = Mapping[str, torch.Tensor]
MaskTerm = Callable[[Attrs, Attrs], torch.Tensor]


def _combine(op: Callable, name: str, terms: tuple[MaskTerm, ...]) -> MaskTerm:
    if not terms:
        raise ValueError(f"{name} needs at least one term")

    def combined(q: Attrs, k: Attrs) -> torch.Tensor:
        out = terms[0](q, k)
        for term in terms[1:]:
            out = op(out, term(q, k))
        return out

    combined.__name__ = f"{name}(" + ", ".join(t.__name__ for t in terms) + ")"
    return combined


def or_masks(*terms: MaskTerm) -> MaskTerm:
    """A key is visible when any term shows it."""
    return _combine(operator.or_, "or_masks", terms)


def and_masks(*terms: MaskTerm) -> MaskTerm:
    """A key is visible when every term shows it."""
    return _combine(operator.and_, "and_masks", terms)


def pairwise(term: MaskTerm, q: Attrs, k: Attrs) -> torch.Tensor:
    """Bool [len(q), len(k)]: the term for every (query, key) pair of two attribute sets."""
    return term({n: t[:, None] for n, t in q.items()}, {n: t[None, :] for n, t in k.items()})


def as_mask_mod(term: MaskTerm, attrs: Attrs) -> Callable:
    """The term as a FlexAttention `mask_mod(b, h, q_idx, kv_idx)` over one sequence's
    attributes (queries and keys are both positions of `attrs`)."""

    def mask_mod(b, h, q_idx, kv_idx):
        return term({n: t[q_idx] for n, t in attrs.items()},
                    {n: t[kv_idx] for n, t in attrs.items()})

    return mask_mod


@dataclass
class Structure:
    """What a system's `structure()` returns, whatever the system."""

    term: MaskTerm  # the system's visibility rule over `attrs`
    position_ids: torch.Tensor  # long [T]
    targets: torch.Tensor  # long [T]: the token i predicts, IGNORE where nothing
    attrs: dict[str, torch.Tensor]  # name -> long [T]: the attributes the terms read

    @cached_property
    def visible(self) -> torch.Tensor:
        """Bool [T, T]: may token i attend to token j? Built only when asked for (a
        FlexAttention run reads the term and the attributes, never this)."""
        return pairwise(self.term, self.attrs, self.attrs)


def attention_bias(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Bool visibility -> additive float mask (0 where visible, dtype min elsewhere)."""
    bias = torch.zeros(visible.shape, dtype=dtype, device=visible.device)
    return bias.masked_fill_(~visible, torch.finfo(dtype).min)


def model_mask(visible: torch.Tensor, model) -> torch.Tensor:
    """[1, 1, q, k] mask in the form the model's attention implementation handles correctly.

    sdpa takes bool masks; eager adds the mask, so it needs an additive float mask.
    """
    impl = getattr(model.config, "_attn_implementation", "sdpa")
    mask = visible if impl == "sdpa" else attention_bias(visible, model.dtype)
    return mask[None, None]


# ---- many requests in one pool ---------------------------------------------------------
# A batched runtime keeps several requests in one KV pool; each slot carries `request` (its
# owner; -1 once freed or never written), `group` and `shared` (1 on a prompt that the
# requests of `group` share). A request sees its own slots, and the shared prompt of its
# group; anything else in the pool is another conversation. Composed with a system's term by
# `and_masks(same_request, visible)`.
BATCH_ATTR_NAMES = ("request", "group", "shared")
NO_REQUEST = -1  # the owner of a free slot: no query has it


def own_request(q: Attrs, k: Attrs) -> torch.Tensor:
    return (q["request"] == k["request"]) & (k["request"] != NO_REQUEST)


def shared_prompt(q: Attrs, k: Attrs) -> torch.Tensor:
    return (k["shared"] == 1) & (q["group"] == k["group"]) & (k["request"] != NO_REQUEST)


same_request = or_masks(own_request, shared_prompt)

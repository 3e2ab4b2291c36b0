"""Attention that also reports how much attention each key received (for H2O).

SDPA does not return attention weights, so the heavy-hitter policy runs this explicit
softmax(QK^T)V instead and adds each key's attention mass (summed over heads, queries and
layers) into the active `score_sink`.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

import torch
from transformers import AttentionInterface

SCORES_NAME = "solm_paged_scores"


class ScoreSink:
    def __init__(self):
        self.total: torch.Tensor | None = None  # [B, L]

    def add(self, probs: torch.Tensor) -> None:
        mass = probs.sum(dim=(1, 2)).float()  # [B, L]
        self.total = mass if self.total is None else self.total + mass


_SINK: ContextVar[ScoreSink | None] = ContextVar("solm_score_sink", default=None)


@contextmanager
def score_sink(enabled: bool = True) -> Iterator[ScoreSink]:
    sink = ScoreSink()
    token = _SINK.set(sink if enabled else None)
    try:
        yield sink
    finally:
        _SINK.reset(token)


def scoring_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                      **kwargs):
    groups = query.shape[1] // key.shape[1]
    if groups > 1:
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    scores = torch.matmul(query, key.transpose(-1, -2)) * scale
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, float("-inf"))
        else:
            scores = scores + attention_mask
    probs = torch.softmax(scores.float(), dim=-1).to(query.dtype)
    sink = _SINK.get()
    if sink is not None:
        sink.add(probs)
    out = torch.matmul(probs, value)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(SCORES_NAME, scoring_attention)

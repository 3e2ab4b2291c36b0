"""Ragged attention over the paged cache's gathered keys (registered with transformers).

`PagedLayer.update` returns every row's live keys concatenated along the sequence axis; this
kernel attends each row to its own slice (`PagedState.offsets`), so no row is padded to the
longest one. Query heads are folded onto their KV head ([kv_heads, group * q, d]), which
reads each shared key once instead of copying it to every query head. With a `ScoreSink`
active (H2O) it runs an explicit softmax and adds each key's attention mass (summed over
heads, queries and layers) into the sink; SDPA does not return attention weights.

transformers builds no mask for an attention implementation it has no mask function for, so
the runtime passes `attention_mask=None` and visibility comes from the state alone: q = 1
rows see all their keys; prefill rows (`state.causal`) see keys up to their own position.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

import torch

from solm.engines.torch.attention import KERNELS, attend
from solm.engines.torch.paged import PagedState

PAGED_NAME = "solm_paged"


class ScoreSink:
    """Attention mass per read key, flat over the rows' concatenated reads: [N]."""

    def __init__(self, n: int, device=None):
        self.total = torch.zeros(n, device=device)

    def add(self, start: int, probs: torch.Tensor) -> None:
        mass = probs.sum(dim=tuple(range(probs.dim() - 1))).float()
        self.total[start:start + mass.numel()] += mass


_ACTIVE: ContextVar[tuple[PagedState, ScoreSink | None] | None] = ContextVar(
    "solm_paged_reads", default=None)


@contextmanager
def paged_reads(state: PagedState, scores: bool = False) -> Iterator[ScoreSink | None]:
    """Forward passes inside the block attend through `state`; yields the sink if scoring."""
    sink = ScoreSink(state.read_flat.numel(), state.read_flat.device) if scores else None
    token = _ACTIVE.set((state, sink))
    try:
        yield sink
    finally:
        _ACTIVE.reset(token)


def _causal_rows(q: int, length: int, group: int, device) -> torch.Tensor:
    """[group * q, length] bool: query t (of each folded head) sees keys <= length - q + t."""
    return torch.ones(q, length, dtype=torch.bool, device=device).tril(length - q).repeat(group, 1)


def paged_attention(module, query, key, value, attention_mask=None, scaling=None, dropout=0.0,
                    softcap: float | None = None, **kwargs):
    active = _ACTIVE.get()
    if active is None:
        raise RuntimeError("paged attention runs only inside solm.engines.torch.paged_attention."
                           "paged_reads(state)")
    state, sink = active
    # a float32 pool read under autocast: attend in the query's (autocast) dtype
    key, value = key.to(query.dtype), value.to(query.dtype)
    b, hq, q, d = query.shape
    hkv, dv = key.shape[1], value.shape[-1]
    group = hq // hkv
    scale = scaling if scaling is not None else d ** -0.5
    out = query.new_empty(b, q, hq, dv)
    for i, (start, end) in enumerate(zip(state.offsets, state.offsets[1:])):
        k, v = key[:, :, start:end], value[:, :, start:end]  # [1, hkv, L, d]
        qi = query[i].reshape(1, hkv, group * q, d)  # head h = kv * group + j
        mask = (_causal_rows(q, end - start, group, query.device)
                if state.causal and q > 1 else None)
        if sink is None:
            o = attend(qi, k, v, mask, scale, softcap)
        else:
            s = torch.matmul(qi, k.transpose(-1, -2)) * scale
            if softcap:
                s = softcap * torch.tanh(s / softcap)
            if mask is not None:
                s = s.masked_fill(~mask, float("-inf"))
            probs = torch.softmax(s.float(), dim=-1).to(query.dtype)
            sink.add(start, probs)
            o = torch.matmul(probs, v)
        out[i] = o[0].reshape(hq, q, dv).transpose(0, 1)
    return out, None


KERNELS[PAGED_NAME] = paged_attention  # registered with transformers on first use

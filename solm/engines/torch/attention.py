"""Attention kernel for runtimes that pass their own 4D masks (registered with transformers).

transformers' sdpa path copies keys/values to every query head (`repeat_kv`) whenever a mask
is given; SDPA's `enable_gqa` reads the shared KV heads directly, which matters when the
keys are a view into a large pool. Masks: bool (True = attend) or additive float.

Segments (inside `reading_segments(...)`, with `solm_segments=True` passed to the model's
forward, a keyword transformers hands to the attention function): the query rows split into
consecutive runs, each reading only its own key slot ranges under its own mask. Many requests decoded in one pass over one pool (`SlotStep`) read
their own slots this way instead of the whole pool under one large mask: less work (a
request reads its slots, not every request's), and each request's attention is the very call
its solo decode makes (same keys in the same order, same mask shape), so its output is the
same to the bit in any dtype. One large masked call is not: SDPA's CPU kernel blocks the key
axis, and where the real keys fall within the blocks changes the bf16 result. The segments
reach the kernel through a thread-local and an opaque custom op (`solm::segmented_sdpa`), so
a compiled step traces one graph per token width whatever the segments are (no guard on
their number or lengths, no graph break per layer).
"""

from __future__ import annotations

import math
import threading
from contextlib import contextmanager
from typing import Sequence

import torch
import torch.nn.functional as F

from solm.engines.reads import Segment

NAME = "solm_pool_sdpa"


SEGMENTS_KWARG = "solm_segments"


def _slots(pool: torch.Tensor, ranges: tuple[tuple[int, int], ...]) -> torch.Tensor:
    if len(ranges) == 1:
        start, end = ranges[0]
        return pool[:, :, start:end]  # a view, like a solo decode's pool[:, :, :used]
    return torch.cat([pool[:, :, start:end] for start, end in ranges], dim=2)


def attend(query, key, value, mask, scale=None, softcap: float | None = None) -> torch.Tensor:
    """[B, H, q, D] attention reading shared KV heads directly; with `softcap` (Gemma-2's
    `attn_logit_softcapping`) each score becomes softcap * tanh(score / softcap) before the
    mask, which SDPA cannot do, so the scores are then written out."""
    gqa = key.shape[1] != query.shape[1]
    if not softcap:
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scale,
                                              enable_gqa=gqa)
    if gqa:
        group = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(group, 1), value.repeat_interleave(group, 1)
    scale = scale if scale is not None else query.shape[-1] ** -0.5
    scores = torch.matmul(query, key.transpose(-1, -2)).float() * scale
    scores = softcap * torch.tanh(scores / softcap)
    if mask is not None:
        scores = (scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool
                  else scores + mask.float())
    return torch.matmul(torch.softmax(scores, dim=-1).to(value.dtype), value)


def segmented_attention(query, key, value, segments, scaling=None,
                        softcap: float | None = None) -> torch.Tensor:
    """[B, H, q, D] attention of each segment's rows over its own key ranges."""
    outs, at = [], 0
    for seg in segments:
        outs.append(attend(query[:, :, at:at + seg.rows], _slots(key, seg.ranges),
                           _slots(value, seg.ranges), seg.mask[None, None], scaling, softcap))
        at += seg.rows
    if at != query.shape[2]:
        raise ValueError(f"segments cover {at} query rows of {query.shape[2]}")
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)


_active = threading.local()


@contextmanager
def reading_segments(segments: Sequence[Segment]):
    """The segments the attention layers of forward passes in this block (and thread) read."""
    _active.segments = segments
    try:
        yield
    finally:
        _active.segments = None


@torch.library.custom_op("solm::segmented_sdpa", mutates_args=())
def segmented_sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   scale: float, softcap: float) -> torch.Tensor:
    segments = getattr(_active, "segments", None)
    if segments is None:
        raise RuntimeError("solm_segments=True outside reading_segments(...)")
    return segmented_attention(query, key, value, segments, scale, softcap or None).contiguous()


@segmented_sdpa.register_fake
def _(query, key, value, scale, softcap):
    return query.new_empty(query.shape)


def pool_sdpa_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                        softcap: float | None = None, **kwargs):
    if kwargs.get(SEGMENTS_KWARG):
        scale = scaling if scaling is not None else 1 / math.sqrt(query.shape[-1])
        out = segmented_sdpa(query, key, value, float(scale), float(softcap or 0.0))
        return out.transpose(1, 2).contiguous(), None
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        attention_mask = attention_mask.to(query.dtype)
    out = attend(query, key, value, attention_mask, scaling, softcap)
    return out.transpose(1, 2).contiguous(), None


# solm's kernels by name, registered with transformers on first use (importing transformers'
# attention interface pulls in its whole modelling stack: seconds at every command's start)
KERNELS: dict = {NAME: pool_sdpa_attention}
_registered: set[str] = set()


def register_kernel(name: str) -> None:
    if name not in _registered:
        from transformers import AttentionInterface

        AttentionInterface.register(name, KERNELS[name])
        _registered.add(name)


@contextmanager
def attention_implementation(model, name: str = NAME):
    """Use `name` for this model's forward passes inside the block, then restore."""
    if name in KERNELS:
        register_kernel(name)
    config = model.config
    old = config._attn_implementation
    if old == name:
        yield
        return
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = old

"""Attention kernel for runtimes that pass their own 4D masks (registered with transformers).

transformers' sdpa path copies keys/values to every query head (`repeat_kv`) whenever a mask
is given; SDPA's `enable_gqa` reads the shared KV heads directly, which matters when the
keys are a view into a large pool. Masks: bool (True = attend) or additive float.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

NAME = "solm_pool_sdpa"


def pool_sdpa_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                        **kwargs):
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        attention_mask = attention_mask.to(query.dtype)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                         scale=scaling, enable_gqa=key.shape[1] != query.shape[1])
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, pool_sdpa_attention)


@contextmanager
def attention_implementation(model, name: str = NAME):
    """Use `name` for this model's forward passes inside the block, then restore."""
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

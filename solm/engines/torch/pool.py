"""One pre-allocated KV pool shared by every decoding thread, written at explicit slots.

transformers' StaticCache appends at consecutive positions of one sequence; here several
threads write their tokens into one pool in decode order, and attention reads the first
`kv_len` slots under a mask that the caller builds from structure() attributes.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin


class PoolState:
    """What the current forward pass writes (slots) and reads (first kv_len slots)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.write_slots = torch.zeros(0, dtype=torch.long)
        self.kv_len = 0
        self.kv_start = 0  # attention reads slots [kv_start, kv_len)


class PoolLayer(CacheLayerMixin):
    is_compileable = False
    is_sliding = False

    def __init__(self, state: PoolState):
        super().__init__()
        self.state = state

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        b, h, _, d = key_states.shape
        self.keys = key_states.new_zeros((b, h, self.state.capacity, d))
        self.values = value_states.new_zeros((b, h, self.state.capacity, value_states.shape[-1]))
        self.device = key_states.device
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        slots = self.state.write_slots
        self.keys.index_copy_(2, slots, key_states)
        self.values.index_copy_(2, slots, value_states)
        start, n = self.state.kv_start, self.state.kv_len
        return self.keys[:, :, start:n], self.values[:, :, start:n]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.state.kv_len - self.state.kv_start, 0

    def get_seq_length(self) -> int:
        return self.state.kv_len - self.state.kv_start

    def get_max_length(self) -> int:
        return self.state.capacity


class PoolCache(Cache):
    """A Cache whose layers all write at `state.write_slots` and read `state.kv_len` slots."""

    def __init__(self, num_layers: int, capacity: int):
        self.state = PoolState(capacity)
        super().__init__(layers=[PoolLayer(self.state) for _ in range(num_layers)])

    def allocate(self, kv_heads: int, head_dim: int, dtype: torch.dtype, device) -> None:
        """Create every layer's pool now instead of at the first forward pass (a compiled
        step must not see the pool appear)."""
        from solm.engines.torch.compiled import mark_static

        shape = (1, kv_heads, self.state.capacity, head_dim)
        for layer in self.layers:
            layer.keys = torch.zeros(shape, dtype=dtype, device=device)
            layer.values = torch.zeros(shape, dtype=dtype, device=device)
            mark_static(layer.keys, layer.values)
            layer.device = device
            layer.is_initialized = True

    def set_step(self, first_slot: int, count: int, device=None) -> None:
        self.state.write_slots = torch.arange(first_slot, first_slot + count, device=device)
        self.state.kv_len = first_slot + count

    @property
    def capacity(self) -> int:
        return self.state.capacity


def num_layers_of(model) -> int:
    from solm.core.models import text_config

    return text_config(model).num_hidden_layers


def kv_shape_of(model) -> tuple[int, int]:
    """(key/value heads, head dim) of a decoder's attention layers."""
    from solm.core.models import text_config

    cfg = text_config(model)
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    return getattr(cfg, "num_key_value_heads", None) or heads, head_dim

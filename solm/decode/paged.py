"""Paged KV cache: fixed-size pages in one pool, a page table per request, a free list.

Every layer stores keys/values as [num_pages * page_size, kv_heads, head_dim]. A forward pass
writes each new token at its slot (`write_slots`) and reads, for every batch row, only the
slots listed in `read_slots` [B, L] (padded; `attention_mask` [B, 1, q, L] marks what is real
and visible). Reading gathers just those slots, so attention work and memory traffic scale
with the live tokens of each request, not with what it has generated.
"""

from __future__ import annotations

from collections import deque

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from solm.core.errors import SolmError


class PoolExhausted(SolmError):
    """No free page left: lower --batch-size or raise --num-pages."""


class PageAllocator:
    """Free list of page ids with an owner per page (for the never-read-freed-pages check)."""

    def __init__(self, num_pages: int):
        self.num_pages = num_pages
        self.free_list: deque[int] = deque(range(num_pages))
        self.owner = torch.full((num_pages,), -1, dtype=torch.long)
        self.allocations = 0
        self.peak_in_use = 0

    def alloc(self, owner: int) -> int:
        if not self.free_list:
            raise PoolExhausted(f"KV pool of {self.num_pages} pages is full")
        page = self.free_list.popleft()
        self.owner[page] = owner
        self.allocations += 1
        self.peak_in_use = max(self.peak_in_use, self.in_use)
        return page

    def free(self, page: int) -> None:
        if self.owner[page] < 0:
            raise RuntimeError(f"page {page} freed twice")
        self.owner[page] = -1
        self.free_list.append(page)

    @property
    def in_use(self) -> int:
        return self.num_pages - len(self.free_list)


class PagedState:
    """What the current forward pass writes and reads; shared by every layer."""

    def __init__(self, num_pages: int, page_size: int):
        self.num_pages, self.page_size = num_pages, page_size
        self.write_slots = torch.zeros(0, dtype=torch.long)  # [B * q]
        self.read_slots = torch.zeros(1, 0, dtype=torch.long)  # [B, L]
        self.read_owner: torch.Tensor | None = None  # [B]: request id per row, for checks
        self.read_valid: torch.Tensor | None = None  # bool [B, L]
        self.allocator: PageAllocator | None = None
        self.check_reads = False
        self.scores: torch.Tensor | None = None  # [B, L] attention mass, when a policy asks
        self.reads = 0  # slots gathered (all layers): the memory traffic of attention

    def assert_reads_owned(self) -> None:
        """Every slot a row reads lies on a page its own request holds right now."""
        pages = self.read_slots // self.page_size
        owners = self.allocator.owner[pages]
        bad = (owners != self.read_owner[:, None]) & self.read_valid
        if bad.any():
            row, col = (int(x) for x in bad.nonzero()[0])
            raise AssertionError(f"row {row} read slot {int(self.read_slots[row, col])} on page "
                                 f"{int(pages[row, col])} owned by {int(owners[row, col])}")


class PagedLayer(CacheLayerMixin):
    is_compileable = False
    is_sliding = False

    def __init__(self, state: PagedState):
        super().__init__()
        self.state = state

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        _, h, _, d = key_states.shape
        slots = self.state.num_pages * self.state.page_size
        self.keys = key_states.new_zeros((slots, h, d))
        self.values = value_states.new_zeros((slots, h, value_states.shape[-1]))
        self.device = key_states.device
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        st = self.state
        b, h, q, d = key_states.shape
        self.keys[st.write_slots] = key_states.transpose(1, 2).reshape(b * q, h, d)
        self.values[st.write_slots] = value_states.transpose(1, 2).reshape(b * q, h, -1)
        if st.check_reads:
            st.assert_reads_owned()
        st.reads += st.read_slots.numel()
        keys = self.keys[st.read_slots].transpose(1, 2)  # [B, H, L, D]
        values = self.values[st.read_slots].transpose(1, 2)
        return keys, values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.state.read_slots.shape[1], 0

    def get_seq_length(self) -> int:
        return self.state.read_slots.shape[1]

    def get_max_length(self) -> int:
        return self.state.num_pages * self.state.page_size


class PagedCache(Cache):
    def __init__(self, num_layers: int, num_pages: int, page_size: int):
        self.state = PagedState(num_pages, page_size)
        super().__init__(layers=[PagedLayer(self.state) for _ in range(num_layers)])

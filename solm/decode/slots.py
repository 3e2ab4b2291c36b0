"""One KV pool shared by many requests: slot ranges reserved and freed, and a forward pass
that writes any slots and reads the pool under a structure's mask.

`PoolStep` writes the next consecutive slots and reads the prefix `[:used]`, which suits one
decode. Many requests come and go, so here each request reserves a contiguous range of
slots when it is admitted (`SlotAllocator`, first fit, neighbours merged when freed), writes
only there, and every step reads the pool up to the highest reserved slot under
`and_masks(same_request, visible)`: the slots of other requests, and free ones, are masked
out. Reserving a request's whole budget up front means an admitted request is never cut
for lack of room (no preemption); a request larger than the pool is refused at once.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

from solm.core.structure import NO_REQUEST, MaskTerm, pairwise
from solm.decode.attention import attention_implementation
from solm.decode.head import OutputHead
from solm.decode.pool import PoolCache, num_layers_of


class SlotAllocator:
    """Contiguous slot ranges out of `capacity` slots: `take(n)` (first fit) and `free`."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.free_ranges: list[tuple[int, int]] = [(0, capacity)]  # sorted, disjoint

    @property
    def free_slots(self) -> int:
        return sum(end - start for start, end in self.free_ranges)

    def take(self, n: int) -> tuple[int, int] | None:
        """A range of `n` free slots, or None when no free run is long enough."""
        for i, (start, end) in enumerate(self.free_ranges):
            if end - start >= n:
                if end - start == n:
                    del self.free_ranges[i]
                else:
                    self.free_ranges[i] = (start + n, end)
                return start, start + n
        return None

    def free(self, start: int, end: int) -> None:
        """Give a taken range back, merging it with free neighbours."""
        if not 0 <= start < end <= self.capacity:
            raise ValueError(f"range [{start}, {end}) is outside the pool")
        ranges = self.free_ranges
        for s, e in ranges:
            if s < end and start < e:
                raise ValueError(f"range [{start}, {end}) is already free (overlaps [{s}, {e}))")
        ranges.append((start, end))
        ranges.sort()
        merged = [ranges[0]]
        for s, e in ranges[1:]:
            if s == merged[-1][1]:
                merged[-1] = (merged[-1][0], e)
            else:
                merged.append((s, e))
        self.free_ranges = merged

    def high_water(self) -> int:
        """One past the highest slot in use (0 when the pool is empty)."""
        if self.free_ranges and self.free_ranges[-1][1] == self.capacity:
            return self.free_ranges[-1][0]
        return self.capacity


class SlotStep:
    """`step(tokens, positions, attrs, slots, kv_len)`: one forward pass writing `tokens` at
    `slots` and reading the first `kv_len` slots under `visible` (a mask term over the
    attribute names the slots carry); returns a logits row per token."""

    def __init__(self, model, pool_size: int, visible: MaskTerm, attr_names: Sequence[str]):
        self.model = model
        self.device = next(model.parameters()).device
        self.pool_size = pool_size
        self.visible = visible
        self.cache = PoolCache(num_layers_of(model), pool_size)
        self.head = OutputHead(model)
        self.attrs = {n: torch.full((pool_size,), NO_REQUEST, dtype=torch.long)
                      for n in attr_names}

    def release(self, start: int, end: int) -> None:
        """Slots no request may read any more (their owner ended)."""
        self.attrs["request"][start:end] = NO_REQUEST

    @torch.no_grad()
    def __call__(self, tokens: Sequence[int], positions: Sequence[int],
                 attrs: Mapping[str, Sequence[int]], slots: Sequence[int], kv_len: int
                 ) -> torch.Tensor:
        index = torch.tensor(list(slots), dtype=torch.long)
        for name, column in self.attrs.items():
            column[index] = torch.tensor(list(attrs[name]), dtype=torch.long)
        q = {n: c[index] for n, c in self.attrs.items()}
        k = {n: c[:kv_len] for n, c in self.attrs.items()}
        visible = pairwise(self.visible, q, k).to(self.device)
        self.cache.state.write_slots = index.to(self.device)
        self.cache.state.kv_len = kv_len
        inputs = dict(input_ids=torch.tensor([list(tokens)], device=self.device),
                      position_ids=torch.tensor([list(positions)], device=self.device),
                      attention_mask=visible[None, None], cache=self.cache, use_cache=True)
        with attention_implementation(self.model):
            return self.head.model_logits(inputs, lambda rows: rows[0])

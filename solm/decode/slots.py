"""One KV pool shared by many requests: slot ranges reserved and freed, and a forward pass
that writes any slots and reads the pool under a structure's mask.

`PoolStep` writes the next consecutive slots and reads the prefix `[:used]`, which suits one
decode. Many requests come and go, so here each request reserves a contiguous range of
slots when it is admitted (`SlotAllocator`, first fit, neighbours merged when freed), writes
only there, and each request reads its own slot ranges under `and_masks(same_request,
visible)` (attention per request, `SlotStep`). Reserving a request's whole budget up front means an admitted request is never cut
for lack of room (no preemption); a request larger than the pool is refused at once.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

from solm.core.structure import NO_REQUEST, MaskTerm, pairwise
from solm.decode.attention import SEGMENTS_KWARG, Segment, attention_implementation
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


Read = tuple[int, Sequence[tuple[int, int]]]  # (query rows, key slot ranges in order)


class SlotStep:
    """`step(tokens, positions, attrs, slots, reads)`: one forward pass writing `tokens` at
    `slots`; returns a logits row per token. `reads` splits the fed rows into consecutive runs
    (one per request), each reading its own slot ranges (its prompt, its answer so far) under
    `visible` (a mask term over the attribute names the slots carry) evaluated on those
    slots: attention per request (`solm.decode.attention.segmented_attention`), so a request
    costs what its own keys cost and gets the logits of its solo decode, in any dtype."""

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

    def segments(self, index: torch.Tensor, reads: Sequence[Read]) -> list[Segment]:
        """Each read's mask: the term over its query rows and its key slots."""
        out, at = [], 0
        for rows, ranges in reads:
            ranges = tuple((int(a), int(b)) for a, b in ranges)
            keys = torch.cat([torch.arange(a, b) for a, b in ranges])
            q = {n: c[index[at:at + rows]] for n, c in self.attrs.items()}
            k = {n: c[keys] for n, c in self.attrs.items()}
            out.append(Segment(rows, ranges, pairwise(self.visible, q, k).to(self.device)))
            at += rows
        if at != len(index):
            raise ValueError(f"reads cover {at} rows of the {len(index)} fed")
        return out

    @torch.no_grad()
    def __call__(self, tokens: Sequence[int], positions: Sequence[int],
                 attrs: Mapping[str, Sequence[int]], slots: Sequence[int],
                 reads: Sequence[Read]) -> torch.Tensor:
        index = torch.tensor(list(slots), dtype=torch.long)
        for name, column in self.attrs.items():
            column[index] = torch.tensor(list(attrs[name]), dtype=torch.long)
        segments = self.segments(index, reads)
        kv_len = max(end for seg in segments for _, end in seg.ranges)
        self.cache.state.write_slots = index.to(self.device)
        self.cache.state.kv_len = kv_len
        n = len(index)
        # the segments carry the masks; transformers still wants a 4D mask (a free view)
        unused = torch.ones(1, 1, 1, 1, dtype=torch.bool, device=self.device).expand(
            1, 1, n, kv_len)
        inputs = dict(input_ids=torch.tensor([list(tokens)], device=self.device),
                      position_ids=torch.tensor([list(positions)], device=self.device),
                      attention_mask=unused, cache=self.cache, use_cache=True,
                      **{SEGMENTS_KWARG: segments})
        with attention_implementation(self.model):
            return self.head.model_logits(inputs, lambda rows: rows[0])

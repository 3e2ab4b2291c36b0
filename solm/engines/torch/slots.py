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

from solm.core.structure import NO_REQUEST, MaskTerm
from solm.engines.reads import Read, Segment, segment_masks
from solm.engines.torch.attention import (SEGMENTS_KWARG, attention_implementation,
                                         reading_segments)
from solm.engines.torch.compiled import CompiledForward
from solm.engines.torch.pool import kv_shape_of
from solm.engines.torch.step import activation_dtype, setup_pool


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



# Token widths a compiled batched step is padded to (a batch feeds a token per thread of
# every request); wider steps, and prompts, run eagerly.
BATCH_TOKEN_BUCKETS = (1, 8, 16, 32, 64)


def batch_bucket(n: int) -> int | None:
    """The compiled width for a step of `n` tokens, None when it runs eagerly."""
    return next((b for b in BATCH_TOKEN_BUCKETS if b >= n), None)


class SlotStep:
    """`step(tokens, positions, attrs, slots, reads)`: one forward pass writing `tokens` at
    `slots`; returns a logits row per token. `reads` splits the fed rows into consecutive runs
    (one per request), each reading its own slot ranges (its prompt, its answer so far) under
    `visible` (a mask term over the attribute names the slots carry) evaluated on those
    slots: attention per request (`solm.engines.torch.attention.segmented_attention`), so a request
    costs what its own keys cost and gets the logits of its solo decode, in any dtype.

    `compile`: steps of up to 64 tokens (not prompts) run as graphs compiled per width of
    `BATCH_TOKEN_BUCKETS`; the attention is an opaque op reading the whole pool, so the key
    length is no part of a graph's shape. Padded rows write to scratch slots past
    `pool_size` and read one of them."""

    def __init__(self, model, pool_size: int, visible: MaskTerm, attr_names: Sequence[str],
                 compile: bool = False, backend: str = "inductor"):
        setup_pool(self, model, pool_size, visible,
                   pool_size + BATCH_TOKEN_BUCKETS[-1] if compile else pool_size)
        self.attrs = {n: torch.full((pool_size,), NO_REQUEST, dtype=torch.long)
                      for n in attr_names}
        if compile:
            self.cache.allocate(*kv_shape_of(model), dtype=activation_dtype(model),
                                device=self.device)
            self.compiled = CompiledForward(self._body, backend)

    @property
    def compile_s(self) -> float:
        return self.compiled.build_s if self.compiled is not None else 0.0

    def release(self, start: int, end: int) -> None:
        """Slots no request may read any more (their owner ended)."""
        self.attrs["request"][start:end] = NO_REQUEST

    def segments(self, index: torch.Tensor, reads: Sequence[Read]) -> list[Segment]:
        """Each read's mask: the term over its query rows and its key slots."""
        return [Segment(s.rows, s.ranges, s.mask.to(self.device))
                for s in segment_masks(self.attrs, self.visible, index, reads)]

    def _inputs(self, ids, positions, kv_len: int) -> dict:
        # the segments carry the masks; transformers still wants a 4D mask (a free view)
        unused = torch.ones(1, 1, 1, 1, dtype=torch.bool, device=ids.device).expand(
            1, 1, ids.shape[1], kv_len)
        return dict(input_ids=ids, position_ids=positions, attention_mask=unused,
                    cache=self.cache, use_cache=True, **{SEGMENTS_KWARG: True})

    def _body(self, ids, positions, write_slots):
        self.cache.state.write_slots = write_slots
        self.cache.state.kv_len = self.capacity
        return self.head.model_logits(self._inputs(ids, positions, self.capacity),
                                      lambda rows: rows[0], plain=True)

    @torch.no_grad()
    def __call__(self, tokens: Sequence[int], positions: Sequence[int],
                 attrs: Mapping[str, Sequence[int]], slots: Sequence[int],
                 reads: Sequence[Read], prefill: bool = False) -> torch.Tensor:
        """`prefill`: a prompt (its own shape, seen once: eager)."""
        index = torch.tensor(list(slots), dtype=torch.long)
        for name, column in self.attrs.items():
            column[index] = torch.tensor(list(attrs[name]), dtype=torch.long)
        segments = self.segments(index, reads)
        n = len(index)
        width = None if prefill or self.compiled is None else batch_bucket(n)
        with attention_implementation(self.model):
            if width is not None:
                return self._compiled(list(tokens), list(positions), index, segments, width)
            kv_len = max(end for seg in segments for _, end in seg.ranges)
            self.cache.state.write_slots = index.to(self.device)
            self.cache.state.kv_len = kv_len
            ids = torch.tensor([list(tokens)], device=self.device)
            pos = torch.tensor([list(positions)], device=self.device)
            with reading_segments(segments):
                return self.head.model_logits(self._inputs(ids, pos, kv_len),
                                              lambda rows: rows[0])

    def _compiled(self, tokens: list[int], positions: list[int], index: torch.Tensor,
                  segments: list[Segment], width: int) -> torch.Tensor:
        n, pad = len(tokens), width - len(tokens)
        if pad:
            scratch = self.pool_size
            segments = [*segments, Segment(pad, ((scratch, scratch + 1),),
                                           torch.ones(pad, 1, dtype=torch.bool,
                                                      device=self.device))]
            index = torch.cat([index, torch.arange(scratch, scratch + pad)])
        ids = torch.tensor([tokens + [0] * pad], device=self.device)
        pos = torch.tensor([positions + [0] * pad], device=self.device)
        with reading_segments(segments):
            return self.compiled(ids, pos, index.to(self.device))[:n]

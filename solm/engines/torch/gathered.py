"""The batched step with every input a tensor: what a CUDA graph can replay.

`SlotStep` attends per request through an opaque op that reads Python-side segments (the
ranges and masks of each request): exact to the bit against a solo decode, and cheap on a
CPU, but a CUDA graph would freeze the segments of the pass it captured. Here each fed token
is a batch row of its own (one query) that gathers the key slots its request reads into a
padded row of `read_index`, under a bool mask row from the same segments
(`solm.engines.reads.segment_masks`: the system's term, evaluated on the device over the
slots' attribute columns, which live there): ids, positions, mask, slots to write and slots
to read are tensors, so a graph per (rows, keys) bucket replays any pass of that
shape. The keys live in a `PagedCache` of one-slot pages (the pool), written before they are
read, so tokens of one pass see each other where the term says so, as in `SlotStep`.

Rows are padded to `BATCH_TOKEN_BUCKETS`, keys to a power of two (at least `KV_BLOCK`); padded
rows write and read a scratch slot past the pool. Prompts (`prefill`) run eagerly, a row per
prompt token. The logits equal `SlotStep`'s up to float summation order (< 1e-5 in fp32);
`slot_step` picks this step on CUDA and `SlotStep` elsewhere.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

from solm.core.structure import NO_REQUEST, MaskTerm
from solm.engines.reads import Read, segment_masks
from solm.engines.torch.attention import attention_implementation
from solm.engines.torch.compiled import KV_BLOCK, CompiledForward, kv_bucket, paged_body
from solm.engines.torch.head import OutputHead
from solm.engines.torch.paged import PagedCache
from solm.engines.torch.pool import kv_shape_of, num_layers_of
from solm.engines.torch.slots import BATCH_TOKEN_BUCKETS, SlotStep, batch_bucket
from solm.engines.torch.step import activation_dtype


class GatheredSlotStep:
    """`SlotStep`'s call (`step(tokens, positions, attrs, slots, reads, prefill)` -> logits
    [n, V]) and `release`, on tensor inputs only."""

    def __init__(self, model, pool_size: int, visible: MaskTerm, attr_names: Sequence[str],
                 compile: bool = False, backend: str = "inductor"):
        self.model, self.pool_size, self.visible = model, pool_size, visible
        self.device = next(model.parameters()).device
        self.capacity = pool_size
        self.scratch = pool_size  # the slot padded rows write and read
        self.cache = PagedCache(num_layers_of(model), pool_size, 1, extra_slots=1)
        self.cache.allocate(*kv_shape_of(model), dtype=activation_dtype(model),
                            device=self.device)
        self.head = OutputHead(model)
        self.attrs = {n: torch.full((pool_size,), NO_REQUEST, dtype=torch.long,
                                    device=self.device) for n in attr_names}
        self.compiled = (CompiledForward(paged_body(model, self.cache, self.head), backend,
                                         cudagraphs=self.device.type == "cuda")
                         if compile else None)
        self._eager = paged_body(model, self.cache, self.head)

    @property
    def compile_s(self) -> float:
        return self.compiled.build_s if self.compiled is not None else 0.0

    def release(self, start: int, end: int) -> None:
        self.attrs["request"][start:end] = NO_REQUEST

    def inputs(self, tokens: Sequence[int], positions: Sequence[int],
               attrs: Mapping[str, Sequence[int]], slots: Sequence[int],
               reads: Sequence[Read], rows: int) -> tuple[torch.Tensor, ...]:
        """The pass as tensors on the device, padded to `rows` rows: ids [rows, 1],
        positions [rows, 1], mask [rows, 1, 1, L], slots to write [rows], slots to read
        [rows * L]."""
        dev = self.device
        index = torch.tensor(list(slots), dtype=torch.long, device=dev)
        for name, column in self.attrs.items():
            column[index] = torch.tensor(list(attrs[name]), dtype=torch.long, device=dev)
        # the masks are the term evaluated on the device, over the slots' attribute columns
        segments = segment_masks(self.attrs, self.visible, index, reads)
        longest = max(sum(b - a for a, b in s.ranges) for s in segments)
        n = len(index)
        length = longest if rows == n and self.compiled is None \
            else kv_bucket(longest, KV_BLOCK, max(self.capacity + 1, KV_BLOCK))
        read = torch.full((rows, length), self.scratch, dtype=torch.long, device=dev)
        mask = torch.zeros(rows, length, dtype=torch.bool, device=dev)
        at = 0
        for seg in segments:
            keys = torch.cat([torch.arange(a, b, device=dev) for a, b in seg.ranges])
            read[at:at + seg.rows, :len(keys)] = keys
            mask[at:at + seg.rows, :len(keys)] = seg.mask
            at += seg.rows
        mask[n:, 0] = True
        pad = rows - n
        write = torch.cat([index, torch.full((pad,), self.scratch, dtype=torch.long,
                                             device=dev)])
        return (torch.tensor([list(tokens) + [0] * pad], device=dev).T,
                torch.tensor([list(positions) + [0] * pad], device=dev).T,
                mask[:, None, None], write, read.view(-1))

    @torch.no_grad()
    def __call__(self, tokens: Sequence[int], positions: Sequence[int],
                 attrs: Mapping[str, Sequence[int]], slots: Sequence[int],
                 reads: Sequence[Read], prefill: bool = False) -> torch.Tensor:
        n = len(tokens)
        width = None if prefill or self.compiled is None else batch_bucket(n)
        args = self.inputs(tokens, positions, attrs, slots, reads, width or n)
        with attention_implementation(self.model):
            if width is not None:
                return self.compiled(*args)[:n]
            return self._eager(*args)


def slot_step(model, pool_size: int, visible: MaskTerm, attr_names: Sequence[str],
              compile: bool = False, backend: str = "inductor"):
    """The batched step for where the model lives: on CUDA the all-tensor step that graphs
    replay (`GatheredSlotStep`), elsewhere `SlotStep` (attention per request, bit-exact
    against a solo decode, no padding)."""
    cls = GatheredSlotStep if next(model.parameters()).device.type == "cuda" else SlotStep
    return cls(model, pool_size, visible, attr_names, compile=compile, backend=backend)


__all__ = ["BATCH_TOKEN_BUCKETS", "GatheredSlotStep", "slot_step"]

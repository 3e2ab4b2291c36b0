"""The batched step as one graph: inputs built on the device from one upload, attention over
the pool where the keys live, the mask evaluated there from the slots' attributes.

`SlotStep` attends per request through an op that reads Python-side segments: exact and
cheap on a CPU, but its host work grows with the batch and a CUDA graph would freeze the
segments it captured. Here a pass is a fixed set of device ops whatever the batch:

- **One upload.** The pass's host data (every fed token's id, position, slot and attribute
  values) is packed into one flat integer list and copied once: from a pinned staging
  buffer without blocking on CUDA, a plain tensor on a CPU. Everything else is sliced from
  it on the device.
- **Attributes on the device.** Each pool slot keeps the attributes the system's mask term
  reads (`request`, `thread`, `order`, ...), written at the fed slots by one `index_copy_`
  per attribute; the mask of a pass is the term over the fed rows' attributes against every
  slot's (`pairwise`), evaluated on the device: no per-request work.
- **Attention in place.** Each layer writes the fed keys and values at their slots and
  attends over the pool tensors themselves (a view, no copy): a decode pass over the whole
  pool, whose shape never changes as contexts grow (one graph per row bucket, none built
  while a decode runs); a prefill over the window of slots its reads cover (a prompt reads
  its own slots: the memory of a plain causal forward of it).
- **Row buckets.** Compiled passes pad their rows to `ROW_BUCKETS` (1 ... 256); padded rows
  write and read a scratch slot past the pool. `warm_up` builds every bucket a decode will
  use before it starts; `compile_s` is the time that took, reported apart.

Logits equal `SlotStep`'s up to float summation order (< 1e-5 in fp32). Kernel: attention
runs through solm's SDPA wrapper (`solm.engines.torch.attention.attend`: shared key/value
heads read directly, `enable_gqa`) with a boolean mask, named by `kernel`.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

from solm.core.structure import NO_REQUEST, MaskTerm, pairwise
from solm.engines.reads import Read
from solm.engines.torch.attention import attention_implementation
from solm.engines.torch.compiled import CompiledForward
from solm.engines.torch.head import OutputHead
from solm.engines.torch.pool import PoolCache, kv_shape_of, num_layers_of
from solm.engines.torch.step import activation_dtype

ROW_BUCKETS = (1, 8, 16, 32, 64, 128, 256)
SCRATCH_REQUEST = -2  # the scratch slot's owner: no real row reads it


def row_bucket(n: int) -> int | None:
    """The compiled width of a pass of `n` rows, None past the largest bucket."""
    return next((b for b in ROW_BUCKETS if b >= n), None)


class DeviceSlotStep:
    """`SlotStep`'s call (`step(tokens, positions, attrs, slots, reads, prefill)` -> logits
    [n, V]) and `release`, a pass built from one upload (module docstring)."""

    kernel = "sdpa (solm.engines.torch.attention.attend, bool mask over the pool, enable_gqa)"

    def __init__(self, model, pool_size: int, visible: MaskTerm, attr_names: Sequence[str],
                 compile: bool = False, backend: str = "inductor"):
        self.model, self.pool_size, self.visible = model, pool_size, visible
        self.device = next(model.parameters()).device
        self.scratch = pool_size  # the slot padded rows write and read
        self.capacity = pool_size + 1
        self.names = tuple(attr_names)
        self.cache = PoolCache(num_layers_of(model), self.capacity)
        self.cache.allocate(*kv_shape_of(model), dtype=activation_dtype(model),
                            device=self.device)
        self.head = OutputHead(model)
        self.attrs = {n: torch.full((self.capacity,), NO_REQUEST, dtype=torch.long,
                                    device=self.device) for n in self.names}
        self.attrs["request"][self.scratch] = SCRATCH_REQUEST
        self.compiled = (CompiledForward(self._body, backend,
                                         cudagraphs=self.device.type == "cuda")
                         if compile else None)
        self._pinned: torch.Tensor | None = None
        self._released: list[int] = []
        self.compile_s = 0.0

    def release(self, start: int, end: int) -> None:
        """Slots no request may read any more: freed at the next pass, from its upload (a
        pass where many requests end costs no op per request)."""
        self._released.extend(range(start, end))

    # ---- one upload ----------------------------------------------------------------------

    def _upload(self, values: list[int]) -> torch.Tensor:
        """The pass's host data on the device, copied once."""
        if self.device.type != "cuda":
            return torch.tensor(values, dtype=torch.long)
        if self._pinned is None or self._pinned.numel() < len(values):
            self._pinned = torch.empty(max(len(values), 4096), dtype=torch.long).pin_memory()
        staged = self._pinned[:len(values)]
        staged.copy_(torch.tensor(values, dtype=torch.long))
        return staged.to(self.device, non_blocking=True)

    STAGED = "step"  # its part's name in a pass's staging

    def inputs(self, tokens: Sequence[int], positions: Sequence[int],
               attrs: Mapping[str, Sequence[int]], slots: Sequence[int], rows: int,
               staging=None) -> tuple[torch.Tensor, ...]:
        """ids [1, rows], positions [1, rows], slots to write [rows] and the rows'
        attributes [A, rows], all sliced from one upload (the pass's `staging`, shared with
        its sampling, where given); rows past the fed ones are padding (the scratch slot,
        the scratch owner)."""
        n, pad = len(tokens), rows - len(tokens)
        columns = [list(attrs[name]) + [SCRATCH_REQUEST if name == "request" else 0] * pad
                   for name in self.names]
        released, self._released = self._released, []
        values = [*tokens, *[0] * pad, *positions, *[0] * pad, *slots, *[self.scratch] * pad,
                  *(v for c in columns for v in c), *released]
        if staging is not None:
            staging.put(self.STAGED, values)
            flat = staging.get(self.STAGED).long()
        else:
            flat = self._upload(values)
        body = (3 + len(self.names)) * rows
        if released:  # slots of requests that ended: nobody's from now on
            self.attrs["request"].index_fill_(0, flat[body:], NO_REQUEST)
        table = flat[:body].view(3 + len(self.names), rows)
        return table[0][None], table[1][None], table[2], table[3:]

    # ---- the pass ------------------------------------------------------------------------

    def _mask(self, row_attrs: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        """[rows, hi - lo]: the term over the fed rows against slots [lo, hi); a padded row
        sees the scratch slot only."""
        q = {name: row_attrs[i] for i, name in enumerate(self.names)}
        k = {name: column[lo:hi] for name, column in self.attrs.items()}
        mask = pairwise(self.visible, q, k)
        if hi > self.scratch >= lo:
            scratch = (q["request"] == SCRATCH_REQUEST)[:, None] & (
                torch.arange(lo, hi, device=mask.device) == self.scratch)[None, :]
            mask = mask | scratch
        return mask

    def _body(self, ids, positions, write, row_attrs):
        """The compiled function: write the rows' attributes and keys, attend over the whole
        pool (its shape fixed: one graph per row bucket)."""
        return self._forward(ids, positions, write, row_attrs, 0, self.capacity, plain=True)

    def _forward(self, ids, positions, write, row_attrs, lo: int, hi: int, plain=False):
        for i, name in enumerate(self.names):
            self.attrs[name].index_copy_(0, write, row_attrs[i])
        mask = self._mask(row_attrs, lo, hi)
        state = self.cache.state
        state.write_slots, state.kv_start, state.kv_len = write, lo, hi
        inputs = dict(input_ids=ids, position_ids=positions, attention_mask=mask[None, None],
                      cache=self.cache, use_cache=True)
        return self.head.model_logits(inputs, lambda rows: rows[0], plain=plain)

    stages = True  # takes a pass's `staging` (`solm.engines.staging`): one upload a pass

    @torch.no_grad()
    def __call__(self, tokens: Sequence[int], positions: Sequence[int],
                 attrs: Mapping[str, Sequence[int]], slots: Sequence[int],
                 reads: Sequence[Read], prefill: bool = False, staging=None) -> torch.Tensor:
        n = len(tokens)
        width = None if prefill or self.compiled is None else row_bucket(n)
        with attention_implementation(self.model):
            if width is not None:
                args = self.inputs(tokens, positions, attrs, slots, width, staging)
                before = self.compiled.build_s
                out = self.compiled(*args)[:n]
                self.compile_s += self.compiled.build_s - before
                return out
            ids, pos, write, row_attrs = self.inputs(tokens, positions, attrs, slots, n,
                                                     staging)
            if prefill:  # the window of slots the reads cover: a prompt reads its own
                lo = min(a for _, ranges in reads for a, _ in ranges)
                hi = max(b for _, ranges in reads for _, b in ranges)
            else:
                lo, hi = 0, self.capacity
            return self._forward(ids, pos, write, row_attrs, lo, hi)

    @torch.no_grad()
    def warm_up(self, max_rows: int) -> float:
        """Build, now, the graph of every row bucket a decode of up to `max_rows` rows per
        pass uses (padded rows only: nothing real is written); returns the seconds it took,
        which no decode's time includes."""
        if self.compiled is None:
            return 0.0
        before = self.compiled.build_s
        with attention_implementation(self.model):
            for width in ROW_BUCKETS:
                attrs = {name: [SCRATCH_REQUEST if name == "request" else 0] * width
                         for name in self.names}
                self.compiled(*self.inputs([0] * width, [0] * width, attrs,
                                           [self.scratch] * width, width))
                if width >= max_rows:
                    break
        self.compile_s += self.compiled.build_s - before
        return self.compiled.build_s - before

    @property
    def graphs(self) -> int:
        return self.compiled.compiles if self.compiled is not None else 0


def slot_step(model, pool_size: int, visible: MaskTerm, attr_names: Sequence[str],
              compile: bool = False, backend: str = "inductor", device_step: bool | None = None):
    """The batched step for where the model lives: on CUDA the step one graph replays
    (`DeviceSlotStep`), elsewhere `SlotStep` (attention per request, bit-exact against a
    solo decode, no padding, cheapest on a CPU); `device_step` forces either."""
    from solm.engines.torch.slots import SlotStep

    if device_step is None:
        device_step = next(model.parameters()).device.type == "cuda"
    cls = DeviceSlotStep if device_step else SlotStep
    return cls(model, pool_size, visible, attr_names, compile=compile, backend=backend)

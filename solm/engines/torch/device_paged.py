"""TIP's paged KV as one graph a pass: the torch engine's answer to the paged step's host work.

The paged runtime (`solm.decode.tip.runtime`, ragged reads) gathers each row's live slots on
the host side of every pass: tensors per row, uploads per row. Here the cells keep their
owner (the row) and their token index on the device, and a pass is a fixed set of ops:

- a row's cells come in extents of `extent` cells (its prompt in one, so a prefill attends
  over one contiguous window: a plain causal forward's memory), a token at its extent's next
  cell; an extent whose every token the policy stopped showing goes back to the allocator;
- what the policy stopped showing since the last pass (hidden for good: no policy shows a
  token again) has its cells' owner cleared, from the pass's one upload, beside the fed
  tokens' ids, positions, cells, owners and token indices;
- the mask of a pass is `owner == row's owner & token index <= the row's` over the whole
  pool (a prefill: over its window), evaluated on the device; attention reads the pool in
  place.

It speaks the paged engines' interface (`forward(rows, tokens, positions, visible)` -> the
last logits of each row, `end(row)`), so `TipRuntime(kv=...)` runs on it; H2O, which reads
each pass's attention mass, stays on the runtime's own paged step.
"""

from __future__ import annotations

from typing import Sequence

import torch

from solm.engines.torch.attention import attention_implementation
from solm.engines.torch.head import OutputHead
from solm.engines.torch.pool import PoolCache, kv_shape_of, num_layers_of
from solm.engines.torch.slots import SlotAllocator
from solm.engines.torch.step import activation_dtype

NOBODY = -1


class _Cells:
    """One row's books: its owner id, its extents and the cell of each token it wrote."""

    def __init__(self, owner: int):
        self.owner = owner
        self.extents: list[list[int]] = []  # [start, end, tokens live in it, cells used]
        self.cell_of: dict[int, tuple[int, int]] = {}  # token index -> (cell, extent index)
        self.shown: set[int] = set()


class DevicePagedKV:
    """TIP's paged KV on the device (module docstring)."""

    stages = True
    kernel = "sdpa (solm.engines.torch.attention.attend, bool mask over the pool, enable_gqa)"

    def __init__(self, model, cells: int, extent: int = 64):
        self.model, self.extent = model, extent
        self.device = next(model.parameters()).device
        self.cells = cells
        self.cache = PoolCache(num_layers_of(model), cells)
        self.cache.allocate(*kv_shape_of(model), dtype=activation_dtype(model),
                            device=self.device)
        self.head = OutputHead(model)
        self.owner = torch.full((cells,), NOBODY, dtype=torch.long, device=self.device)
        self.order = torch.zeros(cells, dtype=torch.long, device=self.device)
        self.allocator = SlotAllocator(cells)
        self._rows: dict[int, _Cells] = {}
        self._owners = 0
        self._hidden: list[int] = []  # cells to clear at the next pass

    def _books(self, row) -> _Cells:
        books = self._rows.get(id(row))
        if books is None:
            self._owners += 1
            books = self._rows[id(row)] = _Cells(self._owners)
        return books

    def _cell(self, books: _Cells, token: int, room: int) -> int:
        """The cell of a new token: the next of its last extent, or a fresh extent (of at
        least `room` cells: a prompt's whole length)."""
        last = books.extents[-1] if books.extents else None
        if last is None or last[0] + last[3] >= last[1]:
            span = self.allocator.take(max(self.extent, room))
            if span is None:
                raise RuntimeError(f"the device pool of {self.cells} cells is full")
            books.extents.append([span[0], span[1], 0, 0])
        k = len(books.extents) - 1
        extent = books.extents[k]
        cell = extent[0] + extent[3]
        books.cell_of[token] = (cell, k)
        extent[2] += 1
        extent[3] += 1
        return cell

    def _hide(self, books: _Cells, shown: set[int]) -> None:
        """Tokens the policy stopped showing: their cells cleared at this pass, an extent
        with no live token left freed."""
        gone = books.shown - shown
        if any(t not in books.shown for t in shown if t in books.cell_of):
            raise RuntimeError("an eviction policy showed a token again after hiding it")
        for t in gone:
            cell, k = books.cell_of[t]
            self._hidden.append(cell)
            books.extents[k][2] -= 1
            if books.extents[k][2] == 0 and k < len(books.extents) - 1:
                self.allocator.free(books.extents[k][0], books.extents[k][1])
                books.extents[k][2] = -1  # freed
        books.shown -= gone

    def end(self, row) -> None:
        books = self._rows.pop(id(row), None)
        if books is None:
            return
        for start, end, live, _ in books.extents:
            if live >= 0:
                self.allocator.free(start, end)
        self._hidden += [cell for cell, _ in books.cell_of.values()]

    @torch.no_grad()
    def forward(self, rows: Sequence, tokens: Sequence[Sequence[int]],
                positions: Sequence[Sequence[int]], visible: Sequence, staging=None
                ) -> torch.Tensor:
        ids, pos, cells, owners, orders, last = [], [], [], [], [], []
        window = None
        for row, toks, ps, vis in zip(rows, tokens, positions, visible):
            books = self._books(row)
            shown = {t for page, n in vis for t in page.tokens[:n]}
            fresh = sorted(shown - set(books.cell_of))[-len(toks):] if toks else []
            self._hide(books, shown - set(fresh))
            for tok, p, t in zip(toks, ps, fresh):
                cells.append(self._cell(books, t, len(toks)))
                ids.append(int(tok))
                pos.append(int(p))
                owners.append(books.owner)
                orders.append(t)
            books.shown |= set(fresh)
            last.append(len(ids) - 1)
            if len(toks) > 1:  # a prefill: one row, its prompt's contiguous cells
                window = (cells[-len(toks)], cells[-1] + 1)
        hidden, self._hidden = self._hidden, []
        n, b = len(ids), len(last)
        values = [*ids, *pos, *cells, *owners, *orders, *last, *hidden]
        if staging is not None:
            staging.put("paged", values)
            flat = staging.get("paged").long()
        else:
            flat = torch.tensor(values, dtype=torch.long)
            if self.device.type != "cpu":
                flat = flat.to(self.device, non_blocking=True)
        t_ids, t_pos, t_cells, t_owner, t_order = flat[:5 * n].view(5, n)
        t_last = flat[5 * n:5 * n + b]
        if hidden:
            self.owner.index_fill_(0, flat[5 * n + b:], NOBODY)
        self.owner.index_copy_(0, t_cells, t_owner)
        self.order.index_copy_(0, t_cells, t_order)
        lo, hi = window if window is not None else (0, self.cells)
        mask = (self.owner[lo:hi][None, :] == t_owner[:, None]) & (
            self.order[lo:hi][None, :] <= t_order[:, None])
        state = self.cache.state
        state.write_slots, state.kv_start, state.kv_len = t_cells, lo, hi
        inputs = dict(input_ids=t_ids[None], position_ids=t_pos[None],
                      attention_mask=mask[None, None], cache=self.cache, use_cache=True)
        with attention_implementation(self.model):
            logits = self.head.model_logits(inputs, lambda h: h[0])
        return logits.index_select(0, t_last)

"""The decode systems' steps on ONNX Runtime: the same calls as torch's (`SlotStep`,
`PoolStep`, TIP's paged KV), each pass one session run whose bias is the structure's mask.

Unlike llama.cpp, a pass here takes any mask, so nothing is re-expressed: the slot steps
evaluate the very mask term torch's steps evaluate (`solm.engines.reads.segment_masks` over
the same attribute columns) and hand it to the graph as an additive bias over the cells
the pass reads. Every layout runs (Pred-10X included), a `<sync/>` joins in the pass that
feeds it, and logits equal torch's up to float rounding (fp32 weights)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from solm.core.one_request_pool import OneRequestPool
from solm.core.structure import BATCH_ATTR_NAMES, NO_REQUEST, MaskTerm, and_masks, same_request
from solm.engines.reads import Read, segment_masks
from solm.engines.onnxruntime.session import OrtModel


def structure_of(kind: str, columns) -> MaskTerm:
    """The mask term torch's own step of `kind` evaluates for a pass with these attribute
    columns: PASTA's or Skeleton-of-Thought's for `slots` (told apart by their columns),
    Planned Diffusion's for `pdiff`."""
    from solm.core.systems import pasta, pdiff, sot

    names = set(columns) - set(BATCH_ATTR_NAMES)
    if kind == "pdiff":
        return and_masks(same_request, pdiff.pdiff_visible)
    if names == set(pasta.ATTR_NAMES):
        return and_masks(same_request, pasta.pasta_visible)
    if names == set(sot.ATTR_NAMES):
        return and_masks(same_request, sot.sot_visible)
    raise ValueError(f"no system's step reads the columns {sorted(columns)}")


class OrtSlotStep:
    """`SlotStep`'s call (tokens, positions, attribute columns, slots, reads) on an
    `OrtModel` whose pool is this step's slots."""

    compile_s = 0.0
    join_before_sync = False  # the bias joins a block in the very pass its sync is fed

    def __init__(self, model: OrtModel, kind: str = "slots"):
        self.model, self.kind = model, kind
        self.pool_size = model.cells
        self.attrs: dict[str, torch.Tensor] = {}
        self.visible: MaskTerm | None = None

    def _columns(self, columns) -> None:
        if self.visible is None:
            self.visible = structure_of(self.kind, columns)
            self.attrs = {n: torch.full((self.pool_size,), NO_REQUEST, dtype=torch.long)
                          for n in columns}

    def release(self, start: int, end: int) -> None:
        if "request" in self.attrs:
            self.attrs["request"][start:end] = NO_REQUEST

    @torch.no_grad()
    def __call__(self, tokens: Sequence[int], positions: Sequence[int], columns: dict,
                 slots: Sequence[int], reads: Sequence[Read], prefill: bool = False
                 ) -> torch.Tensor:
        """Logits of every token fed; in a prefill, of each read group's last token only
        (what a runtime reads of a prompt)."""
        self._columns(columns)
        index = torch.tensor(list(slots), dtype=torch.long)
        for name, column in self.attrs.items():
            column[index] = torch.tensor(list(columns[name]), dtype=torch.long)
        segments = segment_masks(self.attrs, self.visible, index, reads)
        written = index.numpy()
        groups = [(seg.rows, _keys(seg.ranges), seg.mask.numpy()) for seg in segments]
        ends = set((np.cumsum([seg.rows for seg in segments]) - 1).tolist())
        out = []
        runs = (prefill_chunks(groups, len(written)) if reads_only_earlier_runs(
            groups, written, PREFILL_ROWS) else [(0, len(written), groups)])
        for a, b, chunk in runs:
            # a long pass (a prompt) in runs of PREFILL_ROWS rows: each run's bias is
            # [rows, cells read] (earlier runs' cells are in the pool by then), never
            # prompt x prompt
            read_slots, bias = pass_bias(written[a:b], chunk, self.pool_size)
            rows = [i - a for i in range(a, b) if i in ends] if prefill else None
            logits = self.model.forward(tokens[a:b], positions[a:b], read_slots, bias,
                                        written[a:b], rows)
            if rows is None or rows:
                out.append(logits)
        return torch.cat(out)


PREFILL_ROWS = 256  # rows of one prefill run (its bias: PREFILL_ROWS x the cells it reads)


def reads_only_earlier_runs(groups: Sequence[tuple[int, np.ndarray, np.ndarray]],
                            written: np.ndarray, size: int) -> bool:
    """Whether a pass can run in runs of `size` rows: no fed row reads a cell that a later
    run writes (true of a prompt, which is causal; not of a Planned Diffusion chunk, whose
    slots read each other both ways)."""
    if len(written) <= size:
        return False  # one run already
    run_of_cell = {int(c): i // size for i, c in enumerate(written)}
    at = 0
    for rows, keys, mask in groups:
        fed = np.array([run_of_cell.get(int(k), -1) for k in keys])
        row_runs = (at + np.arange(rows)) // size
        if (mask & (fed[None, :] > row_runs[:, None])).any():
            return False
        at += rows
    return True


def prefill_chunks(groups: Sequence[tuple[int, np.ndarray, np.ndarray]], total: int,
                   size: int | None = None):
    """(first row, end row, its groups) of consecutive runs of at most `size` fed rows, each
    group cut to the rows the run holds (its keys and its mask's rows for them)."""
    size = size or PREFILL_ROWS
    for a in range(0, total, size):
        b = min(total, a + size)
        chunk, at = [], 0
        for rows, keys, mask in groups:
            lo, hi = max(a, at), min(b, at + rows)
            if lo < hi:
                chunk.append((hi - lo, keys, mask[lo - at:hi - at]))
            at += rows
        yield a, b, chunk


def _keys(ranges: Sequence[tuple[int, int]]) -> np.ndarray:
    return np.concatenate([np.arange(a, b) for a, b in ranges])


def pass_bias(written: np.ndarray, groups: Sequence[tuple[int, np.ndarray, np.ndarray]],
              cells: int) -> tuple[np.ndarray, np.ndarray]:
    """(the pool cells a pass reads that it does not write, the additive bias [fed, read +
    fed]) for consecutive query groups, each (rows, the key cells it reads, bool mask [rows,
    keys]); the fed tokens' own cells are the bias's last columns."""
    keys = [key for _, key, _ in groups]
    fresh = np.zeros(cells, bool)
    fresh[written] = True
    every = np.unique(np.concatenate(keys)) if keys else np.zeros(0, np.int64)
    read = every[~fresh[every]]
    column = np.full(cells, -1, np.int64)
    column[read] = np.arange(len(read))
    column[written] = len(read) + np.arange(len(written))
    bias = np.full((len(written), len(read) + len(written)), -np.inf, np.float32)
    at = 0
    for (rows, _, mask), key in zip(groups, keys):
        bias[at:at + rows, column[key]] = np.where(mask, 0.0, -np.inf)
        at += rows
    if at != len(written):
        raise ValueError(f"reads cover {at} rows of the {len(written)} fed")
    return read, bias


class OrtPoolStep(OneRequestPool):
    """`PoolStep`'s call on `OrtSlotStep` (`solm.core.one_request_pool`)."""

    def __init__(self, model: OrtModel):
        super().__init__(OrtSlotStep(model), model.cells)


class OrtPagedKV:
    """TIP's paged KV on ONNX Runtime: the runtime keeps its pages as books (which tokens a
    policy shows); a request's cells live anywhere in the pool, found by token index. What a
    policy stops showing is freed for good (an evicted page), as on llama.cpp."""

    def __init__(self, model: OrtModel):
        self.model = model
        self._free = list(range(model.cells))[::-1]
        self._cells: dict[int, dict[int, int]] = {}  # id(row) -> token index -> cell

    def _shown(self, visible) -> list[int]:
        return sorted(t for page, n in visible for t in page.tokens[:n])

    def _hide(self, row, shown: Sequence[int], fed: int) -> dict[int, int]:
        cells = self._cells.setdefault(id(row), {})
        old = set(shown[:len(shown) - fed])
        for token in [t for t in cells if t not in old]:
            self._free.append(cells.pop(token))
        if set(cells) != old:
            raise RuntimeError("an eviction policy showed a token again after hiding it")
        return cells

    def forward(self, rows: Sequence, tokens: Sequence[Sequence[int]],
                positions: Sequence[Sequence[int]],
                visible: Sequence[Sequence[tuple[object, int]]]) -> torch.Tensor:
        """One session run for every row's new tokens; the logits of each row's last."""
        groups, written, flat_tokens, flat_pos, last = [], [], [], [], []
        for row, toks, pos, vis in zip(rows, tokens, positions, visible):
            shown = self._shown(vis)
            cells = self._hide(row, shown, len(toks))
            if len(self._free) < len(toks):
                raise RuntimeError(f"the pool of {self.model.cells} cells is full")
            old = [cells[t] for t in shown[:len(shown) - len(toks)]]
            new = []
            for t in shown[len(shown) - len(toks):]:
                cells[t] = self._free.pop()
                new.append(cells[t])
            n = len(toks)
            mask = np.concatenate([np.ones((n, len(old)), bool),
                                   np.tril(np.ones((n, n), bool))], axis=1)
            groups.append((n, np.asarray(old + new, np.int64), mask))
            written += new
            flat_tokens += list(toks)
            flat_pos += list(pos)
            last.append(len(flat_tokens) - 1)
        read, bias = pass_bias(np.asarray(written, np.int64), groups, self.model.cells)
        return self.model.forward(flat_tokens, flat_pos, read, bias, written, last)

    def end(self, row) -> None:
        for cell in self._cells.pop(id(row), {}).values():
            self._free.append(cell)

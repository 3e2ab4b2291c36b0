"""A batched PASTA runtime's forward pass on llama.cpp: the same call as
`solm.engines.torch.slots.SlotStep` (tokens, positions, attribute columns, slots, reads), with what
a token sees expressed as llama.cpp sequence membership in one unified KV cache.

- A request's main thread is a sequence; the slot ranges it reads that another request wrote
  (a prompt written once for N samples) are given to it by `seq_cp`, which shares cells
  without copying them.
- A block (overlap layout only) is a sequence forked from its main thread: `seq_cp(main,
  block)` just before the pass that feeds the promise's closing token, which joins both
  sequences (a token's cell can belong to several), so the block's `<async>` in the same
  pass sees main up to and including its promise, and nothing of main after it.
- A main token whose epoch reached a block's join epoch (the `<sync/>` that joins it) is fed
  after `seq_cp(block, main)`: main then sees the whole block; the block's sequence id is
  freed. llama.cpp can only join cells it already holds, so a `<sync/>` waits one pass for
  the `</async>` tokens of its blocks (`join_before_sync`); positions and logits are those of
  training, the pass count is one higher per sync than on torch. (Joining in the pass itself
  is ruled out by two llama.cpp rules, both measured: a token in several sequences reads the
  cells of all of them, so a `</async>` that also joined main would read main's text past its
  promise; and a sequence's tokens must continue at its last position + 1, which a `<sync/>`
  after a `</async>` that main does not hold cannot.)

Skeleton-of-Thought's points (columns without `anchor`/`join`/`epoch`) are forks too: a point's
sequence is given every cell of its main thread (the shared prefix, fed in an earlier pass) at
its first token and never joins.

Under the overlap layout every token's position is 1 + the largest position it sees, so
every sequence continues at its largest position + 1, as llama.cpp requires. `release` (a
request's end) removes all its sequences; a cell no sequence holds is free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from solm.core.one_request_pool import OneRequestPool
from solm.engines.llamacpp.binding import LlamaContext, Token

MAIN = 0
NEVER = 2 ** 62  # the join epoch of a thread that never joins main


@dataclass
class _Request:
    main: int  # its main thread's sequence
    blocks: dict[int, tuple[int, int]] = field(default_factory=dict)  # thread -> (seq, join)


class LlamaCppStep:
    compile_s = 0.0  # nothing is compiled at run time
    join_before_sync = True

    def __init__(self, ctx: LlamaContext):
        self.ctx = ctx
        # requests may share a prompt's cells only in one unified cache; in streams of their
        # own (independent sequential requests) a token reads its own stream alone, which
        # measured 2x faster at 16 requests on a 2-core AVX2 EPYC (bench/results/own_answers)
        self.shares_prompts = ctx.unified
        self._free = list(range(ctx.n_seq))[::-1]
        self._requests: dict[int, _Request] = {}
        self._owner_at: dict[int, int] = {}  # first slot of a range -> the request writing it

    def _take(self) -> int:
        if not self._free:
            raise RuntimeError(f"more threads in flight than the {self.ctx.n_seq} llama.cpp "
                               f"sequences of this context")
        return self._free.pop()

    def _request(self, owner: int, first_slot: int, reads: Sequence[tuple[int, int]]
                 ) -> _Request:
        req = self._requests.get(owner)
        if req is not None:
            return req
        req = self._requests[owner] = _Request(self._take())
        self._owner_at[first_slot] = owner
        for start, _ in reads:  # ranges written by another request: a shared prompt
            writer = self._owner_at.get(start)
            if writer is not None and writer != owner:
                self.ctx.seq_cp(self._requests[writer].main, req.main)
        return req

    def _join(self, req: _Request, epoch: int) -> None:
        """Give main the blocks joined at `epoch` (theirs is done) and free their ids."""
        for thread, (seq, join) in list(req.blocks.items()):
            if join <= epoch:
                self.ctx.seq_cp(seq, req.main)
                self.ctx.seq_rm(seq)
                self._free.append(seq)
                del req.blocks[thread]

    def __call__(self, tokens: Sequence[int], positions: Sequence[int], columns: dict,
                 slots: Sequence[int], reads: Sequence[tuple[int, Sequence[tuple[int, int]]]],
                 prefill: bool = False) -> torch.Tensor:
        """Logits of every token fed; in a prefill, of each request's last token only (what a
        runtime reads of a prompt)."""
        owners, thread = columns["request"], columns["thread"]
        promised = "anchor" in columns  # PASTA's forks; else forks from main's whole past
        slots = list(slots)
        batch: list[Token] = []
        at = 0
        for count, ranges in reads:
            owner = int(owners[at])
            req = self._request(owner, slots[at], ranges)
            rows = range(at, at + count)
            if any(int(owners[i]) != owner for i in rows):
                raise RuntimeError("a read group holds tokens of two requests")
            also: dict[int, list[int]] = {}  # main order -> forks its token starts
            for i in rows:
                t = int(thread[i])
                if t != MAIN and t not in req.blocks:  # a fork's first token
                    seq = self._take()
                    self.ctx.seq_cp(req.main, seq)
                    if promised:
                        req.blocks[t] = (seq, int(columns["join"][i]))
                        also.setdefault(int(columns["anchor"][i]), []).append(seq)
                    else:  # a point of SoT: main's cells are all in; it never joins
                        req.blocks[t] = (seq, NEVER)
            for i in rows:
                t = int(thread[i])
                if t == MAIN:
                    if promised:
                        self._join(req, int(columns["epoch"][i]))
                    seq, extra = req.main, tuple(also.pop(int(columns["order"][i]), ()))
                else:
                    seq, extra = req.blocks[t][0], ()
                batch.append(Token(int(tokens[i]), int(positions[i]), seq,
                                   logits=not prefill or i == at + count - 1, also=extra))
            if also:
                raise RuntimeError("a block started without its promise in the same pass")
            at += count
        return self.ctx.decode(batch)

    def release(self, start: int, end: int) -> None:
        owner = self._owner_at.pop(start, None)
        if owner is None:
            return
        req = self._requests.pop(owner)
        for seq in [req.main, *(s for s, _ in req.blocks.values())]:
            self.ctx.seq_rm(seq)
            self._free.append(seq)


class LlamaPdiffStep(LlamaCppStep):
    """Planned Diffusion's passes on llama.cpp (overlap layout). Main-thread tokens go as in
    PASTA. A chunk is a sequence given its main thread's cells up to its promise; every
    denoising pass removes the chunk's cells and feeds all its slots again with causal
    attention off (llama.cpp then lets a token read every cell of its sequence: the chunk is
    bidirectional, as `chunk_blocks` says). A model trained with chunk blocks has a pass
    feed a chunk's finished block again beside its current one: the finished block's rows go
    in a call before the current block's, so neither reads a later block (each call sees the
    chunk's cells written so far). The pass that writes the chunks' final tokens also
    feeds the `<sync/>` that joins them: chunks first, then `seq_cp(chunk, main)`, then the
    main tokens, causally. A step is then two `llama_decode` calls when both kinds are fed."""

    join_before_sync = False  # the sync is fed after its chunks in the same step

    def __call__(self, tokens: Sequence[int], positions: Sequence[int], columns: dict,
                 slots: Sequence[int], reads: Sequence[tuple[int, Sequence[tuple[int, int]]]],
                 prefill: bool = False) -> torch.Tensor:
        owners, thread = columns["request"], columns["thread"]
        slots = list(slots)
        chunk_rows: list[int] = []
        main_rows: list[int] = []
        chunk_batch: list[Token] = []
        main_batch: list[Token] = []
        at = 0
        for count, ranges in reads:
            owner = int(owners[at])
            req = self._request(owner, slots[at], ranges)
            rows = list(range(at, at + count))
            firsts: dict[int, int] = {}
            for i in rows:
                t = int(thread[i])
                if t != MAIN:
                    firsts[t] = min(firsts.get(t, int(positions[i])), int(positions[i]))
            for t, first in firsts.items():
                if t in req.blocks:  # a chunk fed again: its earlier cells go
                    self.ctx.seq_rm(req.blocks[t][0], first, -1)
                else:
                    seq = self._take()
                    self.ctx.seq_cp(req.main, seq, -1, first)
                    join = next(int(columns["join"][i]) for i in rows if int(thread[i]) == t)
                    req.blocks[t] = (seq, join)
            for i in rows:
                t = int(thread[i])
                if t == MAIN:
                    main_rows.append(i)
                    main_batch.append(Token(int(tokens[i]), int(positions[i]), req.main,
                                            logits=not prefill or i == at + count - 1))
                else:
                    chunk_rows.append(i)
                    chunk_batch.append(Token(int(tokens[i]), int(positions[i]),
                                             req.blocks[t][0]))
            at += count
        out: list[torch.Tensor | None] = [None] * len(tokens)
        if chunk_batch:
            # a chunk's blocks fed in this pass, earliest first: one call per rank
            block = [int(b) for b in columns.get("block", [0] * len(tokens))]
            first: dict[tuple[int, int], int] = {}
            for i in chunk_rows:
                key = (int(owners[i]), int(thread[i]))
                first[key] = min(first.get(key, block[i]), block[i])
            rank = [block[i] - first[(int(owners[i]), int(thread[i]))] for i in chunk_rows]
            self.ctx.set_causal(False)
            for r in sorted(set(rank)):
                picked = [k for k, x in enumerate(rank) if x == r]
                rows = self.ctx.decode([chunk_batch[k] for k in picked])
                for k, row in zip(picked, rows):
                    out[chunk_rows[k]] = row
            self.ctx.set_causal(True)
        if main_batch:
            at = 0
            for count, _ in reads:  # a main token past its chunks' join sees them now
                owner = int(owners[at])
                epochs = [int(columns["epoch"][i]) for i in range(at, at + count)
                          if int(thread[i]) == MAIN]
                if epochs:
                    self._join(self._requests[owner], max(epochs))
                at += count
            logits = self.ctx.decode(main_batch)
            wanted = [i for i, tok in zip(main_rows, main_batch) if tok.logits]
            for i, row in zip(wanted, logits):
                out[i] = row
        # every token asked for its logits but a prompt's (only its last)
        return torch.stack([r for r in out if r is not None])


class LlamaPoolStep(OneRequestPool):
    """`PoolStep`'s call on `LlamaCppStep` (`solm.core.one_request_pool`)."""

    def __init__(self, ctx: LlamaContext, pool_size: int):
        super().__init__(LlamaCppStep(ctx), pool_size)

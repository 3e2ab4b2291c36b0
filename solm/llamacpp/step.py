"""A batched runtime's forward pass on llama.cpp: the same call as `solm.decode.slots.SlotStep`
(tokens, positions, attribute columns, slots, reads), for layouts in which every request sees
exactly one llama.cpp sequence: its own tokens, after the prompt it may share.

A request (the `request` column) is given a free sequence id the first time it is fed; the
slot ranges it reads that another request wrote (a prompt written once for N samples) are
given to its sequence by `seq_cp`, which shares the cells without copying them. `release`
(the runtime's end of a request) removes the sequence from its cells; llama.cpp frees a cell
when no sequence holds it any more. One call is one `llama_decode`: every running request's
tokens in one batch.
"""

from __future__ import annotations

from typing import Sequence

import torch

from solm.llamacpp.binding import LlamaContext, Token


class LlamaCppStep:
    compile_s = 0.0  # nothing is compiled at run time

    def __init__(self, ctx: LlamaContext):
        self.ctx = ctx
        self._free = list(range(ctx.n_seq))[::-1]
        self._seq: dict[int, int] = {}  # request (owner) -> sequence id
        self._owner_at: dict[int, int] = {}  # first slot of a range -> the request writing it

    def _sequence(self, owner: int, first_slot: int, reads: Sequence[tuple[int, int]]) -> int:
        seq = self._seq.get(owner)
        if seq is not None:
            return seq
        if not self._free:
            raise RuntimeError(f"more requests in flight than the {self.ctx.n_seq} llama.cpp "
                               f"sequences of this context")
        seq = self._free.pop()
        self._seq[owner] = seq
        self._owner_at[first_slot] = owner
        for start, _ in reads:  # ranges written by another request: a shared prompt
            writer = self._owner_at.get(start)
            if writer is not None and writer != owner:
                self.ctx.seq_cp(self._seq[writer], seq)
        return seq

    def __call__(self, tokens: Sequence[int], positions: Sequence[int], columns: dict,
                 slots: Sequence[int], reads: Sequence[tuple[int, Sequence[tuple[int, int]]]],
                 prefill: bool = False) -> torch.Tensor:
        """Logits of every token fed; in a prefill, of each request's last token only (what a
        runtime reads of a prompt)."""
        owners = columns["request"]
        slots = list(slots)
        batch: list[Token] = []
        at = 0
        for count, ranges in reads:
            owner = int(owners[at])
            seq = self._sequence(owner, slots[at], ranges)
            for i in range(at, at + count):
                if int(owners[i]) != owner:
                    raise RuntimeError("a read group holds tokens of two requests")
                batch.append(Token(int(tokens[i]), int(positions[i]), seq,
                                   logits=not prefill or i == at + count - 1))
            at += count
        return self.ctx.decode(batch)

    def release(self, start: int, end: int) -> None:
        owner = self._owner_at.pop(start, None)
        if owner is None:
            return
        seq = self._seq.pop(owner)
        self.ctx.seq_rm(seq)
        self._free.append(seq)

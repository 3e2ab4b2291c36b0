"""TIP's paged runtime on llama.cpp: the runtime keeps its pages as books (which tokens a
policy shows, live KV, peak pages) and llama.cpp holds the KV itself.

A request is a llama.cpp sequence. Before each pass, whatever the request's policy no longer
shows is removed from its sequence (`seq_rm` by position range: freed for good, as evicted
pages are), then its new tokens are fed at their plain positions. Every policy that shows a
suffix-closed set fits llama.cpp's rule that a sequence continues at its largest position + 1:
the newest token is always shown, and TIP's one case that would leave a gap (a newest step
killed by the register right after it) is deferred by one token in the structure itself
(`solm.core.systems.tip`). A policy that showed a token again after hiding it is refused.
"""

from __future__ import annotations

from typing import Sequence

import torch

from solm.engines.llamacpp.binding import LlamaContext, Token


def policy_refusal(policy) -> str | None:
    """Why llama.cpp cannot decode under this eviction policy (None: it can)."""
    if policy.needs_scores:
        return (f"--policy {policy.name} ranks pages by the attention they received, which "
                f"llama.cpp does not expose: decode it with --engine torch")
    recent = getattr(policy, "recent_pages", None)
    if recent is not None and recent() < 2:
        # one recent page: when a page starts, the token before it leaves the window, and
        # llama.cpp's next position must follow the largest one a sequence holds
        return (f"--policy {policy.name} at --budget {policy.budget} keeps one recent page of "
                f"{policy.page_size} tokens, so the token before each new page leaves the "
                f"window, which llama.cpp cannot express: use --budget >= "
                f"{policy.sinks + 2 * policy.page_size} or a smaller --page-size, or "
                f"--engine torch")
    return None


class LlamaKV:
    """TIP's pages on llama.cpp sequences, one stream each.

    A pass reads its streams' whole used cell range, holes included: measured on an AMD EPYC
    (2 cores, q8_0, 8 streams, `bench/llama_holes.py`), 1,500 live tokens spread over 2,000
    cells cost 178.6 ms a pass, the same 1,500 packed 149.9 ms, 2,000 packed 173.0 ms. New
    tokens fill the lowest holes first, so a stream's range follows its high-water mark of
    live tokens, not what it holds now. Once a stream's holes reach `compact_holes` cells
    (llama.cpp rounds a pass's range up to 256) and `compact_share` of its range, the stream
    is compacted (`LlamaContext.seq_compact`: ~35 ms for 1,500 tokens there)."""

    compact_holes = 256
    compact_share = 0.25

    def __init__(self, ctx: LlamaContext):
        self.ctx = ctx
        self._free = list(range(ctx.n_seq))[::-1]
        self._seq: dict[int, int] = {}  # id(row) -> sequence
        self._range: dict[int, int] = {}  # id(row) -> cells its stream's range spans (est.)
        self.compactions = 0
        # id(page) -> (page, tokens held): keyed by the object, since page ids are reused
        self._held: dict[int, dict[int, tuple[object, int]]] = {}

    def _sequence(self, row) -> int:
        key = id(row)
        if key not in self._seq:
            if not self._free:
                raise RuntimeError(f"more requests in flight than the {self.ctx.n_seq} "
                                   f"llama.cpp sequences of this context")
            self._seq[key] = self._free.pop()
            self._held[key] = {}
        return self._seq[key]

    def _hide(self, row, seq: int, visible: Sequence[tuple[object, int]], fed: int) -> int:
        """Remove from the sequence what the policy stopped showing; check the rest. Returns
        the tokens the sequence holds before the new ones."""
        held = self._held[id(row)]
        shown = {id(p): n for p, n in visible}
        for pid, (page, n_held) in list(held.items()):
            keep = min(shown.get(pid, 0), n_held)
            if keep < n_held:  # a page's tokens are consecutive positions
                self.ctx.seq_rm(seq, page.tokens[keep], page.tokens[n_held - 1] + 1)
            if keep:
                held[pid] = (page, keep)
            else:
                del held[pid]
        before = sum(n for _, n in held.values())
        if sum(shown.values()) != before + fed:
            raise RuntimeError("an eviction policy showed a token again after hiding it")
        for p, n in visible:
            held[id(p)] = (p, n)
        return before

    def _place(self, row, seq: int, held: int, fed: int) -> None:
        """Keep the estimate of the stream's range as `fed` tokens join the `held` ones,
        compacting it first when its holes pass the thresholds."""
        span = self._range.get(id(row), 0)
        holes = span - held
        if not self.ctx.unified and holes >= max(self.compact_holes, self.compact_share * span):
            self.ctx.seq_compact(seq)
            self.compactions += 1
            span, holes = held, 0
        self._range[id(row)] = span + max(0, fed - holes)

    def forward(self, rows: Sequence, tokens: Sequence[Sequence[int]],
                positions: Sequence[Sequence[int]],
                visible: Sequence[Sequence[tuple[object, int]]]) -> torch.Tensor:
        """One `llama_decode` for every row's new tokens; the logits of each row's last."""
        batch: list[Token] = []
        for row, toks, pos, vis in zip(rows, tokens, positions, visible):
            seq = self._sequence(row)
            self._place(row, seq, self._hide(row, seq, vis, len(toks)), len(toks))
            batch += [Token(int(t), int(p), seq, logits=i == len(toks) - 1)
                      for i, (t, p) in enumerate(zip(toks, pos))]
        return self.ctx.decode(batch)

    def end(self, row) -> None:
        seq = self._seq.pop(id(row), None)
        if seq is None:
            return
        del self._held[id(row)]
        self._range.pop(id(row), None)
        self.ctx.seq_rm(seq)
        self._free.append(seq)

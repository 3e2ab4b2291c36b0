"""Skeleton-of-Thought for many questions at once: every question's skeleton tokens and
every point of every question decode in one forward pass per step over one shared pool.

Each question is decoded by the same rules as `SotRuntime.generate` (skeleton until EOS or
its cap, then its points as threads after their shared prefix, the same caps, stops, budget
and flags), so its result is the one it gets alone; only the forward pass is shared, under
`and_masks(same_request, sot_visible)`. A question reserves the slots of its skeleton stage
when it is admitted; when its skeleton ends those slots are freed, and its expansion stage
reserves prefix + point prompts + its token budget (it waits, it is never cut, when the pool
is full). Questions in either stage share each step.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Hashable, Iterable, Iterator

import torch

from solm.core.model_features import past_the_window
from solm.core.chat import messages_ids, text_ids
from solm.core.sampling import RowTable, SamplingConfig, choose_on_device, choose_tokens
from solm.core.structure import BATCH_ATTR_NAMES, and_masks, same_request
from solm.core.systems.sot import ATTR_NAMES, SotTracker, sot_visible
from solm.decode.flags import MAX_NEW_TOKENS
from solm.engines.staging import PassStaging
from solm.engines.torch.device_step import slot_step
from solm.engines.torch.slots import SlotAllocator
from solm.decode.sot import runtime as sot_runtime
from solm.decode.sot.prompts import EXPAND_PRIMER, SKELETON_PRIMER, skeleton_prompt
from solm.decode.sot.runtime import NO_SKELETON, SKELETON_CAP, SotConfig, SotResult


@dataclass
class _Question:
    rid: Hashable
    question: str
    config: SotConfig
    owner: int
    start: int = 0
    end: int = 0
    next_slot: int = 0
    stage: str = "skeleton"  # skeleton -> points (or done)
    tracker: SotTracker = field(default_factory=SotTracker)
    flags: set[str] = field(default_factory=set)
    sampler: object = None
    out: list[int] = field(default_factory=list)  # skeleton tokens
    pending: int | None = None  # the skeleton's next token
    steps: int = 0
    skeleton: str = ""
    points: list[str] = field(default_factory=list)
    prefix: list[int] = field(default_factory=list)
    own: list[list[int]] = field(default_factory=list)
    samplers: list = field(default_factory=list)
    generated: list[list[int]] = field(default_factory=list)
    point_pending: dict[int, int] = field(default_factory=dict)
    recorded: list[list[torch.Tensor]] = field(default_factory=list)
    budget: int | None = None
    started: float = field(default_factory=time.perf_counter)
    prefill_s: float = 0.0


class BatchedSotRuntime:
    """`run([(rid, question), ...], config)` yields `(rid, SotResult)` as questions end."""

    def __init__(self, model, tokenizer, pool_size: int = 16384, max_batch: int = 16,
                 forward=None, compile: bool = False, compile_backend: str = "inductor"):
        """`forward`: the step to run on (`SlotStep`'s call; default torch's over the
        pool, its passes of up to 64 tokens compiled with `compile`), e.g.
        `solm.engines.llamacpp.step.LlamaCppStep`."""
        self.rules = sot_runtime.SotRuntime(model, tokenizer, pool_size=2)
        self.tokenizer = tokenizer
        self.max_batch = max_batch
        self.pool_size = pool_size
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        self.device = next(model.parameters()).device
        self.forward = forward or slot_step(model, pool_size,
                                          and_masks(same_request, sot_visible),
                                          (*ATTR_NAMES, *BATCH_ATTR_NAMES), compile=compile,
                                          backend=compile_backend)
        self.slots = SlotAllocator(pool_size)
        self.steps = 0
        self._owners = 0

    # ---- the loop -----------------------------------------------------------------------

    def run(self, questions: Iterable[tuple[Hashable, str]], config: SotConfig | None = None
            ) -> Iterator[tuple[Hashable, SotResult]]:
        config = config or SotConfig()
        waiting = deque(questions)
        running: list[_Question] = []
        try:
            while waiting or running:
                # a question waiting for room for its points goes first: no new admissions
                while waiting and len(running) < self.max_batch and \
                        not any(q.stage == "expand" for q in running):
                    rid, question = waiting[0]
                    self._owners += 1
                    q = _Question(rid, question, config, self._owners)
                    if not self._start_skeleton(q):
                        break
                    waiting.popleft()
                    running.append(q)
                for q in [q for q in running if q.stage == "expand"]:
                    self._start_points(q)  # waits (stays "expand") until room frees up
                for q in [q for q in running if q.stage == "done"]:
                    running.remove(q)
                    self._free(q)
                    yield q.rid, self._result(q)
                if any(q.stage in ("skeleton", "points") for q in running):
                    self._step(running)
                elif running and not any(q.stage == "done" for q in running):
                    raise ValueError("a question's expansion stage cannot fit the pool; "
                                     "raise pool_size")
        finally:
            for q in running:
                self._free(q)

    # ---- stage 1: the skeleton ----------------------------------------------------------

    def _start_skeleton(self, q: _Question) -> bool:
        cfg = q.config
        prompt = messages_ids(self.tokenizer, [{"role": "user",
                                                "content": skeleton_prompt(q.question)}])
        prompt += text_ids(self.tokenizer, sot_runtime.SKELETON_PRIMER)
        cap = min(cfg.max_skeleton_tokens, cfg.max_new_tokens or cfg.max_skeleton_tokens)
        if len(prompt) + cap > self.pool_size:
            raise ValueError(f"skeleton prompt of {len(prompt)} tokens does not fit the pool")
        # both stages' tokens (the pool bounds them when no cap is set)
        beyond = past_the_window(self.rules.model.config,
                                 len(prompt) + (cfg.max_new_tokens or self.pool_size))
        if beyond:
            raise ValueError(beyond)
        span = self.slots.take(len(prompt) + cap)
        if span is None:
            return False
        q.start, q.end = span
        q.next_slot = q.start
        t0 = time.perf_counter()
        logits = self._feed(q, prompt, [q.tracker.prefix(t) for t in prompt])[-1]
        q.prefill_s += time.perf_counter() - t0
        q.sampler = sot_runtime.Sampler(cfg.sampling, exempt=sorted(self.rules.eos))
        q.pending = q.sampler(logits, self.rules.banned, q.out)
        self._maybe_end_skeleton(q)
        return True

    def _skeleton_cap(self, q: _Question) -> int:
        cfg = q.config
        return min(cfg.max_skeleton_tokens, cfg.max_new_tokens or cfg.max_skeleton_tokens)

    def _maybe_end_skeleton(self, q: _Question) -> None:
        cap = self._skeleton_cap(q)
        if q.pending not in self.rules.eos and len(q.out) < cap:
            return
        if q.pending not in self.rules.eos and len(q.out) >= cap:
            q.flags.add(SKELETON_CAP)
        q.skeleton = SKELETON_PRIMER + self.tokenizer.decode(q.out, skip_special_tokens=True)
        q.points = sot_runtime.parse_skeleton(q.skeleton)
        if not q.points:
            q.flags.add(NO_SKELETON)
            q.stage = "done"
            return
        q.stage = "expand"
        self._free(q)

    # ---- stage 2: the points ------------------------------------------------------------

    def _start_points(self, q: _Question) -> None:
        cfg = q.config
        prefix, own = self.rules.point_prompts(q.question, q.points)
        q.budget = None if cfg.max_new_tokens is None else cfg.max_new_tokens - len(q.out)
        points_cap = len(own) * cfg.max_point_tokens
        if q.budget is not None:
            points_cap = min(points_cap, max(q.budget, 0))
        need = len(prefix) + sum(len(o) for o in own) + points_cap
        if need > self.pool_size:
            raise ValueError(f"expansion prompts of {need} tokens do not fit the pool")
        span = self.slots.take(max(need, 1))
        if span is None:
            return
        q.start, q.end = span
        q.next_slot = q.start
        q.prefix, q.own = prefix, own
        q.tracker = SotTracker()
        n = len(own)
        q.samplers = [sot_runtime.Sampler(SamplingConfig(**{**cfg.sampling.__dict__,
                                                            "seed": cfg.sampling.seed + i}),
                                          exempt=sorted(self.rules.eos))
                      for i in range(1, n + 1)]
        q.generated = [[] for _ in range(n)]
        q.recorded = [[] for _ in range(n)]
        t0 = time.perf_counter()
        self._feed(q, prefix, [q.tracker.prefix(t) for t in prefix])
        tokens = [t for o in own for t in o]
        attrs = [q.tracker.point(i, t) for i, o in enumerate(own, start=1) for t in o]
        logits = self._feed(q, tokens, attrs)
        ends = torch.tensor([len(o) for o in own]).cumsum(0) - 1
        last = logits[ends]
        q.prefill_s += time.perf_counter() - t0
        stops = self._stops(cfg)
        if cfg.record_logits:
            for i in range(n):
                q.recorded[i].append(last[i])
        first, _ = choose_tokens(last, [q.samplers[i].draw(self.rules.banned, index=0)
                                        for i in range(n)])
        q.point_pending = {i: tok for i, tok in enumerate(first) if tok not in stops}
        q.stage = "points"
        if not q.point_pending:
            q.stage = "done"

    def _stops(self, cfg: SotConfig) -> set[int]:
        return self.rules.eos | (self.rules.newline_ids if cfg.stop_at_newline else set())

    # ---- one step for every question ----------------------------------------------------

    def _feed(self, q: _Question, tokens: list[int], attrs: list) -> torch.Tensor:
        slots = range(q.next_slot, q.next_slot + len(tokens))
        q.next_slot += len(tokens)
        return self.forward(tokens, [a.pos for a in attrs], self._columns([(q, a) for a in attrs]),
                            slots, [(len(tokens), [(q.start, q.next_slot)])])

    def _columns(self, rows: list) -> dict[str, list[int]]:
        out = {n: [int(getattr(a, n)) for _, a in rows] for n in ATTR_NAMES}
        out["request"] = [q.owner for q, _ in rows]
        out["group"] = [-1] * len(rows)
        out["shared"] = [0] * len(rows)
        return out

    def _step(self, running: list[_Question]) -> None:
        fed = []  # (question, what each row is: ("skeleton", tok) or ("point", i, tok))
        tokens, rows, slots = [], [], []
        for q in running:
            if q.stage == "skeleton":
                tok = q.pending
                q.out.append(tok)
                fed.append((q, [("skeleton", None)]))
                tokens.append(tok)
                rows.append((q, q.tracker.prefix(tok)))
                slots.append(q.next_slot)
                q.next_slot += 1
            elif q.stage == "points":
                active = sorted(q.point_pending)
                if q.budget is not None:
                    left = q.budget - sum(len(g) for g in q.generated)
                    if left < len(active):
                        q.flags.add(MAX_NEW_TOKENS)
                        for i in active[max(left, 0):]:
                            del q.point_pending[i]
                        active = active[:max(left, 0)]
                if not active:
                    q.stage = "done"
                    continue
                kinds = []
                for i in active:
                    t = q.point_pending[i]
                    q.generated[i].append(t)
                    tokens.append(t)
                    rows.append((q, q.tracker.point(i + 1, t)))
                    slots.append(q.next_slot)
                    q.next_slot += 1
                    kinds.append(("point", i))
                fed.append((q, kinds))
        if not tokens:
            return
        reads = [(len(kinds), [(q.start, q.next_slot)]) for q, kinds in fed]
        # which rows ask for a next token, and their draws, before the pass (a draw reads
        # what its point or skeleton wrote, not the logits): the draws ride in the pass's
        # one upload where the step takes a staging
        at, asks = 0, []  # (question, point index or None for the skeleton, logits row)
        for q, kinds in fed:
            q.steps += 1
            cfg = q.config
            if kinds[0][0] == "skeleton":
                asks.append((q, None, at))
                at += 1
                continue
            for _, i in kinds:
                row = at
                at += 1
                del q.point_pending[i]
                if len(q.generated[i]) >= cfg.max_point_tokens:
                    q.flags.add(MAX_NEW_TOKENS)
                    continue
                asks.append((q, i, row))
        banned = self.rules.banned
        draws = [q.sampler.draw(banned, q.out, index=len(q.out)) if i is None
                 else q.samplers[i].draw(banned, q.generated[i], index=len(q.generated[i]))
                 for q, i, _ in asks]
        table = RowTable(draws, self.vocab_size, [row for _, _, row in asks]) if asks else None
        extra = {}
        if table is not None and getattr(self.forward, "stages", False):
            extra["staging"] = PassStaging(self.device)
            table.stage(extra["staging"])
        logits = self.forward(tokens, [a.pos for _, a in rows], self._columns(rows), slots,
                              reads, **extra)
        self.steps += 1
        for q, i, row in asks:
            if i is not None and q.config.record_logits:
                q.recorded[i].append(logits[row])
        # every question's next tokens in one draw: one copy to the host per pass
        chosen = choose_on_device(logits, draws, rows=table.row_list, table=table)[0].tolist() \
            if asks else []
        for (q, i, _), tok in zip(asks, chosen):
            if i is None:
                q.pending = tok
                self._maybe_end_skeleton(q)
            elif tok not in self._stops(q.config):
                q.point_pending[i] = tok
        for q, kinds in fed:
            if kinds[0][0] != "skeleton" and not q.point_pending:
                q.stage = "done"

    # ---- the end ------------------------------------------------------------------------

    def _free(self, q: _Question) -> None:
        if q.end > q.start:
            self.forward.release(q.start, q.end)
            self.slots.free(q.start, q.end)
        q.start = q.end = q.next_slot = 0

    def _result(self, q: _Question) -> SotResult:
        wall = time.perf_counter() - q.started
        decode_s = max(wall - q.prefill_s, 0.0)
        if not q.points:
            return SotResult(q.skeleton, [], q.skeleton, len(q.out), [], q.steps,
                             q.prefill_s, decode_s, sorted(q.flags))
        lines = []
        for i, (point, ids) in enumerate(zip(q.points, q.generated), start=1):
            body = self.tokenizer.decode(ids, skip_special_tokens=True)
            lines.append(EXPAND_PRIMER.format(index=i, point=point) + body)
        stacked = [torch.stack(r) for r in q.recorded] if q.config.record_logits else []
        return SotResult("\n".join(lines), q.points, q.skeleton, len(q.out),
                         [len(g) for g in q.generated], q.steps, q.prefill_s, decode_s,
                         sorted(q.flags), 0.0, q.prefix, q.own, q.generated, stacked)

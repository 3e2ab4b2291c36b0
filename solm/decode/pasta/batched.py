"""Many PASTA requests at once: continuous batching over one shared KV pool.

Each request is a `PastaRunState` of its own (its threads, tracker, sampler, flags), decoded by
the very rules of `PastaRuntime` (scheduling, token choice, caps, finish); what changes is the
forward pass. One step feeds every thread of every running request in one pass over one pool
(`solm.engines.torch.slots.SlotStep`); a request attends to its own slots only, in its solo
decode's order (`and_masks(same_request, pasta_visible)`, the structure's term and one
more), so its logits are the ones it gets decoded alone, to the bit (the linear layers'
rows are independent of their batch mates; bench/batch_invariance.py checks this per CPU).

Why one pool and not a batch dimension: on a CPU a decode step is bound by reading the
weights, and 16 tokens in one sequence cost 1.3-2x one token (PLATFORM.md), while 16 rows of
a batch cost about 6x one row; one sequence also needs no padding between requests of
different lengths.

- **Admission** reserves prompt + `max_new_tokens` slots for a request (no preemption): a
  request that was admitted always has room for its whole answer. A request that can never
  fit the pool is refused at once (its result carries the `refused` flag and a reason); the
  others go on. `max_batch` caps the requests in flight, and free slots decide within it.
- **Continuous batching**: a request joins at a step boundary (its prompt is prefilled in a
  pass of its own) and leaves when it ends; its slots are freed for the next.
- **Shared prompts**: requests with the same `group` and the same prompt read one copy of
  the prompt's KV (written once; freed when the last of them ends), and each samples its first
  token from the prompt's one logits row. N samples of a prompt cost one prefill.
- **Cancel**: `cancel(rid)` ends a request at the next step boundary (flag `cancelled`) and
  frees its slots.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable, Iterator, Sequence

import torch

from solm.core.model_features import past_the_window
from solm.core.structure import BATCH_ATTR_NAMES, and_masks, same_request
from solm.core.systems.pasta import ATTR_NAMES, PastaTracker, pasta_visible
from solm.decode.flags import MAX_NEW_TOKENS as FLAG_MAX_NEW_TOKENS
from solm.decode.pasta.runtime import (MODES, Chooser, PassChoices, PastaDecodeConfig,
                                       PastaDecodeResult, PastaRunState, PastaRuntime, _Thread,
                                       choose_next)
from solm.decode.protocol import Done
from solm.engines.staging import PassStaging
from solm.engines.torch.device_step import slot_step
from solm.engines.torch.slots import SlotAllocator

REFUSED = "refused"
CANCELLED = "cancelled"
NO_GROUP = -1



def default_batch_size(device) -> int:
    """Prompts a file decode batches by default: 16 on a CPU (a 16-token step costs 1.3-2x a
    one-token step there), 32 on CUDA."""
    return 32 if torch.device(device).type == "cuda" else 16

@dataclass
class BatchRequest:
    rid: Hashable
    prompt_ids: Sequence[int]
    config: PastaDecodeConfig
    chooser: Chooser | None = None  # default: the runtime's sampler for `config`
    group: Hashable | None = None  # requests of one group with one prompt share its KV
    scripts: dict[int, list[int]] | None = None  # replay instead of sampling
    # with scripts: the threads without one sample (`chooser`) instead of replaying, e.g. a
    # main thread forced to a plan whose blocks the model writes
    sample_unscripted: bool = False
    replay_anchors: frozenset[int] = frozenset()


BatchResult = Done  # (rid, PastaDecodeResult or None, why it was refused)


@dataclass
class _Prefix:
    """A prompt written once for the requests of a group."""

    owner: int
    group: int
    prompt: tuple[int, ...]
    start: int
    end: int
    logits: torch.Tensor  # the last prompt token's logits row
    users: int = 0


@dataclass
class _Running:
    req: BatchRequest
    state: PastaRunState
    owner: int
    group: int
    start: int  # the reserved range [start, end)
    end: int
    next_slot: int
    prefix: _Prefix | None = None
    cancelled: bool = False
    admitted: float = field(default_factory=time.perf_counter)


class BatchedPastaRuntime:
    """`run(requests)` yields a `BatchResult` per request as it ends (in finishing order)."""

    def __init__(self, model, tokenizer, pool_size: int = 8192, max_batch: int = 16,
                 compile: bool = False, compile_backend: str = "inductor", forward=None):
        """`forward`: another engine's pass with `SlotStep`'s call (`solm.engines.llamacpp.step`);
        default: solm's own over `pool_size` slots."""
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        # the decoding rules of one request (grammar, scheduling, caps, finish); its own pool
        # is never used
        self.rules = PastaRuntime(model, tokenizer, pool_size=2)
        # an engine that joins only blocks it already holds makes a sync wait for their ends
        self.rules.join_before_sync = bool(getattr(forward, "join_before_sync", False))
        self.model, self.tokenizer = model, tokenizer
        self.vocab = self.rules.vocab
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        self.device = next(model.parameters()).device
        self.max_batch = max_batch
        self.pool_size = pool_size
        self.forward = forward or slot_step(model, pool_size,
                                          and_masks(same_request, pasta_visible),
                                          (*ATTR_NAMES, *BATCH_ATTR_NAMES), compile=compile,
                                          backend=compile_backend)
        self.slots = SlotAllocator(pool_size)
        self.steps = 0
        self._owners = 0
        self._groups: dict[Hashable, int] = {}
        self._prefixes: dict[tuple[int, tuple[int, ...]], _Prefix] = {}
        self._cancel: set[Hashable] = set()
        self.waiting: deque[BatchRequest] = deque()
        self.running: list[_Running] = []

    # ---- public API ---------------------------------------------------------------------

    def chooser(self, config: PastaDecodeConfig, written: Sequence[int] = ()) -> Chooser:
        return self.rules.chooser(config, written)

    def cancel(self, rid: Hashable) -> None:
        """End request `rid` at the next step boundary (waiting or running)."""
        self._cancel.add(rid)

    def generate_many(self, prompts: Sequence[Sequence[int]], config: PastaDecodeConfig
                      ) -> list[PastaDecodeResult]:
        """Every prompt decoded with `config`, results in the prompts' order."""
        out = {r.rid: r.result for r in self.run(
            BatchRequest(i, p, config) for i, p in enumerate(prompts))}
        return [out[i] for i in range(len(prompts))]

    def sample(self, prompt_ids: Sequence[int], config: PastaDecodeConfig, n: int,
               seeds: Sequence[int] | None = None) -> list[PastaDecodeResult]:
        """`n` samples of one prompt (prefilled once), sample k seeded `seeds[k]` (default:
        config's seed + k): what the preference stage draws."""
        from dataclasses import replace

        seeds = list(seeds) if seeds is not None else [config.sampling.seed + k
                                                        for k in range(n)]
        reqs = [BatchRequest(k, prompt_ids, replace(config, sampling=replace(
            config.sampling, seed=seeds[k])), group="sample") for k in range(n)]
        out = {r.rid: r.result for r in self.run(reqs)}
        return [out[k] for k in range(n)]

    def run(self, requests: Iterable[BatchRequest]) -> Iterator[BatchResult]:
        """Decode `requests` (and any added meanwhile); yield each result as it ends."""
        for req in requests:
            self.add(req)
        try:
            while self.busy:
                yield from self.step()
        finally:  # an abandoned generator frees what it held
            self.abandon()

    def abandon(self) -> None:
        """Drop every waiting and running request and free their slots (after a failure)."""
        for r in list(self.running):
            self.running.remove(r)
            self._release(r)
        self.waiting.clear()

    def add(self, request: BatchRequest) -> None:
        """Queue a request; it joins at the next step boundary with room for it."""
        self.waiting.append(request)

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    def state_of(self, rid: Hashable) -> PastaRunState | None:
        """The decode state of a running request (for streaming), None otherwise."""
        return next((r.state for r in self.running if r.req.rid == rid), None)

    def step(self) -> list[BatchResult]:
        """Admit what fits, then one forward pass for every running request; returns the
        requests that ended (finished, cut by their cap, cancelled or refused)."""
        ended: list[BatchResult] = []
        waiting, running = self.waiting, self.running
        while waiting and len(running) < self.max_batch:
            req = waiting[0]
            if req.rid in self._cancel:
                waiting.popleft()
                self._cancel.discard(req.rid)
                ended.append(self._refused(req, "cancelled before it started", CANCELLED))
                continue
            problem = self._never_fits(req)
            if problem:
                waiting.popleft()
                ended.append(self._refused(req, problem))
                continue
            admitted = self._admit(req)
            if admitted is None:
                break  # room frees up as running requests end
            waiting.popleft()
            running.append(admitted)
        if running:
            ended += list(self._step(running))
        return ended

    # ---- admission ----------------------------------------------------------------------

    def _budget(self, req: BatchRequest) -> int:
        return req.config.max_new_tokens

    def _never_fits(self, req: BatchRequest) -> str | None:
        if req.config.mode not in MODES:
            return f"mode must be one of {MODES}, got {req.config.mode!r}"
        need = len(req.prompt_ids) + self._budget(req)
        if need > self.pool_size:
            return (f"prompt of {len(req.prompt_ids)} tokens + max_new_tokens "
                    f"{self._budget(req)} = {need} slots does not fit a pool of "
                    f"{self.pool_size} (--pool-size x the batch; raise --pool-size or "
                    f"lower --max-new-tokens)")
        if not req.prompt_ids:
            return "empty prompt"
        return past_the_window(self.model.config, need)

    def _admit(self, req: BatchRequest) -> _Running | None:
        prompt = tuple(int(t) for t in req.prompt_ids)
        group = NO_GROUP
        prefix = None
        if req.group is not None:
            group = self._groups.setdefault(req.group, len(self._groups))
            prefix = self._prefixes.get((group, prompt))
        own = self._budget(req) if prefix is not None else len(prompt) + self._budget(req)
        if prefix is None and req.group is not None:
            # the prompt goes in a range of its own, shared by the group's later requests
            shared = self.slots.take(len(prompt))
            if shared is None:
                return None
            rest = self.slots.take(self._budget(req))
            if rest is None:
                self.slots.free(*shared)
                return None
            prefix = self._write_prefix(group, prompt, shared)
            start, end = rest
        else:
            span = self.slots.take(own)
            if span is None:
                return None
            start, end = span
        self._owners += 1
        replay = req.scripts is not None and not req.sample_unscripted
        state = PastaRunState(req.config, PastaTracker(self.vocab),
                              None if replay else (req.chooser or self.chooser(req.config)),
                              set(req.replay_anchors))
        if req.scripts is not None:
            for tid, stream in req.scripts.items():
                state.threads.setdefault(tid, _Thread(tid)).script = stream
        run = _Running(req, state, self._owners, group, start, end, start, prefix)
        t0 = time.perf_counter()
        if prefix is not None:
            prefix.users += 1
            for t in prompt:
                state.tracker.main(t)  # positions and order advance as if written
            logits = prefix.logits
        else:
            attrs = [state.tracker.main(t) for t in prompt]
            logits = self._feed(run, list(prompt), attrs)[-1]
        state.prefill_s = time.perf_counter() - t0
        state.decode_started = time.perf_counter()
        state.main.pending = state.next_token(state.main, logits)
        state.generated = 0 if state.main.pending is None else 1
        return run

    def _write_prefix(self, group: int, prompt: tuple[int, ...], span: tuple[int, int]
                      ) -> _Prefix:
        self._owners += 1
        tracker = PastaTracker(self.vocab)
        attrs = [tracker.main(t) for t in prompt]
        start, end = span
        batch = {n: [getattr(a, n) for a in attrs] for n in ATTR_NAMES}
        batch.update(request=[self._owners] * len(prompt), group=[group] * len(prompt),
                     shared=[1] * len(prompt))
        logits = self.forward(list(prompt), [a.pos for a in attrs], batch,
                              range(start, end), [(len(prompt), [(start, end)])],
                              prefill=True)[-1]
        prefix = _Prefix(self._owners, group, prompt, start, end, logits)
        self._prefixes[(group, prompt)] = prefix
        return prefix

    # ---- one step for every running request ---------------------------------------------

    def _feed(self, run: _Running, tokens: list[int], attrs: list) -> torch.Tensor:
        """A pass for one request alone (its prompt)."""
        slots = range(run.next_slot, run.next_slot + len(tokens))
        run.next_slot += len(tokens)
        columns = self._columns([(run, a) for a in attrs])
        return self.forward(tokens, [a.pos for a in attrs], columns, slots,
                            [(len(tokens), self._reads(run))], prefill=True)

    def _columns(self, rows: list[tuple[_Running, Any]]) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {n: [int(getattr(a, n)) for _, a in rows] for n in ATTR_NAMES}
        out["request"] = [r.owner for r, _ in rows]
        out["group"] = [r.group for r, _ in rows]
        out["shared"] = [0] * len(rows)
        return out

    @staticmethod
    def _reads(run: _Running) -> list[tuple[int, int]]:
        """The slot ranges a request reads, in its solo decode's order: prompt, answer."""
        own = [(run.start, run.next_slot)]
        return own if run.prefix is None else [(run.prefix.start, run.prefix.end), *own]

    def _step(self, running: list[_Running]) -> Iterator[BatchResult]:
        rules = self.rules
        fed: list[tuple[_Running, list, list]] = []
        for run in list(running):
            if run.req.rid in self._cancel:
                self._cancel.discard(run.req.rid)
                run.state.flags.add(CANCELLED)
                yield self._end(run, running)
                continue
            rules._end_main_at_eos(run.state)
            batch, attrs = rules._schedule(run.state)
            if not batch:
                yield self._end(run, running)
                continue
            if run.next_slot + len(batch) > run.end:  # cannot happen: the cap reserves room
                raise RuntimeError(f"request {run.req.rid!r} outgrew its reserved slots")
            fed.append((run, batch, attrs))
        if not fed:
            return
        tokens = [tok for _, batch, _ in fed for _, tok in batch]
        rows = [(run, a) for run, _, attrs in fed for a in attrs]
        slots = []
        for run, batch, _ in fed:
            slots += range(run.next_slot, run.next_slot + len(batch))
            run.next_slot += len(batch)
        reads = [(len(batch), self._reads(run)) for run, batch, _ in fed]
        # what each thread fed, and the draws of its next token, before the pass: a draw
        # reads what its thread fed, not the logits, so the draws' table rides in the
        # pass's one upload where the step takes a staging (`solm.engines.staging`)
        at, records = 0, []
        for run, batch, _ in fed:
            records.append((run, batch, at, rules._record_fed(run.state, batch, None)))
            at += len(batch)
        plan = PassChoices([(run.state, batch[row][0], at + row)
                            for run, batch, at, asks in records for row in asks],
                           self.vocab_size)
        extra = {}
        if getattr(self.forward, "stages", False):
            extra["staging"] = PassStaging(self.device)
            plan.stage(extra["staging"])
        built = self.forward.compile_s
        logits = self.forward(tokens, [a.pos for _, a in rows], self._columns(rows), slots,
                              reads, **extra)
        built = self.forward.compile_s - built  # a step that built a graph: not decode time
        self.steps += 1
        for run, batch, at, _ in records:
            state = run.state
            state.steps += 1
            state.compile_s += built
            state.fed_total += len(batch)
            state.kv_read += run.next_slot - run.start + (
                run.prefix.end - run.prefix.start if run.prefix else 0)
            if state.config.record_logits:
                for row, (th, _) in enumerate(batch):
                    th.logits.append(logits[at + row])
        # every request's next tokens in one draw: one copy to the host per pass
        chosen = iter(plan.finish(logits))
        for run, batch, _, asks in records:
            if rules._settle(run.state, batch, {row: next(chosen) for row in asks}):
                run.state.flags.add(FLAG_MAX_NEW_TOKENS)
                yield self._end(run, running)

    def _end(self, run: _Running, running: list[_Running]) -> BatchResult:
        state = run.state
        state.decode_s = time.perf_counter() - state.decode_started - state.compile_s
        running.remove(run)
        self._release(run)
        return BatchResult(run.req.rid, self.rules.finish(state))

    def _release(self, run: _Running) -> None:
        self.forward.release(run.start, run.end)
        self.slots.free(run.start, run.end)
        prefix = run.prefix
        if prefix is not None:
            prefix.users -= 1
            if prefix.users == 0:
                self.forward.release(prefix.start, prefix.end)
                self.slots.free(prefix.start, prefix.end)
                del self._prefixes[(prefix.group, prefix.prompt)]

    def _refused(self, req: BatchRequest, why: str, flag: str = REFUSED) -> BatchResult:
        empty = PastaDecodeResult(ids=[], forward_passes=0, threads=0, tokens_fed=0,
                                  prefill_s=0.0, decode_s=0.0, flags=[flag])
        return BatchResult(req.rid, empty, error=why)

    @property
    def free_slots(self) -> int:
        return self.slots.free_slots


"""The paged runtime: a batch of requests decoded together over one paged KV pool.

Each step feeds one token per active request (q = 1, B = batch) and reads, per request, only
the slots its eviction policy shows. When a request finishes, its pages go back to the free
list and the next waiting request is prefilled into its batch row (continuous refill).
Positions are plain token positions; eviction changes only which keys attention reads, which
is exactly what `solm.core.systems.tip` trains under.

The page size lives in the runtime alone: the policies it makes and the pages it allocates
read it from there. Decoding is split into `_admit` (prefill a request into a free batch
row), `_decode_step` (one token for every row) and `_result` (finish a row).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Iterator

import torch

from solm.core.model_features import past_the_window
from solm.core.chat import eos_ids
from solm.core.errors import SolmError
from solm.core.sampling import RowTable, Sampler, SamplingConfig, choose_on_device, choose_tokens
from solm.core.systems.tip import TipVocab
from solm.engines.staging import PassStaging
from solm.engines.torch.attention import attention_implementation
from solm.decode.flags import MAX_NEW_TOKENS as FLAG_MAX_NEW_TOKENS
from solm.engines.torch.head import OutputHead
from solm.engines.torch.paged import PageAllocator, PagedCache
from solm.engines.torch.paged_attention import PAGED_NAME, paged_reads
from solm.engines.torch.compiled import KV_BLOCK, CompiledForward, kv_bucket, paged_body
from solm.engines.torch.pool import kv_shape_of, num_layers_of
from solm.engines.torch.step import activation_dtype
from solm.decode.tip.config import TipDecodeConfig  # noqa: F401 (re-exported)
from solm.decode.tip.policies import EvictionPolicy, Page, RequestKV, make_policy


@dataclass
class TipRequest:
    rid: int
    prompt: list[int]
    forced: list[int] | None = None  # replay: these tokens are fed instead of sampled
    seed: int = 0
    sampling: SamplingConfig | None = None  # this request's own (a server's); else config's
    max_new_tokens: int | None = None  # this request's own cap; else config's


@dataclass
class TipResult:
    rid: int
    ids: list[int]
    flags: list[str]
    generated: int
    mean_live_tokens: float  # tokens attention read per decode step, averaged
    # of those, the response's own tokens (the prompt's excluded, whichever a policy kept)
    mean_live_response_tokens: float
    peak_pages: int
    peak_live_tokens: int
    slots_allocated: int  # pages x page size, summed over allocations
    prefill_s: float
    decode_s: float
    logits: torch.Tensor | None = None  # [generated, vocab] when recorded
    reads: list[list[int]] | None = None  # per decode step: token indices read, when recorded
    logprobs: list[float] | None = None  # per generated token, when recorded
    slots_written: int = 0  # prompt + generated tokens
    evicted_pages: int = 0  # pages the policy freed before the request ended

    @property
    def fragmentation(self) -> float:
        """Share of allocated slots never written (fresh pages per step leave gaps)."""
        return 1.0 - self.slots_written / max(1, self.slots_allocated)


@dataclass
class _Row:
    req: TipRequest
    kv: RequestKV
    sampler: Sampler
    pending: int
    ids: list[int] = field(default_factory=list)
    logits: list[torch.Tensor] = field(default_factory=list)
    reads: list[list[int]] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    evicted_pages: int = 0
    live_sum: int = 0
    live_response_sum: int = 0
    peak_pages: int = 0
    peak_live: int = 0
    slots_allocated: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0


def worst_case_pages(prompt_tokens: int, max_new_tokens: int, page_size: int,
                     registers: int, fresh_page_per_step: bool) -> int:
    """Pages one request can hold at once. Under a policy that opens a fresh page per step,
    every live step can leave a partial page: at most the preamble, one step per register,
    the step its reuse kills (freed only after the new step's first token is placed) and the
    new one."""
    ceil = lambda n: -(-n // page_size)  # noqa: E731
    partial = registers + 2 if fresh_page_per_step else 1
    return ceil(prompt_tokens) + ceil(max_new_tokens + 1) + partial


class TipRuntime:
    """Reuse one runtime across batches: the pool and its pages are reused."""

    def __init__(self, model, tokenizer, num_pages: int = 1024, page_size: int = 64,
                 num_registers: int = 16, compile: bool = False,
                 compile_backend: str = "inductor", kv=None):
        """`kv`: another engine's paged KV to run the forward passes on (its `Engine.step`
        "paged", e.g. `solm.engines.llamacpp.tip.LlamaKV`); the pages then only keep the books (live
        tokens, peak pages)."""
        self.model, self.tokenizer = model, tokenizer
        self.engine_kv = kv
        self.device = next(model.parameters()).device
        self.page_size, self.num_pages = page_size, num_pages
        self.cache = PagedCache(num_layers_of(model), num_pages, page_size,
                                extra_slots=1 if compile else 0)
        self.scratch_slot = num_pages * page_size  # padded rows of a compiled step write here
        self.allocator = PageAllocator(num_pages)
        self.cache.state.allocator = self.allocator
        self.head = OutputHead(model)
        self.compiled = None
        if compile:
            self.cache.allocate(*kv_shape_of(model), dtype=activation_dtype(model),
                                device=self.device)
            self.compiled = CompiledForward(paged_body(model, self.cache, self.head),
                                            compile_backend,
                                            cudagraphs=self.device.type == "cuda")
        try:
            self.vocab: TipVocab | None = TipVocab.from_tokenizer(tokenizer, num_registers)
        except ValueError:
            self.vocab = None
        self.eos = set(eos_ids(tokenizer))
        self._record_reads = False
        # decode steps' time and KV slots gathered (per layer), over this runtime's life
        self.steps_s, self.step_reads = 0.0, 0

    @property
    def compile_s(self) -> float:
        """Time spent in steps that built a compiled graph (left out of decode times)."""
        return self.compiled.build_s if self.compiled is not None else 0.0

    # ---- pages --------------------------------------------------------------------------

    def _place(self, row: _Row, token: int, is_prompt: bool, policy: EvictionPolicy) -> int:
        """Give the token a slot (a fresh page when needed) and return it."""
        kv = row.kv
        step, _ = policy.step_of(kv, token, is_prompt)
        last = kv.pages[-1] if kv.pages else None
        new_step = policy.fresh_page_per_step and last is not None and last.step != step
        if last is None or len(last.tokens) >= self.page_size or new_step:
            last = Page(self.allocator.alloc(kv.rid), step=step)
            kv.pages.append(last)
            row.slots_allocated += self.page_size
        slot = last.id * self.page_size + len(last.tokens)
        last.tokens.append(kv.n_tokens)
        kv.slots.append(slot)
        kv.step_of.append(step)
        return slot

    def _release(self, pages: list[Page]) -> None:
        for p in pages:
            self.allocator.free(p.id)

    def _forget(self, row: _Row) -> None:
        """A row that ended: its pages (and its engine's sequence) are free again."""
        self._release(row.kv.pages)
        row.kv.pages = []
        if self.engine_kv is not None:
            self.engine_kv.end(row)

    def _evict(self, row: _Row, policy: EvictionPolicy) -> None:
        gone = policy.evict(row.kv)
        row.evicted_pages += len(gone)
        self._release(gone)

    def _slots_of(self, visible: list[tuple[Page, int]]) -> torch.Tensor:
        """Slots of the first n tokens of each visible page (a page fills from offset 0), in
        order; vectorised over pages so the cost per step grows with pages, not tokens. The
        length is known on the host, so no step sizes an output from tensor data."""
        ids = torch.tensor([p.id for p, _ in visible], dtype=torch.long)
        sizes = [n for _, n in visible]
        counts = torch.tensor(sizes, dtype=torch.long)
        total = sum(sizes)
        # token k of page i sits at id_i * page_size + (k - first token of page i)
        base = ids * self.page_size - (counts.cumsum(0) - counts)
        return torch.repeat_interleave(base, counts, output_size=total) + torch.arange(total)

    # ---- forward ------------------------------------------------------------------------

    @torch.no_grad()
    def _forward(self, rows: list[_Row], tokens: list[list[int]], write_slots: list[int],
                 positions: list[list[int]], policy: EvictionPolicy,
                 prefill_causal: bool = False, staging=None) -> torch.Tensor:
        """One forward pass; returns logits of each row's last token [B, V]."""
        vis = ([[(p, len(p.tokens)) for p in rows[0].kv.pages]] if prefill_causal
               else [policy.visible(r.kv) for r in rows])
        if self.engine_kv is not None:
            if policy.needs_scores:
                raise SolmError(f"--policy {policy.name} needs attention mass, which this "
                                f"engine does not expose: decode it with --engine torch")
            extra = {"staging": staging} if staging is not None else {}
            logits = self.engine_kv.forward(rows, tokens, positions, vis, **extra)
            self._account(rows, [sum(n for _, n in v) for v in vis], vis, prefill_causal)
            return logits
        st = self.cache.state
        read = [self._slots_of(v) for v in vis]
        st.write_slots = torch.tensor(write_slots, dtype=torch.long, device=self.device)
        st.set_reads([x.to(self.device) for x in read], causal=prefill_causal)
        st.read_owner = torch.tensor([r.kv.rid for r in rows], device=self.device)
        st.padded_index = None
        sink = None
        if self.compiled is not None and not prefill_causal and not policy.needs_scores:
            logits = self._compiled_forward(tokens, positions, read, write_slots)
        else:
            inputs = dict(input_ids=torch.tensor(tokens, device=self.device),
                          position_ids=torch.tensor(positions, device=self.device),
                          attention_mask=None, cache=self.cache, use_cache=True)
            with attention_implementation(self.model, PAGED_NAME), \
                    paged_reads(st, scores=policy.needs_scores) as sink:
                logits = self.head.model_logits(inputs, lambda rows: rows[:, -1])
        if sink is not None:
            total = sink.total.cpu()
            for v, start in zip(vis, st.offsets):
                for p, n in v:
                    p.score += float(total[start:start + n].sum())
                    start += n
        self._account(rows, [len(x) for x in read], vis, prefill_causal)
        return logits

    def _account(self, rows: list[_Row], live: list[int], vis: list, prefill: bool) -> None:
        """Each row's live-KV books after a pass that read `live` tokens."""
        for r, x, v in zip(rows, live, vis):
            if not prefill:
                r.live_sum += x
                # token i of a request is its prompt's for i < len(prompt); a page holds
                # its tokens in increasing order
                first = len(r.req.prompt)
                r.live_response_sum += sum(n - bisect_left(p.tokens, first, 0, n)
                                           for p, n in v)
            r.peak_live = max(r.peak_live, x)
            if self._record_reads and not prefill:
                r.reads.append([t for p, n in v for t in p.tokens[:n]])

    def _compiled_forward(self, tokens: list[list[int]], positions: list[list[int]],
                          read: list[torch.Tensor], write_slots: list[int]) -> torch.Tensor:
        """A decode step as a compiled graph: rows padded to the batch size (padded rows write
        and read the scratch slot), reads padded to a power-of-two length under a mask."""
        st = self.cache.state
        if st.check_reads:
            st.assert_reads_owned()
        st.reads += st.read_flat.numel() * len(self.cache.layers)
        n, b = len(tokens), self._batch_bucket
        longest = max(len(x) for x in read)
        length = kv_bucket(longest, KV_BLOCK, self.num_pages * self.page_size)
        index = torch.full((b, length), self.scratch_slot, dtype=torch.long)
        mask = torch.zeros(b, length, dtype=torch.bool)
        for i, x in enumerate(read):
            index[i, :len(x)] = x
            mask[i, :len(x)] = True
        mask[n:, 0] = True
        pad = b - n
        args = (torch.tensor([t for t, in tokens] + [0] * pad, device=self.device)[:, None],
                torch.tensor([p for p, in positions] + [0] * pad, device=self.device)[:, None],
                mask[:, None, None].to(self.device),
                torch.tensor(list(write_slots) + [self.scratch_slot] * pad,
                             device=self.device),
                index.view(-1).to(self.device))
        with attention_implementation(self.model):
            return self.compiled(*args)[:n]

    # ---- the loop -----------------------------------------------------------------------

    def _admit(self, req: TipRequest, policy: EvictionPolicy,
               config: TipDecodeConfig) -> _Row:
        beyond = past_the_window(self.model.config, len(req.prompt) + config.max_new_tokens)
        if beyond:
            raise SolmError(f"request {req.rid!r}: {beyond}")
        kv = RequestKV(req.rid)
        policy.start(kv, self.vocab)
        base = req.sampling or config.sampling
        sampling = replace(base, seed=base.seed + req.seed)
        row = _Row(req, kv, Sampler(sampling), pending=-1)
        started = time.perf_counter()
        slots = [self._place(row, t, True, policy) for t in req.prompt]
        logits = self._forward([row], [req.prompt], slots, [list(range(len(req.prompt)))],
                               policy, prefill_causal=True)
        self._evict(row, policy)
        row.peak_pages = len(kv.pages)
        row.pending = self._choose([row], logits[:1], config)[0]
        row.prefill_s = time.perf_counter() - started
        return row

    def _plan(self, rows: list[_Row], config: TipDecodeConfig):
        """(forced tokens by row, the draws' table, the draws, their rows): everything a
        choice reads but the logits."""
        out, draws, at = [-1] * len(rows), [], []
        for i, r in enumerate(rows):
            if r.req.forced is not None:
                k = len(r.ids)
                out[i] = r.req.forced[k] if k < len(r.req.forced) else -1
            else:
                draws.append(r.sampler.draw(index=len(r.ids)))
                at.append(i)
        temps = [d.sampler.config.temperature for d in draws]
        table = RowTable(draws, self.model.get_output_embeddings().weight.shape[0], at,
                         [t if t > 0 else 1.0 for t in temps]) if draws else None
        return out, table, draws, at

    def _choose(self, rows: list[_Row], logits: torch.Tensor, config: TipDecodeConfig,
                plan=None) -> list[int]:
        """Every row's next token from its logits row: a forced request's next recorded
        token (-1 past its end), the others drawn together on the logits' device (noise keyed
        by the request's seed and its token count), one copy of the ids back to the host.
        Recorded log-probs are under the row's temperature (what GRPO's ratio reads)."""
        out, table, draws, at = plan or self._plan(rows, config)
        if config.record_logits:
            for i, r in enumerate(rows):
                r.logits.append(logits[i].float().cpu())
        if draws:
            ids_t, lp_t = choose_on_device(logits, draws, logprobs=config.record_logprobs,
                                           logprob_temperatures=table.columns[-1],
                                           rows=at, table=table)
            if lp_t is None:
                ids, logprobs = ids_t.tolist(), None
            else:
                chosen, logprobs = torch.stack([ids_t.double(), lp_t.double()]).tolist()
                ids = [int(t) for t in chosen]
            for k, i in enumerate(at):
                out[i] = ids[k]
                if config.record_logprobs:
                    rows[i].logprobs.append(logprobs[k])
        return out

    def _sampled_eos(self, row: _Row) -> bool:
        return row.req.forced is None and row.pending in self.eos

    def _finished(self, row: _Row, config: TipDecodeConfig) -> list[str] | None:
        """Flags when the row is done, else None."""
        if row.pending < 0 or self._sampled_eos(row):
            return []
        if len(row.ids) >= (row.req.max_new_tokens or config.max_new_tokens):
            return [FLAG_MAX_NEW_TOKENS]
        return None

    def _result(self, row: _Row, flags: list[str]) -> TipResult:
        """EOS, when sampled, ends `ids` but was never fed (so it is not in the KV)."""
        written, steps = row.kv.n_tokens, len(row.ids)
        ids = row.ids + ([row.pending] if self._sampled_eos(row) else [])
        return TipResult(
            rid=row.req.rid, ids=ids, flags=flags, generated=len(ids),
            mean_live_tokens=row.live_sum / max(1, steps),
            mean_live_response_tokens=row.live_response_sum / max(1, steps),
            peak_pages=row.peak_pages,
            peak_live_tokens=row.peak_live, slots_allocated=row.slots_allocated,
            prefill_s=row.prefill_s, decode_s=row.decode_s,
            logits=torch.stack(row.logits) if row.logits else None,
            reads=row.reads if self._record_reads else None,
            logprobs=row.logprobs[:len(ids)] if row.logprobs else None,
            slots_written=written,
            evicted_pages=row.evicted_pages)

    def run(self, requests: Iterable[TipRequest], config: TipDecodeConfig,
            on_step: Callable[[int], None] | None = None) -> Iterator[TipResult]:
        """Decode every request; results come out in the order requests finish.
        `on_step(n)` is called after each decode step with the tokens it fed (for progress)."""
        policy = make_policy(config.policy, config.budget, self.page_size)
        self._batch_bucket = config.batch_size
        if policy.needs_registers and self.vocab is None:
            raise SolmError(f"--policy {policy.name} needs a tokenizer with the register tokens")
        self.cache.state.check_reads = config.check_reads
        self._record_reads = config.record_reads
        waiting = iter(requests)
        rows: list[_Row] = []
        exhausted = False
        while True:
            while not exhausted and len(rows) < config.batch_size:
                req = next(waiting, None)
                if req is None:
                    exhausted = True
                    break
                rows.append(self._admit(req, policy, config))
            done = [(r, f) for r in rows if (f := self._finished(r, config)) is not None]
            for r, flags in done:
                rows.remove(r)
                self._forget(r)
                yield self._result(r, flags)
            if done:
                continue  # refill before the next step
            if not rows:
                return
            self._decode_step(rows, policy, config)
            if on_step is not None:
                on_step(len(rows))

    def session(self, config: TipDecodeConfig) -> "TipSession":
        """Step-wise decoding (a server's continuous batching): see `TipSession`."""
        return TipSession(self, config)

    def _decode_step(self, rows: list[_Row], policy: EvictionPolicy,
                     config: TipDecodeConfig) -> None:
        """Feed every row's pending token in one forward pass and choose the next ones."""
        started = time.perf_counter()
        tokens, slots, positions = [], [], []
        for r in rows:
            pos = r.kv.n_tokens
            slots.append(self._place(r, r.pending, False, policy))
            self._evict(r, policy)
            tokens.append([r.pending])
            positions.append([pos])
            r.ids.append(r.pending)
        built, reads = self.compile_s, self.cache.state.reads
        # the draws before the pass (they read what each row wrote, not the logits): they
        # ride in the pass's one upload where the engine's KV takes a staging
        plan = self._plan(rows, config)
        staging = None
        if getattr(self.engine_kv, "stages", False) and plan[1] is not None:
            staging = PassStaging(self.device)
            plan[1].stage(staging)
        logits = self._forward(rows, tokens, slots, positions, policy,
                               **({"staging": staging} if staging is not None else {}))
        chosen = self._choose(rows, logits, config, plan)  # a device waits here: timed
        elapsed = time.perf_counter() - started - (self.compile_s - built)
        self.steps_s += elapsed
        self.step_reads += self.cache.state.reads - reads
        for r, token in zip(rows, chosen):
            r.decode_s += elapsed
            r.peak_pages = max(r.peak_pages, len(r.kv.pages))
            r.pending = token


class TipSession:
    """Requests join and leave at step boundaries, each with its own sampling and cap, under
    one policy: `add` queues, `step` admits what fits (up to the batch size, while the pool
    has pages for the prompt), decodes one token for every running request and returns those
    that ended; `cancel` ends one at the next step. Results carry the flag `cancelled` when
    cancelled."""

    CANCELLED = "cancelled"

    def __init__(self, runtime: TipRuntime, config: TipDecodeConfig):
        self.rt, self.config = runtime, config
        self.policy = make_policy(config.policy, config.budget, runtime.page_size)
        if self.policy.needs_registers and runtime.vocab is None:
            raise SolmError(f"policy {self.policy.name} needs a tokenizer with the register "
                            f"tokens")
        self.waiting: list[TipRequest] = []
        self.rows: list[_Row] = []
        self._cancel: set = set()

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.rows)

    def add(self, request: TipRequest) -> None:
        self.waiting.append(request)

    def cancel(self, rid) -> None:
        self._cancel.add(rid)

    def ids_of(self, rid) -> list[int] | None:
        """Tokens a running request has generated so far (for streaming)."""
        row = next((r for r in self.rows if r.req.rid == rid), None)
        return None if row is None else list(row.ids)

    def row_of(self, rid) -> _Row | None:
        return next((r for r in self.rows if r.req.rid == rid), None)

    def abandon(self) -> None:
        for r in self.rows:
            self.rt._forget(r)
        self.rows, self.waiting = [], []

    def _end(self, row: _Row, flags: list[str]) -> TipResult:
        self.rows.remove(row)
        self.rt._forget(row)
        return self.rt._result(row, flags)

    def step(self) -> list[TipResult]:
        rt, cfg = self.rt, self.config
        ended: list[TipResult] = []
        for req in [w for w in self.waiting if w.rid in self._cancel]:
            self.waiting.remove(req)
            self._cancel.discard(req.rid)
            ended.append(TipResult(req.rid, [], [self.CANCELLED], 0, 0.0, 0.0, 0, 0, 0, 0.0, 0.0))
        for row in [r for r in self.rows if r.req.rid in self._cancel]:
            self._cancel.discard(row.req.rid)
            ended.append(self._end(row, [self.CANCELLED]))
        rt._batch_bucket = cfg.batch_size
        rt.cache.state.check_reads = cfg.check_reads
        rt._record_reads = cfg.record_reads
        while self.waiting and len(self.rows) < cfg.batch_size:
            need = -(-(len(self.waiting[0].prompt) + 1) // rt.page_size) + 1
            if len(rt.allocator.free_list) < need and self.rows:
                break  # wait for a running request to free pages
            self.rows.append(rt._admit(self.waiting.pop(0), self.policy, cfg))
        for row in list(self.rows):
            flags = rt._finished(row, cfg)
            if flags is not None:
                ended.append(self._end(row, flags))
        if self.rows:
            rt._decode_step(self.rows, self.policy, cfg)
        return ended

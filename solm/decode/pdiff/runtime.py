"""Planned Diffusion decoding: plan autoregressively, denoise every planned chunk at once,
continue autoregressively; many prompts at a time over one KV pool.

Per request, in phases (each step is one forward pass for every running request):

1. **Plan**: the main thread decodes one token per step with a KV cache (its tokens are
   written once into the request's slots), under Pasta-Lang's grammar (no block tags, no
   mask or pad tokens in the main thread). A promise's closing token records a chunk.
2. **Chunks**: when the main thread samples `<sync/>` (or the end) with chunks promised,
   each chunk is laid out in its `chunk_slots(N, length scale)` slots (`<async>`, masked
   slots, `</async>`) and every unfinished chunk is fed whole, all chunks of all requests in
   one pass; masked slot j reads the logits row `pdiff.predictor(j)` = j - 1, the row
   training predicted it from. Per chunk, `ceil(masked slots x steps ratio)` steps; each
   step unmasks `ceil(masked left / steps left)` slots, lowest entropy first (or highest
   confidence), plus, with `confidence_threshold`, every slot whose confidence reaches it
   (ahead of the schedule); with `pads_end_chunk` (default) a chunk's tail of pads
   (committed, or predicted at masked slots) and every masked slot after its first committed
   pad take their pad without another pass. Slots committed ahead of the schedule shorten
   it: a chunk takes at most `ceil(masked left x steps ratio)` more steps. A finished chunk
   is no longer fed. A model trained with chunk blocks (`block_size` B > 0) denoises each
   chunk one block at a time, left to right: a pass feeds the chunk's current block with
   the finished block's last slot (its row predicts the block's first slot) (and, in the
   pass after a block is finished, that whole block again with its final tokens, so the
   cache holds what training shows the later blocks); each block takes `ceil(its masked
   slots x steps ratio)` steps. When all are done, their KV
   is written once more from the final tokens in the same pass that feeds the pending
   `<sync/>` (their KV was computed while they were partly masked); at the end of the
   answer nothing reads them, so no pass is spent.
3. **Continue**: the main thread decodes on after `<sync/>` (a later plan may start another
   round); `max_continuation` tokens after the first `<sync/>` stop a runaway continuation
   (flagged).

Visibility is `and_masks(same_request, pdiff_visible)` on attributes from `PdiffTracker`,
the code training uses, so the sampler reads exactly the rows training built. Inside a chunk
no control token and no EOS can be sampled, except pad; pads are trimmed from the answer.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Hashable, Iterable, Iterator, Sequence

import torch

from solm.core.models import block_size_of, positions_of
from solm.core.model_features import past_the_window
from solm.core.counter_noise import gumbel, row_keys
from solm.core.sampling import Draw, RowTable, Sampler, choose_on_device, formatting_token_ids
from solm.core.structure import BATCH_ATTR_NAMES, and_masks, same_request
from solm.core.systems.pdiff import (ATTR_NAMES, PdiffTracker, PdiffVocab, chunk_slots,
                                     pdiff_visible, predictor)
from solm.decode.flags import MAX_NEW_TOKENS, TOPIC_CAPPED
from solm.decode.pasta.grammar import PastaGrammar
from solm.decode.pdiff.config import PdiffDecodeConfig
from solm.decode.protocol import Done
from solm.engines.staging import PassStaging
from solm.engines.torch.device_step import slot_step
from solm.engines.torch.slots import SlotAllocator

CONTINUATION_CAP = "continuation_cap"  # the continuation after <sync/> reached its cap
EOS_IN_TOPIC = "eos_in_topic"  # (scripted plans only) the answer ended inside a topic
REFUSED = "refused"


@dataclass
class ChunkReport:
    slots: int
    pads: int  # pad tokens it holds (trimmed from the answer)
    content_tokens: int
    steps: int  # denoising passes it was fed in
    pad_only: bool


@dataclass
class PdiffDecodeResult:
    ids: list[int]  # response in training order, chunks in their slots (pads kept)
    forward_passes: int  # decode passes after prefill: plan + denoise + join
    plan_passes: int
    denoise_passes: int
    prefill_s: float
    decode_s: float
    flags: list[str]
    chunks: list[ChunkReport]
    ended: bool = False  # the model's end of sequence ended the answer
    join_passes: int = 0  # passes that wrote the chunks' final KV and fed their <sync/>
    fed_slots: list[int] = field(default_factory=list)  # per denoising pass: chunk slots fed
    committed: list[int] = field(default_factory=list)  # per denoising pass: slots committed
    # record=True: per denoising pass, {chunk index: (tokens fed, logits rows)}; and the
    # pool slot of every prompt + response token in training order
    steps: list[dict[int, tuple[list[int], torch.Tensor]]] | None = None
    slots: list[int] | None = None

    @property
    def wall_s(self) -> float:
        return self.prefill_s + self.decode_s


@dataclass
class PdiffRequest:
    rid: Hashable
    prompt_ids: Sequence[int]
    config: PdiffDecodeConfig
    script: Sequence[int] | None = None  # main-thread tokens to force (tests), then EOS


@dataclass
class _Chunk:
    fid: int
    close_at: int  # index of its promise's closing token in the main thread
    tens: int
    tokens: list[int] = field(default_factory=list)
    attrs: list = field(default_factory=list)
    start: int = -1  # pool slots [start, start + len(tokens))
    masked: set[int] = field(default_factory=set)
    budget: int = 0  # denoising steps of the current block (the whole chunk without blocks)
    steps: int = 0  # denoising passes it was fed in
    block_steps: int = 0  # of those, the current block's
    block: int = 0  # the block being denoised (attrs[j].block of its slots)
    stale: list[int] = field(default_factory=list)  # finished slots whose KV saw masks
    final: set[int] = field(default_factory=set)  # slots whose KV holds their final tokens

    @property
    def done(self) -> bool:
        return not self.masked

    def block_slots(self, block: int) -> list[int]:
        return [j for j, a in enumerate(self.attrs) if a.block == block]


@dataclass
class _Run:
    req: PdiffRequest
    tracker: PdiffTracker
    sampler: Sampler
    start: int
    end: int
    next_slot: int
    main: list[int] = field(default_factory=list)  # response main-thread tokens fed
    main_slots: list[int] = field(default_factory=list)
    pending: int | None = None
    in_topic: bool = False
    topic_len: int = 0
    planned: list[_Chunk] = field(default_factory=list)  # promised, not yet denoised
    denoising: list[_Chunk] = field(default_factory=list)
    chunks: list[_Chunk] = field(default_factory=list)  # every chunk, in promise order
    after_sync: int | None = None  # main tokens fed since the first <sync/>
    finish_after_chunks: bool = False
    flags: set[str] = field(default_factory=set)
    plan_passes: int = 0
    denoise_passes: int = 0
    join_passes: int = 0
    passes: int = 0
    fed_slots: list[int] = field(default_factory=list)
    committed: list[int] = field(default_factory=list)
    prefill_s: float = 0.0
    started: float = 0.0
    ended: bool = False
    prompt_slots: tuple[int, int] = (0, 0)
    recorded: list = field(default_factory=list)
    owner: int = 0


def slots_to_commit(entropy: Sequence[float], confidence: Sequence[float],
                    is_pad: Sequence[bool], steps_left: int, cfg: PdiffDecodeConfig) -> set[int]:
    """Which of a chunk's masked slots (indices into the step's rows) one denoising step
    commits: the ceil(masked / steps left) first by the order (`cfg.order`: lowest entropy,
    or highest confidence; with `defer_pads` every non-pad slot first; ties by slot), every
    slot whose confidence reaches `confidence_threshold` (not a pad under `defer_pads`), and
    all of them when the last step is due or (`pads_end_chunk`) only pads are left. Host
    values: the pass's one copy brought them back."""
    masked = len(entropy)
    score = entropy if cfg.order == "entropy" else [-c for c in confidence]
    # sorted() is stable: ties keep slot order
    order = sorted(range(masked), key=lambda i: score[i])
    if cfg.defer_pads:  # every non-pad slot ranks first, each group still by its score
        order = sorted(order, key=lambda i: bool(is_pad[i]))
    k = masked if steps_left <= 1 else math.ceil(masked / steps_left)
    keep = set(order[:k])
    if cfg.confidence_threshold is not None:
        keep |= {i for i in range(masked) if confidence[i] >= cfg.confidence_threshold
                 and not (cfg.defer_pads and is_pad[i])}
    if cfg.pads_end_chunk and all(is_pad):
        keep = set(range(masked))  # nothing but pads is left to write
    return keep


@dataclass
class _Unmask:
    """One denoising step of one chunk, waiting for the pass's choice: the masked slots of
    its current block and the rows of the pass's logits that predict them."""

    run: "_Run"
    chunk: _Chunk
    masked: list[int]
    rows: list[int]  # per masked slot, its predicting row in the pass's logits
    fed: list[int]  # the chunk's slots the pass fed (`record`)
    first: int  # the pass's row of the first of them


class PdiffRuntime:
    """`run(requests)` yields `Done(rid, result, error)` as each request ends;
    `generate(prompt_ids, config)` decodes one."""

    def __init__(self, model, tokenizer, pool_size: int = 4096, max_batch: int = 16,
                 forward=None, compile: bool = False, compile_backend: str = "inductor"):
        """`forward`: another engine's pass with `SlotStep`'s call
        (`solm.engines.llamacpp.step.LlamaPdiffStep`); default: solm's own over `pool_size`
        slots, its passes of up to 64 tokens compiled with `compile` (the plan's; denoising
        passes feed whole chunks and run eagerly)."""
        self.model, self.tokenizer = model, tokenizer
        self.vocab = PdiffVocab.from_tokenizer(tokenizer, positions_of(model),
                                               block_size=block_size_of(model))
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        self.device = next(model.parameters()).device
        self.pool_size, self.max_batch = pool_size, max_batch
        self.forward = forward or slot_step(model, pool_size,
                                          and_masks(same_request, pdiff_visible),
                                          (*ATTR_NAMES, *BATCH_ATTR_NAMES), compile=compile,
                                          backend=compile_backend)
        self.slots = SlotAllocator(pool_size)
        self._owners = 0
        self.waiting: deque[PdiffRequest] = deque()
        self.running: list[_Run] = []
        self._masks: dict | None = None
        self._pad_ids = torch.tensor(self.vocab.pads)  # every pad of the cycle
        self._device_tensors: dict[tuple[str, str], torch.Tensor] = {}

    # ---- grammar -------------------------------------------------------------------------

    def masks(self) -> dict[str, torch.Tensor]:
        """Banned-token masks: main thread (with and without chunks to sync), topic, chunk."""
        if self._masks is None:
            v, n = self.vocab, self.vocab_size
            g = PastaGrammar(v, self.tokenizer, n)
            extra = torch.zeros(n, dtype=torch.bool)
            extra[[v.mask, *v.pads]] = True
            chunk = torch.zeros(n, dtype=torch.bool)
            chunk[[t for t in v.chunk_banned_ids if t < n]] = True
            chunk[len(self.tokenizer):] = True  # rows past the tokenizer are no tokens
            self._masks = {"main": g.main | extra, "main_no_sync": g.main_no_sync | extra,
                           "topic": g.topic | extra, "topic_must_close": g.topic_must_close,
                           "chunk": chunk}
        return self._masks

    # ---- public API ----------------------------------------------------------------------

    def generate(self, prompt_ids: Sequence[int], config: PdiffDecodeConfig,
                 script: Sequence[int] | None = None) -> PdiffDecodeResult:
        for rid, res, err in self.run([PdiffRequest(0, prompt_ids, config, script)]):
            if err:
                raise ValueError(err)
            return res
        raise RuntimeError("no result")

    def generate_many(self, prompts: Sequence[Sequence[int]], config: PdiffDecodeConfig
                      ) -> list[PdiffDecodeResult]:
        out = {}
        for rid, res, err in self.run(PdiffRequest(i, p, config) for i, p in enumerate(prompts)):
            if err:
                raise ValueError(f"prompt {rid}: {err}")
            out[rid] = res
        return [out[i] for i in range(len(prompts))]

    def run(self, requests: Iterable[PdiffRequest]
            ) -> Iterator[Done]:
        for req in requests:
            req.config.check()
            self.waiting.append(req)
        try:
            while self.waiting or self.running:
                yield from self._admit()
                if self.running:
                    yield from self._step()
        finally:
            for r in list(self.running):
                self._release(r)
            self.running.clear()
            self.waiting.clear()

    # ---- admission -----------------------------------------------------------------------

    def _admit(self):
        while self.waiting and len(self.running) < self.max_batch:
            req = self.waiting[0]
            need = len(req.prompt_ids) + req.config.max_new_tokens
            why = ("empty prompt" if not req.prompt_ids else
                   f"prompt + max_new_tokens = {need} slots does not fit a pool of "
                   f"{self.pool_size}" if need > self.pool_size else
                   past_the_window(self.model.config, need))
            if why:
                self.waiting.popleft()
                yield Done(req.rid, None, why)
                continue
            span = self.slots.take(need)
            if span is None:
                break
            self.waiting.popleft()
            self.running.append(self._prefill(req, span))

    def _prefill(self, req: PdiffRequest, span: tuple[int, int]) -> _Run:
        cfg = req.config
        self._owners += 1
        always = [*self.vocab.control_ids, *self.vocab.eos]
        exempt = list(always)
        if cfg.sampling.repetition_penalty != 1.0:
            exempt += formatting_token_ids(self.tokenizer)
        run = _Run(req, PdiffTracker(self.vocab, cfg.length_scale),
                   Sampler(cfg.sampling, exempt=exempt, always_allowed=always),
                   span[0], span[1], span[0])
        run.owner = self._owners
        t0 = time.perf_counter()
        prompt = [int(t) for t in req.prompt_ids]
        attrs = [run.tracker.main(t) for t in prompt]
        run.prompt_slots = (run.next_slot, run.next_slot + len(prompt))
        logits = self._forward([(run, prompt, attrs, list(range(*run.prompt_slots)))],
                               prefill=True)[0]
        run.next_slot += len(prompt)
        run.prefill_s = time.perf_counter() - t0
        run.started = time.perf_counter()
        draws = [self._draw(run)]
        last = logits.shape[0] - 1  # (an engine may give the prompt's last row only)
        table = RowTable(draws, self.vocab_size, [last])
        self._choose_all(logits, [(run, last)], draws, table, [], None)
        return run

    # ---- one pass for every running request ----------------------------------------------

    def _forward(self, feeds: list[tuple[_Run, list[int], list, list[int]]],
                 prefill: bool = False, staging=None, whole: bool = False):
        """One forward pass: each feed is (run, tokens, attrs, pool slots); returns each
        feed's logits rows (`whole`: the pass's logits, feeds' rows in order)."""
        tokens, positions, slots, reads = [], [], [], []
        columns: dict[str, list[int]] = {n: [] for n in (*ATTR_NAMES, *BATCH_ATTR_NAMES)}
        for run, toks, attrs, where in feeds:
            tokens += toks
            positions += [a.pos for a in attrs]
            slots += where
            for n in ATTR_NAMES:
                columns[n] += [int(getattr(a, n)) for a in attrs]
            columns["request"] += [run.owner] * len(toks)
            columns["group"] += [-1] * len(toks)
            columns["shared"] += [0] * len(toks)
            high = max(run.next_slot, max(where) + 1)
            reads.append((len(toks), [(run.start, high)]))
        extra = {"staging": staging} if staging is not None else {}
        logits = self.forward(tokens, positions, columns, slots, reads, prefill=prefill,
                              **extra)
        if whole:
            return logits
        out, at = [], 0
        for _, toks, _, _ in feeds:
            out.append(logits[at:at + len(toks)])
            at += len(toks)
        return out

    def _step(self):
        feeds, kinds = [], []
        for run in list(self.running):
            feed = self._schedule(run)
            if feed is None:
                yield self._end(run)
                continue
            feeds.append(feed[1])
            kinds.append(feed[0])
        if not feeds:
            return
        # everything a choice needs but the logits, before the pass: the main threads'
        # draws (what they fed is known) and each chunk's masked slots with the rows that
        # predict them; their host data rides in the pass's one upload
        asks: list[tuple[_Run, int]] = []  # main threads choosing their next token, row
        jobs: list[_Unmask] = []
        at = 0
        for kind, (run, toks, attrs, where) in zip(kinds, feeds):
            run.passes += 1
            if kind == "main":
                run.plan_passes += 1
                self._advance_main(run, toks[0], where[0])
                asks.append((run, at + len(toks) - 1))
            elif kind == "denoise":
                run.denoise_passes += 1
                run.fed_slots.append(len(toks))
                run.committed.append(0)
                jobs += self._denoise_jobs(run, at)
            else:  # the chunks' final KV, and <sync/> read through them
                run.join_passes += 1
                self._joined(run, where[-1])
                asks.append((run, at + len(toks) - 1))
            at += len(toks)
        draws = [self._draw(run) for run, _ in asks]
        table = RowTable(draws, self.vocab_size, [row for _, row in asks]) if asks else None
        staging = PassStaging(self.device) if getattr(self.forward, "stages", False) else None
        if staging is not None:
            if table is not None:
                table.stage(staging)
            if jobs:
                staging.put("chunks", self._chunk_table(jobs))
        logits = self._forward(feeds, staging=staging, whole=True)
        if any(job.run.req.config.record for job in jobs):
            self._record(jobs, logits)
        self._choose_all(logits, asks, draws, table, jobs, staging)

    def _choose_all(self, logits: torch.Tensor, asks: list[tuple[_Run, int]], draws: list,
                    table, jobs: list[_Unmask], staging) -> None:
        """Every choice of a pass, computed on the logits' device and copied to the host
        once: the main threads' next tokens, and for every masked slot a denoising step
        reads its chosen token, confidence, entropy and whether it is a pad."""
        main = chunk = None
        if asks:
            main, _ = choose_on_device(logits, draws, rows=table.row_list, table=table)
        if jobs:
            chunk = self._chunk_choices(logits, jobs, staging)
        parts = ([main.double()] if main is not None else []) + \
            ([chunk.reshape(-1)] if chunk is not None else [])
        host = torch.cat(parts).tolist()  # the pass's one copy
        for (run, _), tok in zip(asks, host):
            run.pending = int(tok)
        slots = sum(len(job.masked) for job in jobs)
        chosen, confidence, entropy, is_pad = (
            host[len(asks) + k * slots: len(asks) + (k + 1) * slots] for k in range(4))
        at = 0
        for job in jobs:
            rows = slice(at, at + len(job.masked))
            at = rows.stop
            self._unmask(job, [int(t) for t in chosen[rows]], confidence[rows], entropy[rows],
                         [bool(x) for x in is_pad[rows]])

    def _chunk_table(self, jobs: list[_Unmask]) -> list[float]:
        """Per masked slot of the pass: its predicting row, its chunk temperature, its
        draw's key (seed, 1 + chunk, step << 16 + slot), whether a pad may not end the
        chunk there yet (`min_fill`) and the confidence a pad needs (`pad_confidence`, 0:
        any); one row after another, column by column."""
        cols: list[list[float]] = [[] for _ in range(7)]
        for job in jobs:
            cfg = job.run.req.config
            for j, row in zip(job.masked, job.rows):
                for col, value in zip(cols, (
                        row, cfg.chunk_temperature, cfg.sampling.seed, 1 + job.chunk.fid,
                        (job.chunk.steps << 16) + j,
                        float((j - 1) < cfg.min_fill * (len(job.chunk.tokens) - 2)),
                        cfg.pad_confidence or 0.0)):
                    col.append(float(value))
        return [v for col in cols for v in col]

    def _chunk_choices(self, logits: torch.Tensor, jobs: list[_Unmask], staging=None
                       ) -> torch.Tensor:
        """[4, slots] over every job's masked slots in turn: chosen id, its probability
        (confidence), the row's entropy, pad or not; each slot's draw keyed by (seed,
        1 + chunk, step, slot). The slots' host data comes from the pass's staging (or one
        upload of its own) and their rows are gathered from the pass's logits at once."""
        n = sum(len(job.masked) for job in jobs)
        device = logits.device
        if staging is not None:
            data = staging.get("chunks")
        else:
            data = torch.tensor(self._chunk_table(jobs), dtype=torch.float64, device=device)
        table = data.view(7, n)
        rows, temps, seeds, chunks, slots = (table[0].long(), table[1].float(),
                                             table[2].long(), table[3].long(), table[4].long())
        early, need = table[5] > 0, table[6].float()
        logits = logits.index_select(0, rows).float()
        logits = logits.masked_fill(self._on(device, "chunk")[: logits.shape[-1]],
                                    float("-inf"))
        pad_ids = self._on(device, "pads")
        is_pad_id = torch.isin(torch.arange(logits.shape[-1], device=device), pad_ids)
        probs = torch.softmax(logits, dim=-1)
        # the slots a pad may not end yet (`min_fill`): their choice among the other tokens
        logits = logits.masked_fill(early[:, None] & is_pad_id[None, :], float("-inf"))
        chosen = torch.softmax(logits, dim=-1).argmax(dim=-1)
        sampled = temps > 0
        if any(job.run.req.config.chunk_temperature > 0 for job in jobs):
            keys = row_keys(seeds, chunks, slots)
            t = torch.where(sampled, temps, torch.ones_like(temps))
            drawn = torch.argmax(torch.log_softmax(logits / t[:, None], dim=-1)
                                 + gumbel(keys, logits.shape[-1]), dim=-1)
            chosen = torch.where(sampled, drawn, chosen)
        confidence = probs.gather(1, chosen[:, None])[:, 0]
        # a pad the model is not sure of (`pad_confidence`): the most likely other token
        unsure = torch.isin(chosen, pad_ids) & (confidence < need)
        other = logits.masked_fill(is_pad_id[None, :], float("-inf")).argmax(dim=-1)
        chosen = torch.where(unsure, other, chosen)
        confidence = probs.gather(1, chosen[:, None])[:, 0]
        entropy = -(probs * torch.log(probs.clamp_min(1e-30))).sum(-1)
        is_pad = torch.isin(chosen, pad_ids)
        return torch.stack([chosen.double(), confidence.double(), entropy.double(),
                            is_pad.double()])

    def _on(self, device, name: str) -> torch.Tensor:
        """A mask (`masks()`) or the pad ids ("pads") on `device`, copied there once."""
        key = (str(device), name)
        if key not in self._device_tensors:
            t = self._pad_ids if name == "pads" else self.masks()[name]
            self._device_tensors[key] = t.to(device)
        return self._device_tensors[key]

    def _schedule(self, run: _Run):
        """(kind, feed) of this request's next pass, or None when it has ended."""
        cfg = run.req.config
        if run.denoising:
            if all(c.done for c in run.denoising):
                if run.finish_after_chunks:
                    return None
                return "write", self._write_feed(run)
            return "denoise", self._denoise_feed(run)
        tok = run.pending
        if tok is None:
            return None
        v = self.vocab
        if tok in v.eos:
            run.ended = True
            if run.planned:
                self._lay_out(run, finish=True)
                return self._schedule(run) if run.denoising else None
            return None
        if tok == v.sync and run.planned:
            if not self._lay_out(run, finish=False) and not self._lay_out(run, finish=True):
                return None  # (cannot happen: the cap keeps the chunks' room)
            return self._schedule(run)
        # a promise opens only with room for a topic, its closer and a chunk of 10 slots
        opening = (cfg.max_topic_tokens + 1 + chunk_slots(1, cfg.length_scale)
                   if tok == v.promise_open else 0)
        if self._used(run) + 1 + opening + self._reserved(run, tok) > cfg.max_new_tokens:
            # the cap: the answer ends, but promised chunks keep the room they were promised
            # (a length cap alone never leaves a promise without its chunk)
            run.flags.add(MAX_NEW_TOKENS)
            if run.planned and self._lay_out(run, finish=True):
                return self._schedule(run)
            return None
        if run.after_sync is not None and run.after_sync >= cfg.max_continuation:
            run.flags.add(CONTINUATION_CAP)
            return None
        attrs = run.tracker.main(tok)
        return "main", (run, [tok], [attrs], [run.next_slot])

    def _used(self, run: _Run) -> int:
        return len(run.main) + sum(len(c.tokens) for c in run.chunks)

    def _reserved(self, run: _Run, tok: int) -> int:
        """Slots the planned chunks (and the one `tok` would promise) still need."""
        scale = run.req.config.length_scale
        tens = [c.tens for c in run.planned]
        if tok in self.vocab.close_tens:
            tens.append(self.vocab.close_tens[tok])
        return sum(chunk_slots(n, scale) for n in tens)

    def _advance_main(self, run: _Run, tok: int, slot: int) -> None:
        v = self.vocab
        run.main.append(tok)
        run.main_slots.append(slot)
        run.next_slot += 1
        if run.after_sync is not None:
            run.after_sync += 1
        if tok == v.sync and run.after_sync is None:
            run.after_sync = 0
        if tok in v.close_tens:
            fid = run.tracker.open_fork()
            chunk = _Chunk(fid, len(run.main) - 1, v.close_tens[tok])
            run.planned.append(chunk)
            run.chunks.append(chunk)
            run.in_topic, run.topic_len = False, 0
        elif tok == v.promise_open:
            run.in_topic, run.topic_len = True, 0
        elif run.in_topic:
            run.topic_len += 1

    def _draw(self, run: _Run) -> Draw:
        """The main thread's next-token request: its script's token, or a draw under the
        grammar's masks (noise keyed by the run's seed and the token's index)."""
        script = run.req.script
        if script is not None:
            k = len(run.main)
            return run.sampler.draw(given=int(script[k]) if k < len(script)
                                    else self.vocab.eos[0])
        m = self.masks()
        if run.in_topic:
            capped = run.topic_len >= run.req.config.max_topic_tokens
            if capped:
                run.flags.add(TOPIC_CAPPED)
            banned = m["topic_must_close"] if capped else m["topic"]
            # only the lengths whose chunk still fits under the cap
            cfg = run.req.config
            room = cfg.max_new_tokens - self._used(run) - self._reserved(run, -1) - 1
            too_long = [t for t, n in self.vocab.close_tens.items()
                        if chunk_slots(n, cfg.length_scale) > room]
            if too_long:
                banned = banned.clone()
                banned[too_long] = True
        else:
            banned = m["main"] if run.planned else m["main_no_sync"]
        return run.sampler.draw(banned, run.main, index=len(run.main))

    # ---- chunks --------------------------------------------------------------------------

    def _lay_out(self, run: _Run, finish: bool) -> bool:
        """Give every planned chunk its slots, all masked; False when they do not fit."""
        cfg = run.req.config
        v = self.vocab
        sizes = [chunk_slots(c.tens, cfg.length_scale) for c in run.planned]
        # room for the chunks, and for the <sync/> that joins them
        if self._used(run) + sum(sizes) + (0 if finish else 1) > cfg.max_new_tokens:
            run.flags.add(MAX_NEW_TOKENS)
            run.ended = False
            return False
        for chunk, size in zip(run.planned, sizes):
            chunk.tokens = [v.async_open, *[v.mask] * (size - 2), v.async_close]
            chunk.attrs = run.tracker.chunk_attrs(chunk.fid, chunk.tokens)
            chunk.start = run.next_slot
            run.next_slot += size
            chunk.masked = set(range(1, size - 1))
            chunk.block = 0
            chunk.budget = self._block_budget(chunk, cfg)
        run.denoising, run.planned = run.planned, []
        run.finish_after_chunks = finish
        return True

    @staticmethod
    def _block_budget(c: _Chunk, cfg: PdiffDecodeConfig) -> int:
        """Denoising steps of the chunk's current block: ceil(its masked slots x ratio)."""
        masked = sum(1 for j in c.masked if c.attrs[j].block == c.block)
        return max(1, math.ceil(masked * cfg.steps_ratio))

    def _fed_slots(self, c: _Chunk, finished_too: bool) -> list[int]:
        """The chunk's slots a pass feeds: for the join (`finished_too`), every slot whose KV
        does not hold its final tokens yet (a block model's last block; a whole chunk
        without blocks); while denoising, the whole chunk without blocks, else the finished
        block whose KV saw masks and the current block."""
        if finished_too:
            return [j for j in range(len(c.tokens)) if j not in c.final]
        if self.vocab.block_size == 0:
            return list(range(len(c.tokens)))
        current = c.block_slots(c.block)
        # the finished block's last slot predicts the current block's first (the shifted
        # convention): fed again with the block (its KV unchanged), so every predicting
        # row is a row of this pass
        edge = [min(current) - 1] if c.block > 0 and not c.stale else []
        return [*c.stale, *edge, *current]

    def _denoise_feed(self, run: _Run, finished_too: bool = False):
        """Every unfinished chunk's fed slots (with `finished_too`, every chunk's slots)."""
        toks, attrs, where = [], [], []
        for c in run.denoising:
            if finished_too or not c.done:
                fed = self._fed_slots(c, finished_too)
                toks += [c.tokens[j] for j in fed]
                attrs += [c.attrs[j] for j in fed]
                where += [c.start + j for j in fed]
        return run, toks, attrs, where

    def _write_feed(self, run: _Run):
        _, toks, attrs, where = self._denoise_feed(run, finished_too=True)
        sync = self.vocab.sync
        return run, toks + [sync], attrs + [run.tracker.main(sync)], where + [run.next_slot]

    def _denoise_jobs(self, run: _Run, first_row: int) -> list[_Unmask]:
        """Each unfinished chunk's denoising step of this pass: its masked slots and the
        rows (of the pass's logits, the run's feed starting at `first_row`) predicting them
        (a slot is predicted by the row before it)."""
        at = first_row
        jobs = []
        for c in run.denoising:
            if c.done:
                continue
            fed = self._fed_slots(c, False)
            row_of = {j: at + i for i, j in enumerate(fed)}
            at += len(fed)
            if c.stale:  # fed now with its final tokens: its KV is final
                c.final |= set(c.stale)
                c.stale = []
            masked = sorted(j for j in c.masked if c.attrs[j].block == c.block)
            jobs.append(_Unmask(run, c, masked, [row_of[predictor(j)] for j in masked],
                                fed, at - len(fed)))
        return jobs

    def _record(self, jobs: list[_Unmask], logits: torch.Tensor) -> None:
        """`record`: per denoising pass, per chunk it fed, the tokens the chunk held and every
        slot's row (NaN where the pass fed none)."""
        passes: dict[int, dict] = {}
        for job in jobs:
            run, c = job.run, job.chunk
            if not run.req.config.record:
                continue
            full = torch.full((len(c.tokens), logits.shape[-1]), float("nan"))
            full[job.fed] = logits[job.first:job.first + len(job.fed)].float().cpu()
            passes.setdefault(id(run), {})[run.chunks.index(c)] = (list(c.tokens), full)
        for run in {id(job.run): job.run for job in jobs}.values():
            if run.req.config.record:
                run.recorded.append(passes.get(id(run), {}))

    def _unmask(self, job: _Unmask, chosen: list[int], confidence: list[float],
                entropy: list[float], is_pad: list[bool]) -> None:
        """Commit one denoising step of one chunk's current block from its slots' choices:
        the scheduled (and the confident) ones."""
        c, masked, cfg = job.chunk, job.masked, job.run.req.config
        keep = slots_to_commit(entropy, confidence, is_pad, c.budget - c.block_steps, cfg)
        before = len(c.masked)
        for i in keep:
            j = masked[i]
            c.tokens[j] = chosen[i]
            c.masked.discard(j)
        if cfg.pads_end_chunk:
            self._trailing_pads(c, {masked[i] for i in range(len(masked)) if is_pad[i]})
            self._pads_after_end(c)
        job.run.committed[-1] += before - len(c.masked)
        c.steps += 1
        c.block_steps += 1
        left = sum(1 for j in c.masked if c.attrs[j].block == c.block)
        if left == 0 and c.masked:  # the block is finished: on to the next with masked slots
            finished = c.block_slots(c.block)
            c.block = min(c.attrs[j].block for j in c.masked)
            c.stale, c.block_steps = finished, 0
            c.budget = self._block_budget(c, cfg)
            return
        # the steps ratio is a cap: slots committed ahead of the schedule (confident, or
        # pads) leave fewer masked slots, which need no more steps than a fresh block of them
        c.budget = min(c.budget, c.block_steps + math.ceil(left * cfg.steps_ratio))

    def _trailing_pads(self, c: _Chunk, predicted_pads: set[int]) -> None:
        """The chunk's tail of pads, committed or predicted at masked slots, is its end: its
        masked slots take their pad now, the cycle's as training lays it from the tail's
        first slot."""
        pads = set(self.vocab.pads)
        j = len(c.tokens) - 2
        while j >= 1 and (c.tokens[j] in pads or (j in c.masked and j in predicted_pads)):
            j -= 1
        self._fill_pads(c, j + 1)

    def _pads_after_end(self, c: _Chunk) -> None:
        """Every masked slot after the chunk's first committed pad becomes a pad."""
        pads = set(self.vocab.pads)
        end = next((j for j in range(1, len(c.tokens) - 1) if c.tokens[j] in pads), None)
        if end is not None:
            self._fill_pads(c, end)

    def _fill_pads(self, c: _Chunk, end: int) -> None:
        """Masked slots from `end` (the content's end) on take the pad training puts there."""
        for j in [j for j in c.masked if j >= end]:
            c.tokens[j] = self.vocab.pad_for(j - end)
            c.masked.discard(j)

    def _joined(self, run: _Run, sync_slot: int) -> None:
        run.denoising = []
        run.main.append(self.vocab.sync)
        run.main_slots.append(sync_slot)
        run.next_slot += 1
        if run.after_sync is None:
            run.after_sync = 0
        else:
            run.after_sync += 1

    # ---- the end -------------------------------------------------------------------------

    def _end(self, run: _Run):
        decode_s = time.perf_counter() - run.started
        self.running.remove(run)
        self._release(run)
        return Done(run.req.rid, self._result(run, decode_s))

    def _release(self, run: _Run) -> None:
        self.forward.release(run.start, run.end)
        self.slots.free(run.start, run.end)

    def _result(self, run: _Run, decode_s: float) -> PdiffDecodeResult:
        v = self.vocab
        by_close = {c.close_at: c for c in run.chunks if c.tokens}
        ids: list[int] = []
        slots = list(range(*run.prompt_slots))
        reports = []
        for i, tok in enumerate(run.main):
            ids.append(tok)
            slots.append(run.main_slots[i])
            c = by_close.get(i)
            if c is not None:
                ids += c.tokens
                slots += range(c.start, c.start + len(c.tokens))
        for c in run.chunks:
            if not c.tokens:
                continue
            inner = c.tokens[1:-1]
            pads = sum(1 for t in inner if t in v.pads)
            content = [t for t in inner if t not in (*v.pads, v.mask)]
            reports.append(ChunkReport(len(c.tokens), pads, len(content), c.steps,
                                       pad_only=not content))
        return PdiffDecodeResult(
            ids=ids, forward_passes=run.passes, plan_passes=run.plan_passes,
            denoise_passes=run.denoise_passes, join_passes=run.join_passes,
            fed_slots=list(run.fed_slots), committed=list(run.committed),
            prefill_s=run.prefill_s, decode_s=decode_s,
            flags=sorted(run.flags), chunks=reports, ended=run.ended,
            steps=run.recorded if run.req.config.record else None,
            slots=slots if run.req.config.record else None)

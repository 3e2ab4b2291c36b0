"""PASTA's asynchronous decoding runtime: promised chunks decode as parallel threads.

All threads share one pre-allocated KV pool and one forward step (`solm.engines.torch.step.PoolStep`,
masked by `pasta_visible`): every step feeds one token for every active thread in a single
forward pass; each fed token's attributes come from `PastaTracker`, the same code training
uses, so the runtime decodes exactly what a model was trained on.

- the main thread decodes; when it feeds a promise's closing token, a block thread starts in
  the same step with `<async>` and runs until it feeds `</async>`;
- the main thread does not see blocks until `<sync/>`, which waits for every open block and
  enters the pool in the step where the last block feeds its final token;
- `mode="sequential"` decodes with the same runtime one token at a time, ignoring tags
  (the baseline); `mode="parallel"` acts on the tags.

Decoding is split as in gpt-fast's generate.py: `prefill` (prompt into the pool, first token
chosen) returns a `PastaRunState`; `step` schedules one batch (which threads feed what),
runs one forward pass and chooses each thread's next token; `finish` assembles the result.
Anything that cuts decoding short ends cleanly and is reported in `PastaDecodeResult.flags`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from solm.core.models import positions_of
from solm.core.model_features import past_the_window
from solm.core.sampling import (Draw, RowTable, Sampler, SamplingConfig, choose_on_device,
                                 choose_tokens, formatting_token_ids)
from solm.core.systems.pasta import (ATTR_NAMES, MAIN, PastaTracker, PastaVocab, TokenAttrs,
                                     pasta_visible, walk_training_order)
from solm.decode.flags import (PASTA_GUARDS, BLOCK_CUT as FLAG_BLOCK_CUT,
                               EOS_WITH_OPEN_FORKS as FLAG_EOS_WITH_OPEN_FORKS,
                               FORK_CAPPED as FLAG_FORK_CAPPED, FORK_EOS as FLAG_FORK_EOS,
                               MAX_NEW_TOKENS as FLAG_MAX_NEW_TOKENS, POOL_FULL as FLAG_POOL_FULL,
                               BLOCK_REPEATING as FLAG_BLOCK_REPEATING,
                               PROMISE_OVERRUN as FLAG_PROMISE_OVERRUN,
                               TOPIC_CAPPED as FLAG_TOPIC_CAPPED)
from solm.decode.pasta.config import MODES, PastaDecodeConfig  # noqa: F401 (re-exported)
from solm.decode.pasta.grammar import PastaGrammar
from solm.decode.pasta.guards import close_bias, past_promise, repeating
from solm.engines.torch.step import PoolStep

PENALIZE_SCOPES = ("all", "blocks")


@dataclass
class PastaDecodeResult:
    ids: list[int]  # response tokens in training order (blocks spliced after their promises)
    forward_passes: int  # decode steps after prefill
    threads: int  # blocks started
    tokens_fed: int
    prefill_s: float
    decode_s: float
    flags: list[str]
    logits: torch.Tensor | None = None  # [len(ids), vocab] in training order, when recorded
    kv_read: int = 0  # pool slots attention read, summed over decode steps (bandwidth)
    compile_s: float = 0.0  # steps that built a compiled graph (not in prefill_s/decode_s)
    # indices into `ids` of the tokens the runtime forced (no choice of the model's): each
    # block's `<async>`, and a `</async>` put in a block's place or added by a stop
    forced: list[int] = field(default_factory=list)
    ended: bool = False  # the model's end-of-sequence token ended the answer (not a cap)
    # with record_logprobs: a raw log-prob per token of `ids` (None for forced tokens), and
    # that of the end-of-sequence token that ended the answer (None when a cap ended it)
    logprobs: list[float | None] | None = None
    end_logprob: float | None = None
    guarded: int = 0  # blocks a guard closed (promise overrun, repetition)
    # indices into `ids` of the tokens never fed (a block's `</async>` the token cap's stop
    # added): `logits` has no row for them
    unfed: list[int] = field(default_factory=list)

    @property
    def wall_s(self) -> float:
        return self.prefill_s + self.decode_s


@dataclass
class _Thread:
    tid: int
    pending: int | None = None  # next token to feed
    fed: list[int] = field(default_factory=list)
    done: bool = False
    in_topic: bool = False
    topic_len: int = 0
    script: Sequence[int] | None = None  # replay: the recorded stream
    closed_by_stop: bool = False  # decoding stopped early; `</async>` added to the output only
    logits: list[torch.Tensor] = field(default_factory=list)
    pending_forced: bool = False  # `pending` was put there by the runtime, not chosen
    forced: list[bool] = field(default_factory=list)  # one per fed token
    pending_logprob: float | None = None  # raw log-prob of `pending` when it was sampled
    logprobs: list[float | None] = field(default_factory=list)  # one per fed token
    promise: int | None = None  # a block: its promise's T (tokens="T")


# chooser(thread, logits row, run state) -> next token of that thread
Chooser = Callable[[_Thread, torch.Tensor, "PastaRunState"], int]


@dataclass
class PastaRunState:
    """Everything one decode carries from step to step."""

    config: PastaDecodeConfig
    tracker: PastaTracker
    chooser: Chooser | None  # None: replay (threads follow their scripts)
    replay_anchors: set[int]  # replay: main-stream indices of promises that open a block
    threads: dict[int, _Thread] = field(default_factory=lambda: {MAIN: _Thread(MAIN)})
    fork_anchor: dict[int, int] = field(default_factory=dict)  # block id -> its close in main
    flags: set[str] = field(default_factory=set)
    blocks_since_sync: int = 0
    steps: int = 0
    fed_total: int = 0
    generated: int = 0
    kv_read: int = 0
    compile_base: float = 0.0  # the step's compile clock when this decode started
    compile_s: float = 0.0
    prefill_s: float = 0.0
    decode_started: float = 0.0
    decode_s: float = 0.0
    ended: bool = False
    end_logprob: float | None = None
    guarded: int = 0  # blocks a guard closed

    @property
    def main(self) -> _Thread:
        return self.threads[MAIN]

    @property
    def parallel(self) -> bool:
        return self.config.mode == "parallel"

    @property
    def replaying(self) -> bool:
        return self.chooser is None

    def next_token(self, th: _Thread, logits: torch.Tensor) -> int | None:
        return choose_next(logits[None], [(self, th, 0)])[0]


_GIVEN = Sampler(SamplingConfig())  # rows whose token is decided: only their log-prob


def choose_next(logits: torch.Tensor, items: Sequence[tuple[PastaRunState, _Thread, int]]
                ) -> list[int | None]:
    """Each (state, thread, row of `logits`)'s next token: the thread's script's in a
    replay, else its state's chooser's. Rows whose chooser draws batched (`GrammarChooser`
    over a `Sampler`) are chosen together, on the logits' device, gathered from `logits` by
    the draws' own upload, with one copy of the ids (and log-probs, where recorded) back to
    the host for all of them."""
    return PassChoices(items, logits.shape[-1]).finish(logits)


class PassChoices:
    """The next tokens a pass asks for, planned before its forward (a thread's draw reads
    only what it fed, not the logits): scripted tokens now, the batched draws' table ready
    to ride in the pass's one upload (`stage`), the rest chosen from the logits
    (`finish`)."""

    def __init__(self, items: Sequence[tuple[PastaRunState, _Thread, int]], vocab_size: int):
        self.items = list(items)
        self.out: list[int | None] = [None] * len(self.items)
        self.batched: list[tuple[int, Draw]] = []
        self.later: list[int] = []  # rows a chooser that does not draw batched picks
        for i, (state, th, row) in enumerate(self.items):
            th.pending_forced, th.pending_logprob = False, None
            if th.script is not None:
                k = len(th.fed)
                self.out[i] = th.script[k] if k < len(th.script) else None
                if self.out[i] is not None and state.config.record_logprobs:
                    self.batched.append((i, _GIVEN.draw(given=self.out[i])))
            elif getattr(state.chooser, "draws_batched", False):
                self.batched.append((i, state.chooser.draw(th, state)))
            else:
                self.later.append(i)
        self.table = RowTable([d for _, d in self.batched], vocab_size,
                              [self.items[i][2] for i, _ in self.batched]) \
            if self.batched else None

    def stage(self, staging) -> None:
        if self.table is not None:
            self.table.stage(staging)

    def finish(self, logits: torch.Tensor) -> list[int | None]:
        for i in self.later:
            state, th, row = self.items[i]
            self.out[i] = state.chooser(th, logits[row], state)
            if self.out[i] is not None and state.config.record_logprobs:
                th.pending_logprob = choose_tokens(logits, [_GIVEN.draw(given=self.out[i])],
                                                   logprobs=True, rows=[row])[1][0]
        if self.batched:
            want = any(self.items[i][0].config.record_logprobs for i, _ in self.batched)
            ids, logprobs = _choose_table(logits, self.table, [d for _, d in self.batched],
                                          want)
            for k, (i, _) in enumerate(self.batched):
                state, th, _ = self.items[i]
                self.out[i] = ids[k]
                if state.config.record_logprobs:
                    th.pending_logprob = logprobs[k]
        return self.out


def _choose_table(logits: torch.Tensor, table: RowTable, draws: list[Draw], logprobs: bool
                  ) -> tuple[list[int], list[float] | None]:
    """`choose_tokens` over a table planned before the pass (its upload, or the pass's)."""
    ids, lp = choose_on_device(logits, draws, logprobs, rows=table.row_list, table=table)
    if lp is None:
        return ids.tolist(), None
    chosen, values = torch.stack([ids.double(), lp.double()]).tolist()
    return [int(t) for t in chosen], values


class GrammarChooser:
    """Next-token choice under Pasta-Lang's grammar for each thread's state. `draw(thread,
    state)` is the request batched sampling takes (noise keyed by the thread's id and its
    token count, so a thread's draws do not depend on its batch mates); calling it chooses
    one row. `sampler` may be any `(logits, banned, history) -> id` callable; only a
    `Sampler` draws batched."""

    def __init__(self, sampler, grammar: PastaGrammar, config: PastaDecodeConfig,
                 vocab: PastaVocab, written: Sequence[int] = ()):
        if config.penalize not in PENALIZE_SCOPES:
            raise ValueError(f"penalize must be 'all' or 'blocks', got {config.penalize!r}")
        self.sampler, self.grammar, self.config, self.vocab = sampler, grammar, config, vocab
        self.written = list(written)
        self.penalize_main = config.penalize == "all" or config.mode != "parallel"
        self.draws_batched = isinstance(sampler, Sampler)

    def rule(self, thread: _Thread, state: PastaRunState
             ) -> tuple[torch.Tensor, Sequence[int], list[tuple[int, float]]]:
        """The thread's banned ids, the history its penalties read and its logit biases."""
        config, grammar = self.config, self.grammar
        # the penalty and the n-gram ban look at what this thread wrote
        if thread.tid != MAIN:
            history = thread.fed
        elif self.penalize_main:
            history = [*self.written, *thread.fed] if self.written else thread.fed
        else:
            history = ()
        if config.mode != "parallel":
            return grammar.sequential, history, []
        if thread.tid != MAIN:
            bias = close_bias(len(thread.fed) - 1, thread.promise, config.close_nudge)
            return (grammar.fork_no_eos if config.mask_block_eos else grammar.fork, history,
                    [(self.vocab.async_close, bias)] if bias else [])
        if thread.in_topic:
            capped = thread.topic_len >= config.max_topic_tokens
            if capped:
                state.flags.add(FLAG_TOPIC_CAPPED)
            return grammar.topic_must_close if capped else grammar.topic, history, []
        return grammar.for_main(state.blocks_since_sync, config.max_promises), history, []

    def draw(self, thread: _Thread, state: PastaRunState) -> Draw:
        banned, history, bias = self.rule(thread, state)
        return self.sampler.draw(banned, history, stream=thread.tid, index=len(thread.fed),
                                 bias=bias)

    def __call__(self, thread: _Thread, logits: torch.Tensor, state: PastaRunState) -> int:
        if self.draws_batched:
            return choose_tokens(logits[None], [self.draw(thread, state)])[0][0]
        banned, history, bias = self.rule(thread, state)
        if bias:
            logits = logits.clone()
            for tok, value in bias:
                logits[tok] += value
        return self.sampler(logits, banned, history)


class PastaRuntime:
    """Decode with one model; reuse the object across prompts (the pool is reused)."""

    def __init__(self, model, tokenizer, pool_size: int = 2048, compile: bool = False,
                 compile_backend: str = "inductor", forward=None):
        """`forward`: another engine's pass with `PoolStep`'s call
        (`solm.engines.llamacpp.step.LlamaPoolStep`); default: solm's own over `pool_size` slots."""
        self.model = model
        self.tokenizer = tokenizer
        self.vocab = PastaVocab.from_tokenizer(tokenizer, positions_of(model))
        # True: a `<sync/>` waits a pass for its blocks' ends (an engine that joins only
        # the cells it already holds)
        self.join_before_sync = bool(getattr(forward, "join_before_sync", False))
        self.forward = forward or PoolStep(model, pool_size, pasta_visible, ATTR_NAMES,
                                           compile=compile, backend=compile_backend)
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        self._grammar: PastaGrammar | None = None

    @property
    def pool_size(self) -> int:
        return self.forward.pool_size

    @property
    def used(self) -> int:
        """Pool slots written by the current (or last) decode."""
        return self.forward.used

    @property
    def grammar(self) -> PastaGrammar:
        if self._grammar is None:
            self._grammar = PastaGrammar(self.vocab, self.tokenizer, self.vocab_size)
        return self._grammar

    # ---- public API -------------------------------------------------------------------

    def generate(self, prompt_ids: Sequence[int], config: PastaDecodeConfig
                 ) -> PastaDecodeResult:
        return self.run(prompt_ids, config, chooser=self.chooser(config))

    def chooser(self, config: PastaDecodeConfig, written: Sequence[int] = ()) -> Chooser:
        """The sampler of `config` under Pasta-Lang's grammar (for driving prefill / step /
        finish by hand, as `generate` does). `written`: the main thread's tokens of this
        answer written before this decode (an answer continued from its prompt + them): the
        repetition penalty and the n-gram ban count them as the main thread's own."""
        always = [*self.vocab.control_ids, *self.vocab.eos]
        exempt = list(always)
        if config.sampling.repetition_penalty != 1.0:
            exempt += formatting_token_ids(self.tokenizer)
        sampler = Sampler(config.sampling, exempt=exempt, always_allowed=always)
        return self.sampling_chooser(sampler, config, written)

    def replay(self, prompt_ids: Sequence[int], response_ids: Sequence[int],
               mode: str = "parallel", record_logits: bool = False,
               max_new_tokens: int | None = None) -> PastaDecodeResult:
        """Teacher-force recorded tokens on the real schedule (the benchmark's replay mode)."""
        config = PastaDecodeConfig(mode=mode, record_logits=record_logits,
                                   max_new_tokens=max_new_tokens or len(response_ids) + 1,
                                   max_fork_tokens=len(response_ids) + 1)
        response_ids = [int(t) for t in response_ids]
        if mode == "parallel":
            streams, anchors = replay_scripts(response_ids, self.vocab)
        else:
            streams, anchors = {MAIN: response_ids}, set()
        return self.run(prompt_ids, config, chooser=None, scripts=streams,
                        replay_anchors=anchors)

    def run(self, prompt_ids: Sequence[int], config: PastaDecodeConfig, chooser: Chooser | None,
            scripts: dict[int, list[int]] | None = None,
            replay_anchors: set[int] = frozenset()) -> PastaDecodeResult:
        """Prefill, step until done, finish. `chooser` None replays `scripts` instead."""
        state = self.prefill(prompt_ids, config, chooser, scripts, replay_anchors)
        while self.step(state):
            pass
        return self.finish(state)

    def sampling_chooser(self, sampler: Sampler, config: PastaDecodeConfig,
                         written: Sequence[int] = ()) -> GrammarChooser:
        """Next-token choice under Pasta-Lang's grammar for each thread's state."""
        # the grammar is built here, once per runtime: never inside decode timing
        return GrammarChooser(sampler, self.grammar, config, self.vocab, written)

    def refusal(self, prompt_ids: Sequence[int], config: PastaDecodeConfig) -> str | None:
        """Why this prompt can never be decoded here (None: it can)."""
        if len(prompt_ids) + 1 > self.pool_size:
            return (f"prompt of {len(prompt_ids)} tokens does not fit a pool of "
                    f"{self.pool_size} slots (raise --pool-size)")
        return past_the_window(self.model.config, len(prompt_ids) + config.max_new_tokens)

    # ---- prefill / step / finish ------------------------------------------------------

    def prefill(self, prompt_ids: Sequence[int], config: PastaDecodeConfig,
                chooser: Chooser | None, scripts: dict[int, list[int]] | None = None,
                replay_anchors: set[int] = frozenset()) -> PastaRunState:
        """Write the prompt into an empty pool and choose the main thread's first token."""
        if config.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {config.mode!r}")
        prompt_ids = [int(t) for t in prompt_ids]
        why = self.refusal(prompt_ids, config)
        if why:
            raise ValueError(why)
        self.forward.reset()
        state = PastaRunState(config, PastaTracker(self.vocab), chooser, set(replay_anchors))
        if scripts is not None:
            for tid, stream in scripts.items():
                state.threads.setdefault(tid, _Thread(tid)).script = stream
        t0 = time.perf_counter()
        state.compile_base = self.forward.compile_s
        prompt_attrs = [state.tracker.main(t) for t in prompt_ids]
        logits = self.forward(prompt_ids, prompt_attrs, prefill=True)[-1]
        state.compile_s = self.forward.compile_s - state.compile_base
        state.prefill_s = time.perf_counter() - t0 - state.compile_s
        state.decode_started = time.perf_counter()
        state.main.pending = state.next_token(state.main, logits)
        state.generated = 0 if state.main.pending is None else 1
        return state

    def step(self, state: PastaRunState) -> bool:
        """One forward pass for every thread that has a token to feed; False when done."""
        self._end_main_at_eos(state)
        batch, attrs = self._schedule(state)
        if not batch:
            return self._stop(state)
        if not self.forward.fits(len(batch)):
            state.flags.add(FLAG_POOL_FULL)
            return self._stop(state)
        logits = self.forward([tok for _, tok in batch], attrs)
        state.steps += 1
        state.fed_total += len(batch)
        state.kv_read += self.forward.used  # a step reads the written slots once
        if self._advance(state, batch, logits):
            state.flags.add(FLAG_MAX_NEW_TOKENS)
            return self._stop(state)
        return True

    def finish(self, state: PastaRunState) -> PastaDecodeResult:
        """Close blocks a stop cut short (flagged) and splice every thread in training order."""
        v = self.vocab
        if state.flags & {FLAG_POOL_FULL, FLAG_MAX_NEW_TOKENS}:
            # close blocks cut short so the output stays well-formed Pasta-Lang (flagged above)
            for tid, th in state.threads.items():
                if tid != MAIN and th.fed and not th.done and th.fed[-1] != v.async_close:
                    th.closed_by_stop = True
                    state.flags.add(FLAG_BLOCK_CUT)
        ids, logit_rows, forced, logprobs, unfed = _training_order(
            state.threads, state.fork_anchor, state.config.record_logits, v.async_close)
        return PastaDecodeResult(ids=ids, forward_passes=state.steps,
                                 threads=len(state.threads) - 1, tokens_fed=state.fed_total,
                                 prefill_s=state.prefill_s, decode_s=state.decode_s,
                                 flags=sorted(state.flags),
                                 logits=torch.stack(logit_rows) if logit_rows else None,
                                 kv_read=state.kv_read, compile_s=state.compile_s,
                                 forced=forced, ended=state.ended,
                                 logprobs=logprobs if state.config.record_logprobs else None,
                                 end_logprob=state.end_logprob, guarded=state.guarded,
                                 unfed=unfed)

    # ---- the pieces of a step ---------------------------------------------------------

    def _stop(self, state: PastaRunState) -> bool:
        """Decoding ended: its time, less any step that built a compiled graph."""
        in_decode = self.forward.compile_s - state.compile_base - state.compile_s
        state.compile_s += in_decode
        state.decode_s = time.perf_counter() - state.decode_started - in_decode
        return False

    def _end_main_at_eos(self, state: PastaRunState) -> None:
        main = state.main
        if main.pending is not None and main.pending in self.vocab.eos and not state.replaying:
            state.ended, state.end_logprob = True, main.pending_logprob
            main.pending = None
            main.done = True
            if any(not th.done for tid, th in state.threads.items() if tid != MAIN):
                state.flags.add(FLAG_EOS_WITH_OPEN_FORKS)
        if main.pending is None:
            main.done = True

    def _schedule(self, state: PastaRunState) -> tuple[list[tuple[_Thread, int]],
                                                       list[TokenAttrs]]:
        """Who feeds what this step: main (unless it waits at `<sync/>` for open blocks),
        every open block, and a block its promise's closing token starts in this step."""
        v, main, tracker = self.vocab, state.main, state.tracker
        active = [t for tid, t in state.threads.items()
                  if tid != MAIN and not t.done and t.pending is not None]
        feed_main = main.pending is not None
        if feed_main and state.parallel and main.pending == v.sync and active:
            # the sync joins the blocks in the pass that closes them, unless the engine can
            # only join what it already holds (llama.cpp: then one pass later)
            feed_main = not self.join_before_sync and all(t.pending == v.async_close
                                                          for t in active)
        batch: list[tuple[_Thread, int]] = []
        attrs: list[TokenAttrs] = []
        new_fork: _Thread | None = None
        # the open blocks' attributes first: a `<sync/>` fed in the pass that closes them
        # continues past their `</async>` (overlap positions), as in training order
        fork_attrs = [tracker.fork(th.tid, th.pending) for th in active]
        if feed_main:
            tok = main.pending
            batch.append((main, tok))
            attrs.append(tracker.main(tok))
            if state.parallel and tok in v.close_tens and (
                    not state.replaying or len(main.fed) in state.replay_anchors):
                fid = tracker.open_fork()
                new_fork = state.threads.setdefault(fid, _Thread(fid))
                new_fork.pending = v.async_open
                new_fork.pending_forced = True
                new_fork.promise = v.close_tens[tok]
                state.generated += 1  # the forced `<async>` is part of the answer too
                state.fork_anchor[fid] = len(main.fed)
        for th, a in zip(active, fork_attrs):
            batch.append((th, th.pending))
            attrs.append(a)
        if new_fork is not None:
            batch.append((new_fork, new_fork.pending))
            attrs.append(tracker.fork(new_fork.tid, new_fork.pending))
        return batch, attrs

    def _cost(self, state: PastaRunState, th: _Thread, tok: int) -> int:
        """Answer tokens a sampled token commits to: itself, and for a promise's closing
        token in parallel mode the `<async>` and `</async>` of the block it opens."""
        if th is state.main and state.parallel and not state.replaying \
                and tok in self.vocab.close_tens:
            return 3
        return 1

    def _advance(self, state: PastaRunState, batch: list[tuple[_Thread, int]],
                 logits: torch.Tensor) -> bool:
        """Record what each thread fed and choose its next token; True when the token cap
        stopped decoding."""
        asks = self._record_fed(state, batch, logits)
        chosen = choose_next(logits, [(state, batch[row][0], row) for row in asks])
        return self._settle(state, batch, dict(zip(asks, chosen)))

    def _record_fed(self, state: PastaRunState, batch: list[tuple[_Thread, int]],
                    logits: torch.Tensor) -> list[int]:
        """What each thread fed this pass; returns the rows that ask for a next token (every
        thread but a block that fed its `</async>`). A thread's choice reads only its own
        record (and main's, which is row 0), so all rows can be chosen at once after it."""
        v, main, config = self.vocab, state.main, state.config
        asks = []
        for row, (th, tok) in enumerate(batch):
            th.fed.append(tok)
            th.pending = None
            th.forced.append(th.pending_forced)
            if config.record_logprobs:
                th.logprobs.append(th.pending_logprob)
            if config.record_logits and logits is not None:  # (None: recorded by the caller)
                th.logits.append(logits[row])
            if th is main:
                if tok == v.sync:
                    state.blocks_since_sync = 0
                elif tok in v.close_tens:
                    th.in_topic, th.topic_len = False, 0
                    state.blocks_since_sync += 1
                elif tok == v.promise_open:
                    th.in_topic, th.topic_len = True, 0
                elif th.in_topic:
                    th.topic_len += 1
            elif tok == v.async_close:
                th.done = True
                continue
            asks.append(row)
        return asks

    def _settle(self, state: PastaRunState, batch: list[tuple[_Thread, int]],
                chosen: dict[int, int | None]) -> bool:
        """Commit the chosen tokens in row order under the token cap, the guards and forced
        closes; True when the cap stopped decoding. A row the cap stops drops its choice."""
        v, main, config = self.vocab, state.main, state.config
        stop = False
        for row, (th, _) in enumerate(batch):
            if row not in chosen:
                continue
            if state.generated + _reserved(state, v) >= config.max_new_tokens:
                stop = True
                continue
            nxt = chosen[row]
            if nxt is None:
                th.done = True
                continue
            if state.generated + _reserved(state, v) + self._cost(state, th, nxt) \
                    > config.max_new_tokens:
                stop = True  # no room for this token (a promise: and its block's two tags)
                continue
            state.generated += 1
            if th is not main and not state.replaying:
                if nxt in v.eos:
                    state.flags.add(FLAG_FORK_EOS)
                    nxt = self._force(th, v.async_close)
                elif nxt != v.async_close:
                    guard = self._guard(th, config)
                    if guard:
                        state.flags.add(guard)
                        state.guarded += guard in PASTA_GUARDS
                        nxt = self._force(th, v.async_close)
            th.pending = nxt
        return stop

    @staticmethod
    def _guard(th: _Thread, config: PastaDecodeConfig) -> str | None:
        """The flag of the rule that closes this block now (None: it may go on). `th.fed`
        starts with the block's `<async>`."""
        content = th.fed[1:]
        if len(th.fed) >= config.max_fork_tokens:
            return FLAG_FORK_CAPPED
        if config.keep_promises and th.promise is not None \
                and past_promise(len(content), th.promise):
            return FLAG_PROMISE_OVERRUN
        if repeating(content, config.block_repeats):
            return FLAG_BLOCK_REPEATING
        return None

    @staticmethod
    def _force(th: _Thread, tok: int) -> int:
        """`tok` takes the place of the token the model chose."""
        th.pending_forced, th.pending_logprob = True, None
        return tok


def _reserved(state: PastaRunState, vocab) -> int:
    """Answer tokens already committed to but not yet counted: a `</async>` for each open
    block (its own, or the one a stop inserts; one already chosen is counted), and the `<async>` and `</async>` of the block
    a promise's closing token waiting in main will open. The token cap keeps room for them."""
    if state.replaying:  # a replay follows its scripts; its cap is only a guard
        return 0
    open_blocks = sum(1 for tid, th in state.threads.items()
                      if tid != MAIN and not th.done and th.pending != vocab.async_close)
    main = state.main
    opening = (state.parallel and main.pending is not None
               and main.pending in vocab.close_tens)
    return open_blocks + (2 if opening else 0)


def replay_scripts(response_ids: Sequence[int], vocab: PastaVocab
                   ) -> tuple[dict[int, list[int]], set[int]]:
    """A recorded response split for replay: each thread's token stream, and the main-stream
    indices of the promises whose closing token opens a block."""
    attrs, _ = walk_training_order(response_ids, vocab)
    streams: dict[int, list[int]] = {MAIN: []}
    anchors: set[int] = set()
    for tok, a in zip(response_ids, attrs):
        streams.setdefault(a.thread, []).append(int(tok))
        if a.thread != MAIN:
            anchors.add(a.anchor)
    return streams, anchors


def _training_order(threads: dict[int, _Thread], fork_anchor: dict[int, int],
                    with_logits: bool, async_close: int
                    ) -> tuple[list[int], list[torch.Tensor], list[int], list[float | None],
                               list[int]]:
    """Main's tokens with each block spliced in right after its promise's closing token (and
    their logits rows, the indices of forced tokens, log-probs as recorded, and the indices
    of tokens the stop added without feeding them)."""
    main = threads[MAIN]
    after: dict[int, list[int]] = {}
    for fid, idx in fork_anchor.items():
        after.setdefault(idx, []).append(fid)
    ids: list[int] = []
    rows: list[torch.Tensor] = []
    forced: list[int] = []
    logprobs: list[float | None] = []
    unfed: list[int] = []

    def take(th: _Thread, i: int) -> None:
        if th.forced[i]:
            forced.append(len(ids))
        ids.append(th.fed[i])
        logprobs.append(th.logprobs[i] if i < len(th.logprobs) else None)
        if with_logits:
            rows.append(th.logits[i])

    for i in range(len(main.fed)):
        take(main, i)
        for fid in after.get(i, []):
            fork = threads[fid]
            for k in range(len(fork.fed)):
                take(fork, k)
            if fork.closed_by_stop:
                forced.append(len(ids))  # added by the stop
                unfed.append(len(ids))
                ids.append(async_close)
                logprobs.append(None)
    return ids, rows, forced, logprobs, unfed

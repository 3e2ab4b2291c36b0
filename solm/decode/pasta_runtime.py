"""PASTA's asynchronous decoding runtime: promised chunks decode as parallel threads.

All threads share one pre-allocated KV pool (solm.decode.pool), written in decode order.
Every step feeds one token for every active thread in a single forward pass; each fed
token's attributes come from solm.core.structure's PastaTracker and its mask row from
`pasta_visible`, the same functions training uses, so the runtime decodes exactly what a
model was trained on.

- the main thread decodes; when it feeds a promise's closing token, a block thread starts in
  the same step with `<async>` and runs until it feeds `</async>`;
- the main thread does not see blocks until `<sync/>`, which waits for every open block and
  enters the pool in the step where the last block feeds its final token;
- `mode="sequential"` decodes with the same runtime one token at a time, ignoring tags
  (the baseline); `mode="parallel"` acts on the tags.

Anything that cuts decoding short ends cleanly and is reported in `DecodeResult.flags`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from solm.core.sampling import Sampler, formatting_token_ids, SamplingConfig
from solm.core.structure import (EMPTY, MAIN, PastaTracker, PastaVocab, TokenAttrs,
                                 pasta_visible, walk_training_order)
from solm.decode.attention import attention_implementation
from solm.decode.grammar import PastaGrammar
from solm.decode.head import OutputHead
from solm.decode.pool import PoolCache, num_layers_of

FLAG_MAX_NEW_TOKENS = "max_new_tokens"
FLAG_POOL_FULL = "pool_full"
FLAG_FORK_CAPPED = "fork_capped"
FLAG_FORK_EOS = "eos_in_fork"
FLAG_EOS_WITH_OPEN_FORKS = "eos_with_open_forks"
FLAG_TOPIC_CAPPED = "topic_capped"
FLAG_BLOCK_CUT = "block_cut"  # a stop cut a block short; the runtime closed it
MODES = ("parallel", "sequential")


@dataclass
class DecodeConfig:
    mode: str = "parallel"
    max_new_tokens: int = 1024
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_fork_tokens: int = 512
    max_topic_tokens: int = 24
    record_logits: bool = False
    # threads the repetition penalty and n-gram ban apply to: "all", or "blocks" (async blocks
    # only: the main thread's list markers and newlines repeat by design)
    penalize: str = "all"


@dataclass
class DecodeResult:
    ids: list[int]  # response tokens in training order (blocks spliced after their promises)
    forward_passes: int  # decode steps after prefill
    threads: int  # blocks started
    tokens_fed: int
    prefill_s: float
    decode_s: float
    flags: list[str]
    logits: torch.Tensor | None = None  # [len(ids), vocab] in training order, when recorded

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


class PastaRuntime:
    """Decode with one model; reuse the object across prompts (the pool is reused)."""

    def __init__(self, model, tokenizer, pool_size: int = 2048):
        self.model = model
        self.tokenizer = tokenizer
        self.vocab = PastaVocab.from_tokenizer(tokenizer)
        self.device = next(model.parameters()).device
        self.pool_size = pool_size
        self.cache = PoolCache(num_layers_of(model), pool_size)
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        self._grammar: PastaGrammar | None = None
        self.head = OutputHead(model)
        names = ("thread", "order", "anchor", "epoch", "join")
        self._slots = {n: torch.empty(pool_size, dtype=torch.long) for n in names}

    @property
    def grammar(self) -> PastaGrammar:
        if self._grammar is None:
            self._grammar = PastaGrammar(self.vocab, self.tokenizer, self.vocab_size)
        return self._grammar

    # ---- public API -------------------------------------------------------------------

    def generate(self, prompt_ids: Sequence[int], config: DecodeConfig) -> DecodeResult:
        always = [*self.vocab.control_ids, *self.vocab.eos]
        exempt = list(always)
        if config.sampling.repetition_penalty != 1.0:
            exempt += formatting_token_ids(self.tokenizer)
        sampler = Sampler(config.sampling, device="cpu", exempt=exempt, always_allowed=always)
        return self._run(prompt_ids, config, chooser=self._sampling_chooser(sampler, config))

    def replay(self, prompt_ids: Sequence[int], response_ids: Sequence[int],
               mode: str = "parallel", record_logits: bool = False,
               max_new_tokens: int | None = None) -> DecodeResult:
        """Teacher-force recorded tokens on the real schedule (the benchmark's replay mode)."""
        config = DecodeConfig(mode=mode, record_logits=record_logits,
                              max_new_tokens=max_new_tokens or len(response_ids) + 1,
                              max_fork_tokens=len(response_ids) + 1)
        response_ids = [int(t) for t in response_ids]
        anchors: set[int] = set()
        if mode == "parallel":
            attrs, _ = walk_training_order(response_ids, self.vocab)
            streams: dict[int, list[int]] = {MAIN: []}
            for tok, a in zip(response_ids, attrs):
                streams.setdefault(a.thread, []).append(tok)
                if a.thread != MAIN:
                    anchors.add(a.anchor)
        else:
            streams = {MAIN: response_ids}
        return self._run(prompt_ids, config, chooser=None, scripts=streams,
                         replay_anchors=anchors)

    # ---- the loop ---------------------------------------------------------------------

    def _reset(self) -> None:
        self._slots["thread"].fill_(EMPTY)
        self.used = 0

    @torch.no_grad()
    def _forward(self, tokens: list[int], attrs: list[TokenAttrs]) -> torch.Tensor:
        n, first = len(tokens), self.used
        s = self._slots
        for name in s:
            s[name][first:first + n] = torch.tensor([getattr(a, name) for a in attrs])
        self.used += n
        q = {name: s[name][first:self.used] for name in s}
        k = {name: s[name][:self.used] for name in s}
        visible = pasta_visible(q, k).to(self.device)
        self.cache.set_step(first, n, device=self.device)
        inputs = dict(input_ids=torch.tensor([tokens], device=self.device),
                      position_ids=torch.tensor([[a.pos for a in attrs]], device=self.device),
                      attention_mask=visible[None, None], cache=self.cache, use_cache=True)
        with attention_implementation(self.model):
            if self.head.usable:
                hidden = self.model.base_model(**inputs).last_hidden_state
                return self.head(hidden[0])
            return self.model(**inputs).logits[0]

    def _sampling_chooser(self, sampler: Sampler, config: DecodeConfig) -> Callable:
        g = self.grammar if config.mode == "parallel" else None
        if config.penalize not in ("all", "blocks"):
            raise ValueError(f"penalize must be 'all' or 'blocks', got {config.penalize!r}")
        penalize_main = config.penalize == "all" or config.mode != "parallel"

        def choose(thread: _Thread, logits: torch.Tensor, runtime_state: dict) -> int:
            # the penalty and the n-gram ban look at what this thread wrote
            history = thread.fed if (penalize_main or thread.tid != MAIN) else ()
            if g is None:
                return sampler(logits, self.grammar.sequential, history)
            if thread.tid != MAIN:
                return sampler(logits, g.fork, history)
            if thread.in_topic:
                banned = g.topic_must_close if thread.topic_len >= g.max_topic_tokens else g.topic
                if thread.topic_len >= g.max_topic_tokens:
                    runtime_state["flags"].add(FLAG_TOPIC_CAPPED)
                return sampler(logits, banned, history)
            return sampler(logits, g.main if runtime_state["blocks_since_sync"] else g.main_no_sync,
                           history)

        return choose

    def _run(self, prompt_ids: Sequence[int], config: DecodeConfig, chooser: Callable | None,
             scripts: dict[int, list[int]] | None = None,
             replay_anchors: set[int] = frozenset()) -> DecodeResult:
        if config.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {config.mode!r}")
        parallel = config.mode == "parallel"
        v = self.vocab
        prompt_ids = [int(t) for t in prompt_ids]
        if len(prompt_ids) + 1 > self.pool_size:
            raise ValueError(f"prompt of {len(prompt_ids)} tokens does not fit a pool of "
                             f"{self.pool_size} slots")
        self._reset()
        tracker = PastaTracker(v)
        state = {"flags": set(), "blocks_since_sync": 0}
        flags: set[str] = state["flags"]
        threads: dict[int, _Thread] = {MAIN: _Thread(MAIN)}
        if scripts is not None:
            for tid, stream in scripts.items():
                threads.setdefault(tid, _Thread(tid)).script = stream
        main = threads[MAIN]
        fork_anchor: dict[int, int] = {}  # block id -> index of its closing token in main.fed

        def next_token(th: _Thread, logits: torch.Tensor) -> int | None:
            if th.script is not None:
                k = len(th.fed)
                return th.script[k] if k < len(th.script) else None
            return chooser(th, logits, state)

        t0 = time.perf_counter()
        prompt_attrs = [tracker.main(t) for t in prompt_ids]
        logits = self._forward(prompt_ids, prompt_attrs)[-1]
        prefill_s = time.perf_counter() - t0

        t1 = time.perf_counter()
        main.pending = next_token(main, logits)
        steps = fed_total = 0
        generated = 0 if main.pending is None else 1
        while True:
            if main.pending is not None and main.pending in v.eos and scripts is None:
                main.pending = None
                main.done = True
                if any(not threads[t].done for t in threads if t != MAIN):
                    flags.add(FLAG_EOS_WITH_OPEN_FORKS)
            if main.pending is None:
                main.done = True
            active = [t for tid, t in threads.items()
                      if tid != MAIN and not t.done and t.pending is not None]
            feed_main = main.pending is not None
            if feed_main and parallel and main.pending == v.sync and active:
                feed_main = all(t.pending == v.async_close for t in active)
            batch: list[tuple[_Thread, int]] = []
            attrs: list[TokenAttrs] = []
            new_fork: _Thread | None = None
            if feed_main:
                tok = main.pending
                batch.append((main, tok))
                attrs.append(tracker.main(tok))
                if parallel and tok in v.close_tens and (
                        scripts is None or len(main.fed) in replay_anchors):
                    fid = tracker.open_fork()
                    new_fork = threads.setdefault(fid, _Thread(fid))
                    new_fork.pending = v.async_open
                    fork_anchor[fid] = len(main.fed)
            for th in active:
                batch.append((th, th.pending))
                attrs.append(tracker.fork(th.tid, th.pending))
            if new_fork is not None:
                batch.append((new_fork, new_fork.pending))
                attrs.append(tracker.fork(new_fork.tid, new_fork.pending))
            if not batch:
                break
            if self.used + len(batch) > self.pool_size:
                flags.add(FLAG_POOL_FULL)
                break
            logits = self._forward([tok for _, tok in batch], attrs)
            steps += 1
            fed_total += len(batch)
            stop = False
            for row, (th, tok) in enumerate(batch):
                th.fed.append(tok)
                th.pending = None
                if config.record_logits:
                    th.logits.append(logits[row])
                if th is main:
                    if tok == v.sync:
                        state["blocks_since_sync"] = 0
                    elif tok in v.close_tens:
                        th.in_topic, th.topic_len = False, 0
                        state["blocks_since_sync"] += 1
                    elif tok == v.promise_open:
                        th.in_topic, th.topic_len = True, 0
                    elif th.in_topic:
                        th.topic_len += 1
                elif tok == v.async_close:
                    th.done = True
                    continue
                if generated >= config.max_new_tokens:
                    stop = True
                    continue
                nxt = next_token(th, logits[row])
                if nxt is None:
                    th.done = True
                    continue
                generated += 1
                if th is not main and scripts is None:
                    if nxt in v.eos:
                        flags.add(FLAG_FORK_EOS)
                        nxt = v.async_close
                    elif len(th.fed) >= config.max_fork_tokens and nxt != v.async_close:
                        flags.add(FLAG_FORK_CAPPED)
                        nxt = v.async_close
                th.pending = nxt
            if stop:
                flags.add(FLAG_MAX_NEW_TOKENS)
                break
        decode_s = time.perf_counter() - t1
        if flags & {FLAG_POOL_FULL, FLAG_MAX_NEW_TOKENS}:
            # close blocks cut short so the output stays well-formed Pasta-Lang (flagged above)
            for tid, th in threads.items():
                if tid != MAIN and th.fed and not th.done and th.fed[-1] != v.async_close:
                    th.closed_by_stop = True
                    flags.add(FLAG_BLOCK_CUT)

        ids, logit_rows = self._training_order(threads, fork_anchor, config.record_logits,
                                                  v.async_close)
        return DecodeResult(ids=ids, forward_passes=steps, threads=len(threads) - 1,
                            tokens_fed=fed_total, prefill_s=prefill_s, decode_s=decode_s,
                            flags=sorted(flags),
                            logits=torch.stack(logit_rows) if logit_rows else None)

    @staticmethod
    def _training_order(threads: dict[int, _Thread], fork_anchor: dict[int, int],
                        with_logits: bool, async_close: int) -> tuple[list[int], list[torch.Tensor]]:
        main = threads[MAIN]
        after: dict[int, list[int]] = {}
        for fid, idx in fork_anchor.items():
            after.setdefault(idx, []).append(fid)
        ids: list[int] = []
        rows: list[torch.Tensor] = []
        for i, tok in enumerate(main.fed):
            ids.append(tok)
            if with_logits:
                rows.append(main.logits[i])
            for fid in after.get(i, []):
                fork = threads[fid]
                ids.extend(fork.fed)
                if with_logits:
                    rows.extend(fork.logits)
                if fork.closed_by_stop:
                    ids.append(async_close)
        return ids, rows


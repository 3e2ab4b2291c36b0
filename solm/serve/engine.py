"""The server's decoding engine: one decoding thread, a bounded queue, continuous batching.

Concurrent requests decode together: up to `max_batch` of them share one KV pool and one
forward pass per step (`solm.decode.pasta.batched`); a request joins at a step boundary and
leaves when it ends, freeing its slots. The HTTP side submits a `ServeJob` and reads its events
from an asyncio queue: text deltas as they become final in reading order, then the outcome.
Over the queue bound, `submit` refuses at once (the HTTP side answers 429); a cancelled or
disconnected request leaves the batch at the next step.

Decode in the thread that loaded the model (`work()` in the CLI's main thread, with HTTP on a
side thread): torch's OpenMP pool belongs to the thread that first used it, and a second
thread doing the math ran 1.7x slower per token on a 2-core CPU (measured).
"""

from __future__ import annotations

import asyncio
import queue
import sys
import threading
import traceback
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from solm.core.records import Record
from solm.decode.flags import MAX_NEW_TOKENS, POOL_FULL
from solm.decode.pasta.decode_file import result_record
from solm.decode.pasta.live import final_reading_order
from solm.decode.pasta.runtime import PastaDecodeConfig, PastaRuntime
from solm.serve.streaming import TextStream, TokenLogprob, recording_chooser

CANCELLED = "cancelled"


class QueueFull(Exception):
    pass


class ShuttingDown(Exception):
    """The server is stopping: it takes no new request."""


@dataclass
class ServeJob:
    prompt_ids: list[int]
    config: PastaDecodeConfig
    top_k: int | None = None  # logprobs with this many alternatives; None: no logprobs
    compare: bool = False  # also decode sequentially and report the realized speedup
    stream: bool = False
    loop: asyncio.AbstractEventLoop | None = None
    events: asyncio.Queue | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)

    def emit(self, kind: str, payload: Any) -> None:
        self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, payload))


@dataclass
class Outcome:
    text: str  # the answer without tags, in reading order
    finish_reason: str  # "stop" or "length"
    prompt_tokens: int
    completion_tokens: int  # every generated token, tags included
    figures: dict  # the annotated text, threads, critical path, timings, flags
    logprobs: list[TokenLogprob] | None = None


def _shutdown_error() -> Exception:
    from solm.serve.openai_schema import ApiError

    return ApiError(503, "the server shut down before this request finished; retry "
                         "elsewhere or later", code="server_shutdown")


@dataclass
class _Live:
    """A job being decoded: what its stream has sent so far."""

    job: ServeJob
    stream: TextStream
    sink: list[TokenLogprob]
    sent_logprobs: int = 0


class BaseEngine:
    """What every serving engine shares: the bounded queue, the decoding loop in one thread,
    taking jobs into the batch at step boundaries, graceful shutdown. A system's engine says
    how a job starts (`_start`), what one step does (`_step`), how a failed batch is dropped
    (`_abandon`), how big a prompt may be (`pool_tokens`) and how a request's fields become
    its decode config (`request_config`)."""

    def __init__(self, runtime, max_queue: int = 32, max_batch: int = 8):
        self.runtime = runtime
        self.max_batch = max_batch
        self.jobs: queue.Queue[ServeJob] = queue.Queue(maxsize=max_queue)
        self.lock = threading.Lock()  # decoding holds it, step by step
        self.draining = threading.Event()  # stopping: refuse new jobs, finish queued ones
        self.abort = threading.Event()  # the grace period is over: cancel what remains
        self.live: dict[int, _Live] = {}
        self._ids = 0
        self.cancelled_total = 0  # jobs stopped because their client went away (/health)

    def start_in_thread(self) -> threading.Thread:
        """Decode on a daemon thread (tests, embedding in another program)."""
        worker = threading.Thread(target=self.work, name="solm-decode", daemon=True)
        worker.start()
        return worker

    @property
    def tokenizer(self):
        return self.runtime.tokenizer

    @property
    def busy(self) -> bool:
        return bool(self.live)

    @property
    def pool_tokens(self) -> int:
        raise NotImplementedError

    def request_config(self, defaults, req, cap: int | None, sampling):
        raise NotImplementedError

    def submit(self, job: ServeJob) -> None:
        """Queue a job; its events arrive on `job.events`. Raises QueueFull over the bound."""
        job.loop = job.loop or asyncio.get_running_loop()
        job.events = job.events or asyncio.Queue()
        if self.draining.is_set():
            raise ShuttingDown("the server is shutting down")
        try:
            self.jobs.put_nowait(job)
        except queue.Full:
            raise QueueFull(f"{self.jobs.maxsize} requests are already waiting") from None

    def shutdown(self, grace_s: float) -> None:
        """Stop taking jobs; the queued and running ones have `grace_s` seconds to finish,
        then they are cancelled and answered with an error (`work` returns once all are)."""
        self.draining.set()
        timer = threading.Timer(grace_s, self.abort.set)
        timer.daemon = True
        timer.start()

    def drained(self) -> bool:
        return self.draining.is_set() and self.jobs.empty() and not self.busy

    def work(self, keep_going: Callable[[], bool] = lambda: True) -> None:
        """Decode queued jobs in this thread while `keep_going()` holds, and until every job
        is answered once `shutdown` was called: take what fits, one step for all, stream,
        answer the ones that ended."""
        while keep_going() and not self.drained():
            first = None
            if not self.busy:  # idle: wait for work (the HTTP side may be slow to submit)
                try:
                    first = self.jobs.get(timeout=0.2)
                except queue.Empty:
                    continue
            with self.lock:
                self._take(first)
                if not self.busy:
                    continue
                try:
                    self._step()
                except Exception as e:  # reported to every request in it; serving goes on
                    traceback.print_exc(file=sys.stderr)
                    for rid in list(self.live):
                        self.live.pop(rid).job.emit("error", e)
                    self._abandon()

    def _take(self, first: ServeJob | None) -> None:
        """Move queued jobs into the batch while it has room."""
        room = self.max_batch - len(self.live)
        while room > 0:
            job = first
            first = None
            if job is None:
                try:
                    job = self.jobs.get_nowait()
                except queue.Empty:
                    return
            if job.cancelled.is_set():
                self.cancelled_total += 1
                continue
            if self.abort.is_set():
                job.emit("error", _shutdown_error())
                continue
            self._start(job)
            room -= 1

    def _start(self, job: ServeJob) -> None:
        raise NotImplementedError

    def _step(self) -> None:
        raise NotImplementedError

    def _abandon(self) -> None:
        raise NotImplementedError


class ServeEngine(BaseEngine):
    """Jobs from the HTTP side decoded together: up to `max_batch` requests at once by a
    `BatchedPastaRuntime` (continuous batching over one pool of `max_batch` x the runtime's
    pool size slots); `max_batch=1` decodes one request at a time. `runtime` decodes
    `compare` requests' sequential side and gives the tokenizer and the sampler."""

    parallel_refusal: str | None = None  # why this engine decodes no parallel mode

    def __init__(self, runtime: PastaRuntime, max_queue: int = 32, max_batch: int = 8,
                 forward=None):
        """`forward`: the batched runtime's pass on another engine (llama.cpp)."""
        from solm.decode.pasta.batched import BatchedPastaRuntime

        super().__init__(runtime, max_queue, max_batch)
        self.batched = BatchedPastaRuntime(runtime.model, runtime.tokenizer,
                                           pool_size=runtime.pool_size * max_batch,
                                           max_batch=max_batch, forward=forward)

    @property
    def pool_tokens(self) -> int:
        return self.runtime.pool_size

    def request_config(self, defaults: PastaDecodeConfig, req, cap: int | None, sampling):
        from solm.serve.openai_schema import ApiError

        config = replace(defaults, mode=req.mode or defaults.mode,
                         max_new_tokens=cap or defaults.max_new_tokens, sampling=sampling,
                         penalize=req.penalize or defaults.penalize, record_logits=False)
        refusal = getattr(self, "parallel_refusal", None)
        if config.mode == "parallel" and refusal:
            raise ApiError(400, refusal, param="mode")
        if req.top_k is not None and config.mode != "sequential":
            raise ApiError(400, "logprobs are given for sequential decoding only: add "
                                "\"mode\": \"sequential\" (a parallel decode has no single "
                                "next-token distribution per step)", param="logprobs")
        return config

    def _abandon(self) -> None:
        self.batched.abandon()

    def _start(self, job: ServeJob) -> None:
        from solm.decode.pasta.batched import BatchRequest

        sink: list[TokenLogprob] = []
        chooser = self.runtime.chooser(job.config)
        if job.top_k is not None:
            chooser = recording_chooser(chooser, sink, job.top_k)
        self._ids += 1
        self.live[self._ids] = _Live(job, TextStream(self.runtime.tokenizer), sink)
        self.batched.add(BatchRequest(self._ids, job.prompt_ids, job.config, chooser=chooser))

    def _step(self) -> None:
        for rid, live in self.live.items():
            if live.job.cancelled.is_set() or self.abort.is_set():
                self.batched.cancel(rid)
        ended = self.batched.step()
        rules = self.batched.rules
        for rid, live in self.live.items():
            state = self.batched.state_of(rid)
            if state is None or not live.job.stream:
                continue
            final = final_reading_order(rules, state)
            delta = live.stream.update(final)
            if delta or (live.job.top_k is not None and len(final) > live.sent_logprobs):
                live.job.emit("delta", (delta, live.sink[live.sent_logprobs:len(final)]))
                live.sent_logprobs = len(final)
        from solm.serve.openai_schema import ApiError

        for done in ended:
            live = self.live.pop(done.rid)
            if CANCELLED in done.result.flags and self.abort.is_set():
                live.job.emit("error", _shutdown_error())
                continue
            if CANCELLED in done.result.flags:
                self.cancelled_total += 1
            if CANCELLED in done.result.flags and not done.result.ids:
                live.job.emit("error", ApiError(499, "the request was cancelled"))
            elif done.error:
                live.job.emit("error", ApiError(400, done.error, code="context_length_exceeded"))
            else:
                live.job.emit("done", self._outcome(live, done.result))

    def _outcome(self, live: _Live, res) -> Outcome:
        job, cfg, rt = live.job, live.job.config, self.batched.rules
        row = result_record(rt, Record("serve", ""), res, cfg.mode)
        # log-probs are recorded per sampled token (sequential mode only): index by ids
        content_len = len(res.ids) if cfg.mode == "sequential" else row["content_tokens"]
        sink = live.sink
        if job.stream:
            rest = live.stream.finish(row["response"])
            if rest or (job.top_k is not None and content_len > live.sent_logprobs):
                job.emit("delta", (rest, sink[live.sent_logprobs:content_len]))
        figures = {k: row[k] for k in ("mode", "annotated", "threads", "promises",
                                       "critical_path", "forward_passes", "total_tokens",
                                       "content_tokens", "parallelism", "content_speedup",
                                       "prefill_s", "decode_s", "flags")}
        figures["tokens_per_s"] = round(content_len / max(res.decode_s, 1e-9), 2)
        figures["batch"] = self.max_batch
        if job.compare and cfg.mode == "parallel":
            from solm.decode.compare import compare_report

            seq = self.runtime.generate(job.prompt_ids, replace(cfg, mode="sequential"))
            seq_row = result_record(self.runtime, Record("serve", ""), seq, "sequential")
            report = compare_report(row, seq_row)
            figures["sequential_wall_s"] = seq_row["wall_s"]
            figures["sequential_content_tokens"] = seq_row["content_tokens"]
            figures["compare"] = {k: (round(v, 4) if isinstance(v, float) else v)
                                  for k, v in report.items()}
        cut = {MAX_NEW_TOKENS, POOL_FULL} & set(res.flags)
        return Outcome(text=row["response"], finish_reason="length" if cut else "stop",
                       prompt_tokens=len(job.prompt_ids), completion_tokens=len(res.ids),
                       figures=figures,
                       logprobs=sink[:content_len] if job.top_k is not None else None)

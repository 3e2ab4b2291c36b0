"""The server's decoding engine: one runtime, one decoding thread, a bounded queue.

A PASTA runtime owns one KV pool, so requests decode one at a time in arrival order (a
request's own promised chunks still decode in parallel). The HTTP side submits a `Job` and
reads its events from an asyncio queue: text deltas as they become final in reading order,
then the outcome. Over the queue bound, `submit` refuses at once (the HTTP side answers 429).

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
class Job:
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
    from solm.serve.protocol import ApiError

    return ApiError(503, "the server shut down before this request finished; retry "
                         "elsewhere or later", code="server_shutdown")


class ServeEngine:
    def __init__(self, runtime: PastaRuntime, max_queue: int = 32):
        self.runtime = runtime
        self.jobs: queue.Queue[Job] = queue.Queue(maxsize=max_queue)
        self.lock = threading.Lock()  # one decode at a time, also for direct `run` calls
        self.draining = threading.Event()  # stopping: refuse new jobs, finish queued ones
        self.abort = threading.Event()  # the grace period is over: cancel what remains
        self.busy = False

    def start_in_thread(self) -> threading.Thread:
        """Decode on a daemon thread (tests, embedding in another program)."""
        worker = threading.Thread(target=self.work, name="solm-decode", daemon=True)
        worker.start()
        return worker

    @property
    def tokenizer(self):
        return self.runtime.tokenizer

    def submit(self, job: Job) -> None:
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
        is answered once `shutdown` was called."""
        while keep_going() and not self.drained():
            try:
                job = self.jobs.get(timeout=0.2)
            except queue.Empty:
                continue
            if job.cancelled.is_set():
                continue
            if self.abort.is_set():
                job.emit("error", _shutdown_error())
                continue
            self.busy = True
            try:
                outcome = self.run(job)
                if self.abort.is_set() and CANCELLED in outcome.figures["flags"]:
                    job.emit("error", _shutdown_error())
                else:
                    job.emit("done", outcome)
            except Exception as e:  # reported to that request; the server keeps serving
                traceback.print_exc(file=sys.stderr)
                job.emit("error", e)
            finally:
                self.busy = False

    def run(self, job: Job) -> Outcome:
        """Decode one job, emitting text deltas when it streams."""
        with self.lock:
            return self._run(job)

    def _run(self, job: Job) -> Outcome:
        rt, cfg = self.runtime, job.config
        sink: list[TokenLogprob] = []
        chooser = rt.chooser(cfg)
        if job.top_k is not None:
            chooser = recording_chooser(chooser, sink, job.top_k)
        stream = TextStream(rt.tokenizer)
        state = rt.prefill(job.prompt_ids, cfg, chooser)
        sent_logprobs = 0
        while rt.step(state):
            if job.cancelled.is_set() or self.abort.is_set():
                state.flags.add(CANCELLED)
                break
            if job.stream:
                final = final_reading_order(rt, state)
                delta = stream.update(final)
                if delta or (job.top_k is not None and len(final) > sent_logprobs):
                    job.emit("delta", (delta, sink[sent_logprobs:len(final)]))
                    sent_logprobs = len(final)
        res = rt.finish(state)
        row = result_record(rt, Record("serve", ""), res, cfg.mode)
        # log-probs are recorded per sampled token (sequential mode only): index by ids
        content_len = len(res.ids) if cfg.mode == "sequential" else row["content_tokens"]
        if job.stream:
            rest = stream.finish(row["response"])
            if rest or (job.top_k is not None and content_len > sent_logprobs):
                job.emit("delta", (rest, sink[sent_logprobs:content_len]))
        figures = {k: row[k] for k in ("mode", "annotated", "threads", "promises",
                                       "critical_path", "forward_passes", "total_tokens",
                                       "content_tokens", "parallelism", "content_speedup",
                                       "prefill_s", "decode_s", "flags")}
        figures["tokens_per_s"] = round(content_len / max(res.decode_s, 1e-9), 2)
        if job.compare and cfg.mode == "parallel":
            from solm.eval.compare import compare_report

            seq = rt.generate(job.prompt_ids, replace(cfg, mode="sequential"))
            seq_row = result_record(rt, Record("serve", ""), seq, "sequential")
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

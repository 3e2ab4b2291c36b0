"""LLM annotation at scale: concurrent, rate-limited, retried, validated, resumable.

Every row ends in exactly one of two files: accepted annotations in the output, everything
else in the rejects file with a reason. Both are appended one flushed line per row as soon as
the row is decided, so a killed run loses at most the requests in flight, and a rerun of the
same command skips every id already in either file.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Callable, Iterable

from solm.annotate.prompt import extract_annotation, prompt_version, system_prompt, user_prompt
from solm.annotate.rules import tens_for
from solm.core.jsonl import JsonlWriter
from solm.core.llm.base import ChatClient, LLMError
from solm.core.llm.jobs import (JobLimits, backoff_delay, drain, is_transient, queue_pending,
                                rate_limiter, settled_ids)
from solm.core.llm.spec import cost_usd
from solm.core.pasta_lang import (PastaSyntaxError, Promise, faithful, parse, promises,
                                  serialize)
from solm.core.records import Record
from solm.core.settings import setting


@dataclass(frozen=True)
class AnnotationTask:
    """What an LLM annotation job asks for and how it reads a reply. `check(annotated,
    source)` returns the fields the output row gets (an `annotated` field None when the
    annotator found nothing to mark) or raises `Rejection`."""

    name: str
    system_prompt: str
    version: str
    user_prompt: Callable[[str, str], str]
    check: Callable[[str, str], dict]


def pasta_task(count_tokens: Callable[[str], int], cfg: "LLMAnnotateConfig") -> AnnotationTask:
    def check(annotated: str, source: str) -> dict:
        annotated = check_annotation(annotated, source, count_tokens, cfg)
        n = len(promises(annotated))
        return {"annotated": annotated if n else None, "promises": n}

    return AnnotationTask("pasta", system_prompt(), prompt_version(), user_prompt, check)


@dataclass
class LLMAnnotateConfig(JobLimits):
    fix_lengths: bool = False
    length_tolerance: float = 0.5  # |N - real tens| allowed: max(1, tolerance * real tens)
    max_output_tokens: int = 4096
    temperature: float = 0.0


@dataclass
class LLMAnnotatorSettings:
    """The options of every LLM annotation command (`pasta annotate`, `tip annotate`)."""

    concurrency: int = setting(8, "LLM: requests in flight.", min=1)
    rpm: Optional[float] = setting(None, "LLM: requests per minute (token bucket).", above=0)
    max_tries: int = setting(4, "LLM: tries per row (429/5xx/timeouts/bad replies).", min=1)
    timeout: float = setting(120.0, "LLM: seconds per request.", above=0)
    base_url: Optional[str] = setting(None, "LLM: server URL (overrides the spec's).")
    temperature: float = setting(0.0, "LLM: sampling temperature.", min=0.0)
    max_output_tokens: int = setting(4096, "LLM: cap on each reply's length.", min=1)

    def job_config(self, **more) -> LLMAnnotateConfig:
        return LLMAnnotateConfig(concurrency=self.concurrency, rpm=self.rpm,
                                 max_tries=self.max_tries, temperature=self.temperature,
                                 max_output_tokens=self.max_output_tokens, **more)


@dataclass
class LLMAnnotateSummary:
    rows: int = 0
    skipped_done: int = 0
    retried_rejects: int = 0  # rows a failed service rejected before, tried again
    accepted: int = 0
    unannotated: int = 0  # accepted, but the annotator found nothing to parallelise
    rejected: dict[str, int] = field(default_factory=dict)
    retries: dict[str, int] = field(default_factory=dict)
    retrying: int = 0  # rows waiting to retry right now
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    elapsed_s: float = 0.0

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d.pop("retrying")
        return d


class Rejection(Exception):
    def __init__(self, reason: str, detail: str = "", retryable: bool = True):
        self.reason, self.detail, self.retryable = reason, detail, retryable
        super().__init__(f"{reason}: {detail}")


def check_annotation(annotated: str, source: str, count_tokens: Callable[[str], int],
                     cfg: LLMAnnotateConfig) -> str:
    """Validate (and with fix_lengths, repair) one annotation; raises Rejection."""
    try:
        items = parse(annotated)
    except PastaSyntaxError as e:
        raise Rejection("invalid", str(e)) from None
    if not faithful(annotated, source):
        raise Rejection("unfaithful", "strip(annotation) differs from the response")
    for it in items:
        if isinstance(it, Promise) and it.body is not None:
            real = tens_for(count_tokens(it.body))
            if cfg.fix_lengths:
                it.tens = real
            elif abs(it.tens - real) > max(1, cfg.length_tolerance * real):
                raise Rejection("length_mismatch", f"tokens={it.tens} but the block is ~{real}0 "
                                f"tokens (use --fix-lengths to recompute)")
    return serialize(items)


async def annotate_with_llm(records: Iterable[Record], client: ChatClient, output: Path,
                            rejects: Path, count_tokens: Callable[[str], int],
                            cfg: LLMAnnotateConfig,
                            on_update: Callable[[LLMAnnotateSummary], None] | None = None,
                            seed: int = 0, task: AnnotationTask | None = None
                            ) -> LLMAnnotateSummary:
    """Annotate every record not yet settled in `output` / `rejects`; `task` defaults to
    Pasta-Lang's."""
    task = task or pasta_task(count_tokens, cfg)
    summary = LLMAnnotateSummary()
    started = time.perf_counter()
    seen, summary.retried_rejects = settled_ids(output, rejects)
    version, system = task.version, task.system_prompt
    limiter = rate_limiter(cfg)
    rng = random.Random(seed)
    # duplicate ids in the input are annotated once
    queue, summary.rows, summary.skipped_done = queue_pending(records, seen)
    out, rej = JsonlWriter(output), JsonlWriter(rejects)

    def notify():
        summary.elapsed_s = time.perf_counter() - started
        if on_update:
            on_update(summary)

    def reject(rec: Record, reason: str, detail: str, tries: int):
        summary.rejected[reason] = summary.rejected.get(reason, 0) + 1
        rej.write({"id": rec.id, "reason": reason, "detail": detail[:500], "tries": tries,
                   "transient": is_transient(reason), "annotator": client.spec,
                   "prompt_version": version})
        notify()

    async def handle(rec: Record) -> None:
        if not rec.response:
            reject(rec, "no_response", "record has no response", 0)
            return
        last_reason, last_detail, retry_after = "unknown", "", None
        for attempt in range(cfg.max_tries):
            if attempt:
                summary.retrying += 1
                notify()
                await asyncio.sleep(backoff_delay(attempt - 1, cfg, retry_after, rng))
                summary.retrying -= 1
            retry_after = None
            if limiter:
                await limiter.acquire()
            summary.requests += 1
            try:
                reply = await client.complete(system, task.user_prompt(rec.prompt, rec.response),
                                              max_tokens=cfg.max_output_tokens,
                                              temperature=cfg.temperature)
            except LLMError as e:
                last_reason, last_detail, retry_after = e.kind, str(e), e.retry_after
                summary.retries[e.kind] = summary.retries.get(e.kind, 0) + 1
                if not e.retryable:
                    reject(rec, e.kind, str(e), attempt + 1)
                    return
                continue
            summary.input_tokens += reply.input_tokens or 0
            summary.output_tokens += reply.output_tokens or 0
            try:
                annotated = extract_annotation(reply.text)
                if annotated is None:
                    raise Rejection("unparsable_reply", reply.text[:200])
                fields = task.check(annotated, rec.response)
            except Rejection as e:
                last_reason, last_detail = e.reason, e.detail
                summary.retries[e.reason] = summary.retries.get(e.reason, 0) + 1
                continue
            out.write({"id": rec.id, "prompt": rec.prompt, "system": rec.system,
                       "response": rec.response, **fields, "annotator": client.spec,
                       "prompt_version": version, "tries": attempt + 1})
            summary.accepted += 1
            summary.unannotated += fields.get("annotated") is None
            notify()
            return
        reject(rec, last_reason, last_detail, cfg.max_tries)

    try:
        await drain(queue, handle, cfg.concurrency)
    finally:
        out.close()
        rej.close()
        await client.aclose()
    summary.elapsed_s = time.perf_counter() - started
    summary.cost_usd = cost_usd(client.model, summary.input_tokens, summary.output_tokens)
    return summary

"""Judging pairs of outputs at scale: both orders per pair, cached, concurrent, rate-limited,
retried, resumable (the machinery of `pasta annotate`, from `solm.core.llm.jobs`).

Every pair ends in exactly one of two files: its judgment in the output, or a reject with the
reason. Both are appended one flushed line per pair, so a killed run loses only the pairs in
flight, and the same command run again skips every settled id.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from solm.core.jsonl import JsonlWriter
from solm.core.llm.base import ChatClient, LLMError
from solm.core.llm.jobs import (JobLimits, backoff_delay, drain, is_transient, queue_pending,
                                rate_limiter, settled_ids)
from solm.core.llm.spec import cost_usd
from solm.judge.cache import VerdictCache, verdict_key
from solm.judge.prompt import prompt_version, system_prompt, user_prompt
from solm.judge.verdict import (VerdictError, combine, p_first_from_logprobs,
                                p_first_from_reply, preference, winner)


@dataclass
class Pair:
    """One comparison: output_2 (the model) against output_1 (the baseline), AlpacaEval's
    convention."""
    id: str
    instruction: str
    output_1: str
    output_2: str
    generator_1: str = "baseline"
    generator_2: str = "model"
    index: int | None = None  # the instruction's position in AlpacaEval's set (for LC)


@dataclass
class JudgeConfig(JobLimits):
    mode: str = "auto"  # token | reply | auto (reply for gemini:, token elsewhere)
    # alternatives asked per token in token mode; None: 20 for API backends (OpenAI's most),
    # 100 for a local model, whose whole distribution is at hand (a weak judge seldom puts
    # A or B among its top 5)
    top_logprobs: int | None = None
    # a reply that names no winner is asked again this many times at most (at temperature 0
    # most backends answer the same again), while service failures get `max_tries`
    unreadable_tries: int = 2
    max_output_tokens: int | None = None  # None: 8 in token mode, 64 in reply mode
    temperature: float = 0.0


@dataclass
class JudgeSummary:
    pairs: int = 0
    skipped_done: int = 0
    retried_rejects: int = 0
    judged: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    retries: dict[str, int] = field(default_factory=dict)
    requests: int = 0
    cache_hits: int = 0
    read_from: dict[str, int] = field(default_factory=dict)  # logprobs / reply, per order
    position_bias: float | None = None  # mean P(first shown better) - 0.5 over new verdicts
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    elapsed_s: float = 0.0
    _first_sum: float = 0.0
    _first_n: int = 0

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}


def resolve_mode(mode: str, spec: str) -> str:
    if mode != "auto":
        return mode
    return "reply" if spec.startswith("gemini:") else "token"


def resolve_top_logprobs(top_logprobs: int | None, spec: str) -> int:
    if top_logprobs is not None:
        return top_logprobs
    return 100 if spec.startswith("hf:") else 20


def judge_version(mode: str, top_logprobs: int) -> str:
    """What a verdict depends on besides the judge and the texts: the prompt, and in token
    mode how many alternatives were read (the cache key and every judgment carry it)."""
    version = prompt_version(mode)
    return f"{version}/top{top_logprobs}" if mode == "token" else version


class Judge:
    """Asks one backend for single-order verdicts, through the cache."""

    def __init__(self, client: ChatClient, cfg: JudgeConfig, cache: VerdictCache,
                 summary: JudgeSummary, rng: random.Random):
        self.client, self.cfg, self.cache, self.summary, self.rng = client, cfg, cache, summary, rng
        self.mode = resolve_mode(cfg.mode, client.spec)
        self.top_logprobs = resolve_top_logprobs(cfg.top_logprobs, client.spec)
        self.version = judge_version(self.mode, self.top_logprobs)
        self.system = system_prompt(self.mode)
        self.limiter = rate_limiter(cfg)
        self.in_flight = asyncio.Semaphore(max(1, cfg.concurrency))
        self.max_tokens = cfg.max_output_tokens or (8 if self.mode == "token" else 64)

    async def p_first(self, instruction: str, first: str, second: str,
                      notify: Callable[[], None]) -> float:
        """P(first better), from the cache or the backend; raises VerdictError / LLMError
        once the tries are spent."""
        key = verdict_key(self.client.spec, self.version, instruction, first, second)
        hit = self.cache.get(key)
        if hit is not None:
            self.summary.cache_hits += 1
            return float(hit["p_first"])
        s, last, retry_after, unreadable = self.summary, None, None, 0
        for attempt in range(self.cfg.max_tries):
            if unreadable >= self.cfg.unreadable_tries:
                break
            if attempt:
                await asyncio.sleep(backoff_delay(attempt - 1, self.cfg, retry_after, self.rng))
            retry_after = None
            if self.limiter:
                await self.limiter.acquire()
            s.requests += 1
            try:
                async with self.in_flight:
                    reply = await self.client.complete(
                        self.system, user_prompt(instruction, first, second),
                        max_tokens=self.max_tokens, temperature=self.cfg.temperature,
                        logprobs=self.top_logprobs if self.mode == "token" else 0)
                s.input_tokens += reply.input_tokens or 0
                s.output_tokens += reply.output_tokens or 0
                p = p_first_from_logprobs(reply.top_logprobs) if self.mode == "token" else None
                source = "logprobs" if p is not None else "reply"
                if p is None:
                    p = p_first_from_reply(reply.text, self.mode)
            except LLMError as e:
                last, retry_after = e, e.retry_after
                s.retries[e.kind] = s.retries.get(e.kind, 0) + 1
                notify()
                if not e.retryable:
                    raise
                continue
            except VerdictError as e:
                last, unreadable = e, unreadable + 1
                s.retries[e.reason] = s.retries.get(e.reason, 0) + 1
                notify()
                continue
            s.read_from[source] = s.read_from.get(source, 0) + 1
            s._first_sum += p
            s._first_n += 1
            s.position_bias = round(s._first_sum / s._first_n - 0.5, 4)
            self.cache.put(key, {"p_first": p, "source": source, "reply": reply.text[:80]})
            return p
        raise last


def judgment(pair: Pair, p_1_first: float, p_2_first: float, judge: Judge) -> dict:
    """The pair's record: AlpacaEval's annotation fields plus solm's."""
    p_second = combine(p_2_first, p_1_first)  # P(output_2 better)
    return {"id": pair.id, "instruction": pair.instruction,
            "output_1": pair.output_1, "output_2": pair.output_2,
            "generator_1": pair.generator_1, "generator_2": pair.generator_2,
            "index": pair.index, "preference": round(preference(p_second), 6), "p_2": round(p_second, 6),
            "winner": winner(p_second), "confidence": round(abs(2 * p_second - 1), 6),
            "p_first": {"output_1_first": round(p_1_first, 6),
                        "output_2_first": round(p_2_first, 6)},
            "judge": judge.client.spec, "prompt_version": judge.version}


async def judge_pairs(pairs: Iterable[Pair], client: ChatClient, output: Path, rejects: Path,
                      cfg: JudgeConfig, cache: VerdictCache,
                      on_update: Callable[[JudgeSummary], None] | None = None,
                      seed: int = 0) -> JudgeSummary:
    """Judge every pair not settled yet. The client stays open (the caller's to close: one
    client may serve several jobs)."""
    summary = JudgeSummary()
    started = time.perf_counter()
    seen, summary.retried_rejects = settled_ids(output, rejects)
    judge = Judge(client, cfg, cache, summary, random.Random(seed))
    queue, summary.pairs, summary.skipped_done = queue_pending(pairs, seen)
    out, rej = JsonlWriter(output), JsonlWriter(rejects)

    def notify() -> None:
        summary.elapsed_s = time.perf_counter() - started
        if on_update:
            on_update(summary)

    async def handle(pair: Pair) -> None:
        try:
            p_1_first, p_2_first = await asyncio.gather(
                judge.p_first(pair.instruction, pair.output_1, pair.output_2, notify),
                judge.p_first(pair.instruction, pair.output_2, pair.output_1, notify))
        except (LLMError, VerdictError) as e:
            reason = e.kind if isinstance(e, LLMError) else e.reason
            summary.rejected[reason] = summary.rejected.get(reason, 0) + 1
            rej.write({"id": pair.id, "reason": reason, "detail": str(e)[:500],
                       "transient": is_transient(reason), "judge": client.spec,
                       "prompt_version": judge.version})
            notify()
            return
        out.write(judgment(pair, p_1_first, p_2_first, judge))
        summary.judged += 1
        notify()

    try:
        await drain(queue, handle, cfg.concurrency)
    finally:
        out.close()
        rej.close()
        cache.close()
    summary.elapsed_s = time.perf_counter() - started
    summary.cost_usd = cost_usd(client.model, summary.input_tokens, summary.output_tokens)
    return summary


def run_judge_job(pairs: Iterable[Pair], client: ChatClient, output: Path, rejects: Path,
                  cfg: JudgeConfig, cache: VerdictCache,
                  on_update: Callable[[JudgeSummary], None] | None = None) -> JudgeSummary:
    """`judge_pairs` run to the end from synchronous code; the client is closed after."""
    async def go() -> JudgeSummary:
        try:
            return await judge_pairs(pairs, client, output, rejects, cfg, cache,
                                     on_update=on_update)
        finally:
            await client.aclose()

    return asyncio.run(go())

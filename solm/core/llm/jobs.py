"""What every job of LLM requests shares: limits, a rate limiter, back-off, and which rows a
rerun skips (`pasta annotate`, `pasta judge`)."""

from __future__ import annotations

import asyncio
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path

from solm.core.jsonl import done_ids, is_stdio, read_jsonl


@dataclass
class JobLimits:
    concurrency: int = 8
    rpm: float | None = None  # requests per minute; None = unlimited
    max_tries: int = 4
    base_delay: float = 1.0
    max_delay: float = 60.0


class TokenBucket:
    """At most `rate_per_minute` acquisitions per minute, with bursts up to `burst`."""

    def __init__(self, rate_per_minute: float, burst: float | None = None):
        self.rate = rate_per_minute / 60.0
        self.capacity = burst if burst is not None else max(1.0, self.rate)
        self.tokens = self.capacity
        self.updated = time.monotonic()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        async with self._lock:
            while True:
                now = time.monotonic()
                self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
                self.updated = now
                if self.tokens >= 1 - 1e-9:  # a sleep of exactly the deficit can land a hair short
                    self.tokens = max(0.0, self.tokens - 1)
                    return
                await asyncio.sleep((1 - self.tokens) / self.rate)


def backoff_delay(attempt: int, cfg: JobLimits, retry_after: float | None,
                  rng: random.Random) -> float:
    """Exponential back-off with full jitter; a server's retry hint is a lower bound."""
    delay = rng.uniform(0, min(cfg.max_delay, cfg.base_delay * 2 ** attempt))
    if retry_after is not None:
        delay = max(delay, min(retry_after, cfg.max_delay))
    return delay


def is_transient(reason: str) -> bool:
    """A failure of the service, not of the row (server down, timeouts, 429, 5xx): such a
    reject is retried when the job runs again."""
    return reason in ("timeout", "transport", "http_429") or bool(re.fullmatch(r"http_5\d\d",
                                                                                reason))


def settled_ids(output: Path, rejects: Path) -> tuple[set[str], int]:
    """Ids a rerun skips: every accepted row, and every reject that is not transient; also
    how many transient rejects will be retried."""
    seen = done_ids(output)
    retried = set()
    if not is_stdio(rejects) and Path(rejects).exists():
        for row in read_jsonl(rejects, skip_partial_last_line=True):
            rid = str(row.get("id"))
            if is_transient(str(row.get("reason", ""))):
                retried.add(rid)
            else:
                seen.add(rid)
    return seen, len(retried - seen)


async def drain(queue: asyncio.Queue, handle, workers: int) -> None:
    """Run `await handle(item)` for every item of `queue` with `workers` concurrent workers."""

    async def worker() -> None:
        while True:
            try:
                item = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            await handle(item)

    await asyncio.gather(*(worker() for _ in range(max(1, workers))))


def rate_limiter(cfg: JobLimits) -> TokenBucket | None:
    """The job's token bucket (bursts up to its concurrency), None without `rpm`."""
    if not cfg.rpm:
        return None
    return TokenBucket(cfg.rpm, burst=max(1.0, min(cfg.concurrency, cfg.rpm / 60)))


def queue_pending(items, seen: set[str]) -> tuple[asyncio.Queue, int, int]:
    """A queue of the items whose `id` is not settled yet (a repeated id once); returns the
    queue, how many items there were and how many were skipped as settled."""
    queue: asyncio.Queue = asyncio.Queue()
    total = skipped = 0
    for item in items:
        total += 1
        if item.id in seen:
            skipped += 1
            continue
        seen.add(item.id)
        queue.put_nowait(item)
    return queue, total, skipped

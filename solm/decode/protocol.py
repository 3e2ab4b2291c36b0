"""The one protocol every decode runtime speaks, and the one unit of work a decode job feeds.

A runtime consumes an iterable of requests and yields `Done(rid, result, error)` as each
request ends (finishing order; continuous batching inside, a batch of one included). A
refused request (an empty prompt, one that can never fit the pool) ends with `error` set and
no result; it never stops the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable, Iterable, Iterator, NamedTuple, Protocol

from solm.core.records import Record


class Done(NamedTuple):
    """A request that ended: its id, its result (None when refused) and why it was refused."""

    rid: Hashable
    result: Any
    error: str | None = None


@dataclass(frozen=True)
class Job:
    """One decode of a job file: a prompt record (its ids under the chat template) and the
    sample index (a system decoding K samples per prompt seeds sample k with seed + k)."""

    rid: int
    record: Record
    prompt_ids: tuple[int, ...]
    sample: int = 0


class Runner(Protocol):
    """A system's runtime set up with one decode config, speaking the protocol on jobs."""

    def run(self, jobs: Iterable[Job]) -> Iterator[Done]:
        ...

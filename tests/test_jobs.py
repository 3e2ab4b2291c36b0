"""The LLM job machinery shared by annotate and judge: back-off honours a server's retry hint
as a floor, and a repeated id is queued once."""

import random
from dataclasses import dataclass

from solm.core.llm.jobs import backoff_delay, queue_pending


@dataclass
class Limits:
    base_delay: float = 0.05
    max_delay: float = 8.0


def test_a_retry_after_hint_is_a_floor_capped_by_max_delay():
    rng = random.Random(0)
    for attempt in range(6):
        for _ in range(50):
            d = backoff_delay(attempt, Limits(), 2.0, rng)
            assert 2.0 <= d <= 8.0
            assert backoff_delay(attempt, Limits(), 30.0, rng) == 8.0  # capped, not ignored
            free = backoff_delay(attempt, Limits(), None, rng)
            assert 0 <= free <= min(8.0, 0.05 * 2 ** attempt)


def test_a_hint_below_the_jitter_does_not_shorten_the_wait():
    """With a tiny hint, the delay is the jittered back-off itself (same draws)."""
    a, b = random.Random(7), random.Random(7)
    for attempt in range(5):
        assert backoff_delay(attempt, Limits(), 1e-6, a) == max(
            1e-6, backoff_delay(attempt, Limits(), None, b))


@dataclass
class Item:
    id: str


def test_a_repeated_id_is_queued_once_and_settled_ids_are_skipped():
    items = [Item("a"), Item("b"), Item("a"), Item("c"), Item("done"), Item("b")]
    queue, total, skipped = queue_pending(items, {"done"})
    queued = [queue.get_nowait().id for _ in range(queue.qsize())]
    assert queued == ["a", "b", "c"]
    assert total == 6 and skipped == 3

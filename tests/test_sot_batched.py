"""Skeleton-of-Thought for many questions at once gives each question what it gets alone
(fp32, tiny model): texts, points, token counts, steps, flags and point logits; both stages
run (the skeleton reader is pinned to three points, since a random model's skeleton is
noise), and the pool ends empty."""

import pytest
import torch

from solm.decode.sot import runtime as sot_runtime
from solm.decode.sot.batched import BatchedSotRuntime
from solm.decode.sot.runtime import SotConfig, SotRuntime

QUESTIONS = ["Name three fruits.", "How do I boil an egg?", "Plan a trip to the sea.",
             "Why is the sky blue?", "Give me tips for sleep."]


@pytest.mark.parametrize("points", [["Apples", "Pears", "Plums"], []])
def test_each_question_gets_what_it_gets_alone(tiny, pasta_tokenizer, monkeypatch, points):
    monkeypatch.setattr(sot_runtime, "parse_skeleton", lambda text: list(points))
    cfg = SotConfig(max_skeleton_tokens=10, max_point_tokens=6, stop_at_newline=False,
                    record_logits=True, max_new_tokens=24)
    solo = SotRuntime(tiny, pasta_tokenizer, pool_size=2048)
    batched = BatchedSotRuntime(tiny, pasta_tokenizer, pool_size=4096, max_batch=3)
    got = dict(batched.run(list(enumerate(QUESTIONS)), cfg))
    assert sorted(got) == list(range(len(QUESTIONS)))
    for i, q in enumerate(QUESTIONS):
        alone = solo.generate(q, cfg)
        b = got[i]
        assert (b.text, b.points, b.skeleton, b.skeleton_tokens, b.point_tokens,
                b.forward_passes, b.flags) == (alone.text, alone.points, alone.skeleton,
                                               alone.skeleton_tokens, alone.point_tokens,
                                               alone.forward_passes, alone.flags), i
        for x, y in zip(b.point_logits, alone.point_logits):
            torch.testing.assert_close(x, y, atol=1e-4, rtol=1e-4)
        if points:
            assert b.point_tokens and sum(b.point_tokens) > 0
    assert batched.slots.free_ranges == [(0, 4096)]
    assert batched.steps < sum(solo.generate(q, cfg).forward_passes for q in QUESTIONS)


def test_a_full_pool_makes_questions_wait_not_fail(tiny, pasta_tokenizer, monkeypatch):
    """A pool that holds one question's expansion at a time: the others wait their turn and
    every answer still equals its solo decode."""
    monkeypatch.setattr(sot_runtime, "parse_skeleton", lambda text: ["One", "Two"])
    cfg = SotConfig(max_skeleton_tokens=6, max_point_tokens=5, stop_at_newline=False)
    solo = SotRuntime(tiny, pasta_tokenizer, pool_size=2048)
    probe = BatchedSotRuntime(tiny, pasta_tokenizer, pool_size=4096)
    prefix, own = probe.rules.point_prompts(QUESTIONS[0], ["One", "Two"])
    room = len(prefix) + sum(len(o) for o in own) + 2 * 5 + 40
    batched = BatchedSotRuntime(tiny, pasta_tokenizer, pool_size=room, max_batch=4)
    got = dict(batched.run(list(enumerate(QUESTIONS[:3])), cfg))
    for i, q in enumerate(QUESTIONS[:3]):
        assert got[i].text == solo.generate(q, cfg).text
    assert batched.slots.free_ranges == [(0, room)]

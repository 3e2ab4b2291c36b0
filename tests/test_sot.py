"""Skeleton-of-Thought: reading messy skeletons, the expansion structure's rules, and the
runtime's point logits equal to decoding each point alone after the shared prefix."""

import pytest
import torch

from solm.core.sampling import Sampler, SamplingConfig
from solm.core.systems.sot import structure
from solm.decode.sot.prompts import SKELETON_PRIMER, format_skeleton, parse_skeleton
from solm.decode.sot.runtime import SotConfig, SotRuntime, shared_prefix_length


@pytest.mark.parametrize("text,points", [
    ("1. Apples\n2. Pears\n3. Plums", ["Apples", "Pears", "Plums"]),
    ("1) Check the cable\n2) Restart the router", ["Check the cable", "Restart the router"]),
    ("**1.** Foo\n**2.** Bar\n**3.** foo", ["Foo", "Bar"]),  # markdown; duplicate dropped
    ("Point 1: x y\nPoint 2: z", ["x y", "z"]),
    ("Step 1 - boil water\nStep 2 - add tea", ["boil water", "add tea"]),
    ("- one\n- two\n* three", ["one", "two", "three"]),
    ("1. a thing 2. b thing 3. c thing", ["a thing", "b thing", "c thing"]),  # one line
    ("Sure, here is the skeleton:\n1. Alpha\n2. Beta\n\nI hope this helps!", ["Alpha", "Beta"]),
    ("1.   Spaces   \n\n\n2.\tTabs\r\n3. Done.", ["Spaces", "Tabs", "Done."]),
    ("1. Only one point", ["Only one point"]),
    ("Intro\nMain idea\nConclusion", ["Intro", "Main idea", "Conclusion"]),  # no markers
    ("", []),
    ("\n".join(f"{i}. p{i}" for i in range(1, 15)), [f"p{i}" for i in range(1, 11)]),  # cap
    ("1. " + " ".join(f"w{i}" for i in range(40)), [" ".join(f"w{i}" for i in range(16))]),
])
def test_messy_skeletons_are_read(text, points):
    assert parse_skeleton(text) == points


def test_the_primer_starts_the_first_point():
    assert parse_skeleton(SKELETON_PRIMER + " Apples\n2. Pears") == ["Apples", "Pears"]
    assert format_skeleton(["a", "b"]) == "1. a\n2. b"


def test_structure_rules():
    s = structure([10, 11, 12], [[20, 21], [30, 31, 32]])
    v = s.visible
    # prefix causal
    assert v[2, :3].all() and not v[0, 1]
    # point 1 (rows 3, 4) sees the prefix and itself, not point 2
    assert v[4, :5].all() and not v[4, 5:].any() and not v[3, 4]
    # point 2 (rows 5-7) sees the prefix, not point 1
    assert v[7, :3].all() and not v[7, 3:5].any() and v[7, 5:8].all()
    # the prefix sees no point
    assert not v[:3, 3:].any()
    assert s.position_ids.tolist() == [0, 1, 2, 3, 4, 3, 4, 5]
    assert s.targets.tolist() == [11, 12, -100, 21, -100, 31, 32, -100]


def test_shared_prefix_leaves_each_point_a_token():
    assert shared_prefix_length([[1, 2, 3, 4], [1, 2, 5]]) == 2
    assert shared_prefix_length([[1, 2, 3], [1, 2, 3]]) == 2
    assert shared_prefix_length([[1, 2, 3]]) == 2


def test_point_logits_equal_decoding_each_point_alone(tiny, pasta_tokenizer):
    """The pool shares the prefix; each point must read exactly what a plain forward of
    prefix + its own prompt + its tokens reads (fp32)."""
    rt = SotRuntime(tiny, pasta_tokenizer, pool_size=1024)
    points = ["Boil the water", "Warm the pot", "Steep three minutes"]
    prefix, own = rt.point_prompts("How do I make tea?", points)
    assert len(prefix) > 50 and all(len(o) > 3 for o in own)
    # a random model writes newlines anywhere: let points run their length
    cfg = SotConfig(max_point_tokens=7, record_logits=True, stop_at_newline=False)
    samplers = [Sampler(SamplingConfig()) for _ in points]
    clock = {"prefill": 0.0, "decode": 0.0}
    generated, steps, logits = rt.expand(prefix, own, cfg, samplers, clock, set())
    assert steps == max(len(g) for g in generated) and all(len(g) >= 1 for g in generated)
    for own_i, gen_i, rows in zip(own, generated, logits):
        ids = torch.tensor([prefix + own_i + gen_i])
        with torch.no_grad():
            ref = tiny(ids).logits[0]
        start = len(prefix) + len(own_i) - 1
        expected = ref[start:start + rows.shape[0]]
        assert rows.shape[0] >= len(gen_i)
        torch.testing.assert_close(rows.float(), expected.float(), atol=1e-4, rtol=1e-4)
        # greedy: each generated token is the argmax of the row before it
        assert gen_i == expected[:len(gen_i)].argmax(-1).tolist()


def test_generate_runs_both_stages(tiny, pasta_tokenizer):
    rt = SotRuntime(tiny, pasta_tokenizer, pool_size=2048)
    res = rt.generate("Name three fruits.", SotConfig(max_skeleton_tokens=12,
                                                      max_point_tokens=5))
    assert res.skeleton.startswith(SKELETON_PRIMER) and res.skeleton_tokens <= 12
    # whatever the random model wrote (tests/test_sot_accounting.py scripts each branch)
    assert len(res.point_tokens) == len(res.points)
    assert ("no_skeleton" in res.flags) == (not res.points)
    assert res.critical_path == res.skeleton_tokens + max(res.point_tokens, default=0)
    assert res.wall_s > 0 and res.forward_passes >= res.skeleton_tokens

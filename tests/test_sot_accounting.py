"""Skeleton-of-Thought with scripted samplers (every branch runs whatever a random model
would write): caps, the shared token budget, the skeleton-cap flag, and a record's token
counts against its output text tokenized."""

import pytest

from solm.core.chat import text_ids
from solm.core.sampling import Sampler, SamplingConfig
from solm.decode import sot
from solm.decode.sot import runtime as sot_runtime
from solm.decode.sot.runtime import NO_SKELETON, SKELETON_CAP, SotConfig, SotRuntime, \
    shared_prefix_length
from solm.eval.methods import DecodeSettings, Method, MethodRunner

assert sot  # the package the runtime lives in


class ScriptedSamplers:
    """Stands in for `Sampler`: the k-th sampler built writes scripts[k], then EOS."""

    def __init__(self, scripts: list[list[int]], eos: int):
        self.scripts, self.eos, self.built = scripts, eos, 0

    def __call__(self, *args, **kwargs):
        script = self.scripts[self.built] if self.built < len(self.scripts) else []
        self.built += 1
        eos = self.eos

        return ScriptedSampler(script, eos)


class ScriptedSampler:
    """Writes its script, then EOS: per row (`__call__`) or as a batched draw whose token
    is given (`draw`)."""

    def __init__(self, script: list[int], eos: int):
        self.script, self.eos = script, eos

    def _next(self, history) -> int:
        return self.script[len(history)] if len(history) < len(self.script) else self.eos

    def __call__(self, logits, banned=None, history=()):
        return self._next(history)

    def draw(self, banned=None, history=(), stream=0, index=0, bias=(), given=None):
        return Sampler(SamplingConfig()).draw(given=self._next(history))


def scripted_generate(tiny, tok, monkeypatch, skeleton: str, points: list[str],
                      config: SotConfig):
    eos = tok.eos_token_id
    scripts = [text_ids(tok, skeleton)] + [text_ids(tok, p) for p in points]
    monkeypatch.setattr(sot_runtime, "Sampler", ScriptedSamplers(scripts, eos))
    return SotRuntime(tiny, tok, pool_size=2048).generate("Name three fruits.", config), scripts


def test_points_stop_at_their_cap_not_one_past(tiny, pasta_tokenizer, monkeypatch):
    cfg = SotConfig(max_skeleton_tokens=40, max_point_tokens=4, stop_at_newline=False)
    res, scripts = scripted_generate(tiny, pasta_tokenizer, monkeypatch,
                                     " Apples\n2. Pears\n3. Plums",
                                     [" are red and sweet and crisp", " ok", " are purple"],
                                     cfg)
    assert res.points == ["Apples", "Pears", "Plums"]
    assert res.point_tokens == [min(4, len(s)) for s in scripts[1:]]
    assert "max_new_tokens" in res.flags and NO_SKELETON not in res.flags
    assert res.skeleton_tokens == len(scripts[0]) and SKELETON_CAP not in res.flags
    assert res.generated_tokens == len(scripts[0]) + sum(res.point_tokens)
    assert res.critical_path == len(scripts[0]) + 4
    lines = res.text.split("\n")
    assert lines[1] == "2. Pears ok"  # a point's body follows its skeleton line


def test_a_skeleton_without_points_is_the_answer(tiny, pasta_tokenizer, monkeypatch):
    res, scripts = scripted_generate(tiny, pasta_tokenizer, monkeypatch, "", [],
                                     SotConfig(max_skeleton_tokens=10))
    assert res.points == [] and NO_SKELETON in res.flags
    assert res.text == res.skeleton and res.point_tokens == [] and res.skeleton_tokens == 0


def test_max_new_tokens_caps_the_skeleton_and_flags_it(tiny, pasta_tokenizer, monkeypatch):
    skeleton = " Apples\n2. Pears\n3. Plums and more words that go on"
    res, scripts = scripted_generate(tiny, pasta_tokenizer, monkeypatch, skeleton, ["x"] * 3,
                                     SotConfig(max_skeleton_tokens=160, max_new_tokens=5))
    assert res.skeleton_tokens == 5 and SKELETON_CAP in res.flags
    assert res.generated_tokens <= 5


@pytest.mark.parametrize("budget", [12, 14, 17, 30])
def test_points_share_what_the_skeleton_left(tiny, pasta_tokenizer, monkeypatch, budget):
    cfg = SotConfig(max_skeleton_tokens=40, max_point_tokens=20, max_new_tokens=budget,
                    stop_at_newline=False)
    res, scripts = scripted_generate(tiny, pasta_tokenizer, monkeypatch,
                                     " Apples\n2. Pears\n3. Plums",
                                     [" one two three four five six"] * 3, cfg)
    assert res.generated_tokens <= budget
    left = budget - res.skeleton_tokens
    expected_total = min(left, sum(len(s) for s in scripts[1:]))
    assert sum(res.point_tokens) == expected_total
    assert ("max_new_tokens" in res.flags) == (expected_total < sum(len(s) for s in scripts[1:]))


def test_shared_prefix_split_against_a_brute_force_oracle():
    cases = [[[1, 2, 3], [1, 2, 4]],  # first difference at the last index
             [[1, 2, 3], [1, 2, 3]], [[1, 2, 3, 4], [1, 2, 3]], [[5, 2], [1, 2]],
             [[1], [1]], [[1, 2, 9, 9], [1, 2, 9, 8], [1, 2, 9, 7]], [[7, 7, 7]]]
    for seqs in cases:
        oracle = max(k for k in range(min(map(len, seqs)))
                     if all(s[:k] == seqs[0][:k] for s in seqs))
        assert shared_prefix_length(seqs) == oracle, seqs
        assert all(len(s) - oracle >= 1 for s in seqs)


@pytest.mark.parametrize("kind", ["sequential", "apar", "sot"])
def test_every_methods_counts_match_its_output(tiny, pasta_tokenizer, monkeypatch, kind):
    """The recorded answer length is the output text tokenized, for every method; what was
    decoded stays within --max-new-tokens."""
    cap = 24
    if kind == "sot":
        monkeypatch.setattr(sot_runtime, "Sampler", ScriptedSamplers(
            [text_ids(pasta_tokenizer, s) for s in (" Apples\n2. Pears", " are red fruits",
                                                    " are green and soft")],
            pasta_tokenizer.eos_token_id))
    runner = MethodRunner(Method(kind, kind, "tiny"), tiny, pasta_tokenizer,
                          DecodeSettings(max_new_tokens=cap, sot_skeleton_tokens=16,
                                         sot_point_tokens=8), pool_size=2048)
    row = runner.decode(__import__("solm.core.records", fromlist=["Record"]).Record(
        "r", "Name two fruits."), 0)
    assert row["content_tokens"] == len(text_ids(pasta_tokenizer, row["output"]))
    assert row["generated_tokens"] <= cap
    assert row["critical_path"] <= row["generated_tokens"]
    assert row["forward_passes"] <= row["generated_tokens"]
    if kind == "sot":
        assert row["skeleton_tokens"] + row["point_tokens"] == row["generated_tokens"]
        assert row["points"] == 2 and row["output"].startswith("1. Apples are red fruits")

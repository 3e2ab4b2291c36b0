"""The pairwise judge: reading verdicts, both orders, the cache, and the job against the fake
LLM server through the real SDK clients (faults included)."""

import asyncio
import json
import math

import pytest

from fake_llm_server import FakeLLM
from solm.core.jsonl import read_jsonl
from solm.core.llm import make_client
from solm.judge.cache import VerdictCache
from solm.judge.job import JudgeConfig, Pair, judge_pairs
from solm.judge.prompt import prompt_version, system_prompt, user_prompt
from solm.judge.verdict import (VerdictError, combine, p_first_from_logprobs,
                                p_first_from_reply, winner)

SECRET = "sk-judge-SECRET-987654"


def pairs(n, model_good=True, prefix="p"):
    """Even ids: the model's output is GOOD; odd ids: the baseline's (when model_good)."""
    out = []
    for i in range(n):
        good = "GOOD answer with detail {i}." .format(i=i)
        plain = f"plain answer {i}."
        model_wins = model_good and i % 2 == 0
        out.append(Pair(f"{prefix}{i}", f"instruction {i}", plain if model_wins else good,
                        good if model_wins else plain, "base", "model", i))
    return out


def run(client, items, tmp_path, cache_dir="cache", **cfg):
    out, rej = tmp_path / "judged.jsonl", tmp_path / "judged.rejects.jsonl"
    cache = VerdictCache(tmp_path / cache_dir if cache_dir else None)

    async def judge_all():
        try:
            return await judge_pairs(items, client, out, rej, JudgeConfig(**cfg), cache)
        finally:
            await client.aclose()

    summary = asyncio.run(judge_all())
    return (summary, list(read_jsonl(out)) if out.exists() else [],
            list(read_jsonl(rej)) if rej.exists() else [])


# ---- reading one verdict -------------------------------------------------------------------

def test_logprobs_give_a_soft_verdict_summed_over_spellings():
    top = [{" A": math.log(0.5), "A": math.log(0.1), "B": math.log(0.2), "The": -3.0}]
    assert p_first_from_logprobs(top) == pytest.approx(0.6 / 0.8)
    # the label may come after a backtick or a space token
    assert p_first_from_logprobs([{"`": -0.1}, {"B": math.log(0.9), "A": math.log(0.1)}]) \
        == pytest.approx(0.1)
    assert p_first_from_logprobs([{"A": 0.0}]) == 1.0  # B absent: probability 0
    assert p_first_from_logprobs([{"Sure": -0.1}, {",": -0.2}, {" I": -0.3}]) is None
    assert p_first_from_logprobs(None) is None


@pytest.mark.parametrize("text,mode,expected", [
    ("A", "token", 1.0), (" B\n", "token", 0.0), ("`A`", "token", 1.0),
    ("Response B", "token", 0.0), ("**A** is better", "token", 1.0),
    ('{"better": "A", "confidence": 0.8}', "reply", 0.8),
    ('Here you go:\n```json\n{"better": "B", "confidence": 0.9}\n```', "reply",
     pytest.approx(0.1)),
    ('{"better": "B", "confidence": 75}', "reply", pytest.approx(0.25)),  # a percentage
    ('{"better": "A", "confidence": 0.2}', "reply", 0.5),  # below a coin flip: clamped
    ('{"better": "A"}', "reply", 1.0),
    ("better: B, confidence: 0.7", "reply", pytest.approx(0.3)),  # not JSON, still readable
])
def test_replies_are_read(text, mode, expected):
    assert p_first_from_reply(text, mode) == expected


@pytest.mark.parametrize("text,mode", [("I think both are fine.", "token"), ("", "token"),
                                       ("a nice answer", "token"),
                                       ('{"verdict": "first"}', "reply")])
def test_replies_without_a_winner_are_errors(text, mode):
    with pytest.raises(VerdictError, match="unparsable_reply"):
        p_first_from_reply(text, mode)


def test_both_orders_cancel_a_position_lean():
    # a judge that always says "first" with 0.9 learns nothing: a tie
    assert combine(0.9, 0.9) == pytest.approx(0.5) and winner(0.5) == 0
    # consistent: x better whichever position it is in
    assert combine(0.8, 0.2) == pytest.approx(0.8) and winner(0.8) == 2
    # leaning first by 0.1 on top of a real 0.7 preference for x: the lean cancels
    assert combine(0.8, 0.4) == pytest.approx(0.7)


def test_prompts_are_versioned_package_data_and_filled_in_one_pass():
    assert "one character" in system_prompt("token") and "JSON" in system_prompt("reply")
    assert prompt_version("token") != prompt_version("reply")
    text = user_prompt("Write {second} literally", "first {first}", "second")
    assert "Write {second} literally" in text and "first {first}" in text
    assert text.index("<response A>") < text.index("<response B>")
    with pytest.raises(ValueError):
        system_prompt("nope")


# ---- the job against the fake server --------------------------------------------------------

@pytest.mark.parametrize("backend,mode,read_from", [
    ("openai", "auto", "logprobs"), ("gemini", "auto", "reply"), ("gemini", "token", "logprobs"),
    ("openai", "reply", "reply")])
def test_judge_through_the_fake_server(backend, mode, read_from, tmp_path, monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    items = pairs(12)
    with FakeLLM(None, position_bias=0.1) as server:
        client = make_client(f"{backend}:judge-model@{server.url}")
        summary, out, rej = run(client, items, tmp_path, concurrency=4, mode=mode)
    assert not rej and len(out) == 12 and summary.requests == 24
    assert summary.read_from == {read_from: 24}
    by_id = {r["id"]: r for r in out}
    for i in range(12):
        r = by_id[f"p{i}"]
        assert r["winner"] == (2 if i % 2 == 0 else 1)
        # 0.8 for the GOOD one, the 0.1 lean towards A cancelled by the two orders
        assert r["p_2"] == pytest.approx(0.8 if i % 2 == 0 else 0.2, abs=1e-3)
        assert r["preference"] == pytest.approx(1 + r["p_2"])
        assert r["confidence"] == pytest.approx(0.6, abs=1e-3)
        assert r["judge"] == client.spec and r["prompt_version"].startswith("pairwise-")
        assert {"instruction", "output_1", "output_2", "generator_1", "generator_2"} <= set(r)
    assert summary.position_bias == pytest.approx(0.1, abs=1e-3)  # measured, then cancelled
    assert SECRET not in (tmp_path / "judged.jsonl").read_text()


def test_rerun_and_a_second_evaluation_sharing_comparisons_send_nothing(tmp_path):
    items = pairs(6)
    with FakeLLM(None) as server:
        spec = f"openai:judge-model@{server.url}"
        run(make_client(spec), items, tmp_path)
        assert server.judge_requests == 12
        # same pairs, a fresh output file (a second evaluation): all from the cache
        (tmp_path / "judged.jsonl").unlink()
        summary, out, _ = run(make_client(spec), items, tmp_path)
        assert server.judge_requests == 12 and summary.cache_hits == 12 and len(out) == 6
        # the same command again: every id already judged, not even the cache is asked
        summary, _, _ = run(make_client(spec), items, tmp_path)
        assert summary.skipped_done == 6 and summary.cache_hits == 0
        # roles swapped (the model is now the baseline): the two orders are the cached ones
        swapped = [Pair(p.id, p.instruction, p.output_2, p.output_1) for p in items]
        (tmp_path / "judged.jsonl").unlink()
        summary, out2, _ = run(make_client(spec), swapped, tmp_path)
        assert server.judge_requests == 12 and summary.cache_hits == 12
        flipped = {r["id"]: r["p_2"] for r in out2}
        assert all(flipped[r["id"]] == pytest.approx(1 - r["p_2"]) for r in out)
        # and against the fake judge's own rule (more "GOOD" wins with 0.8), not only each
        # other: a cache that mixed up the two orders would answer 0.5 or the wrong side
        for p in swapped:
            assert flipped[p.id] == pytest.approx(0.8 if "GOOD" in p.output_2 else 0.2,
                                                  abs=1e-3)
        # another judge (or prompt version) misses the cache
        run(make_client(f"openai:other-judge@{server.url}"), items[:1],
            tmp_path / "other")
        assert server.judge_requests == 14


def test_the_cache_key_keeps_the_order_of_the_two_texts(tmp_path):
    """A verdict for (A first, B second) never answers (B first, A second)."""
    from solm.judge.cache import verdict_key

    assert verdict_key("j", "v", "q", "A", "B") != verdict_key("j", "v", "q", "B", "A")
    items = pairs(2)
    with FakeLLM(None) as server:
        spec = f"openai:judge-model@{server.url}"
        cache = VerdictCache(tmp_path / "cache")
        from solm.judge.job import judge_version
        # plant the first order of each pair as a verdict that contradicts the judge
        for p in items:
            cache.put(verdict_key(spec, judge_version("token", 20), p.instruction, p.output_1,
                                  p.output_2), {"p_first": 0.5, "source": "planted"})
        cache.close()
        summary, out, _ = run(make_client(spec), items, tmp_path)
        assert summary.cache_hits == 2 and server.judge_requests == 2  # second orders asked
    for r, p in zip(sorted(out, key=lambda r: r["id"]), items):
        # planted 0.5 for one order, the judge's own verdict (0.8 for GOOD) for the other
        good_second = "GOOD" in p.output_2
        assert r["p_2"] == pytest.approx((0.5 + (0.8 if good_second else 0.2)) / 2, abs=1e-3)


def test_unreadable_replies_are_asked_again_at_most_the_cap(tmp_path):
    """A judge whose replies never name a winner: each order is asked `unreadable_tries`
    times, not `max_tries`, then the pair is rejected as unparsable."""
    with FakeLLM(None, fault_rate=1.0, faults=("garbage",)) as server:
        client = make_client(f"openai:judge-model@{server.url}")
        summary, out, rej = run(client, pairs(3), tmp_path, max_tries=6, base_delay=0.001,
                                unreadable_tries=2)
        asked = server.judge_requests
    assert not out and [r["reason"] for r in rej] == ["unparsable_reply"] * 3
    assert asked == 3 * 2 * 2  # pairs x orders x the cap


def order_outcome(served: list, max_tries: int, unreadable_tries: int) -> str:
    """The retry rule written from the server's side: what one order's asks end in, read
    from what the fake server served it (None: a clean reply). "unfinished": its pair was
    settled by the other order while this one was still retrying."""
    unreadable = 0
    for tries, fault in enumerate(served, start=1):
        outcome = None
        if fault is None:
            outcome = "judged"
        elif fault == "garbage":
            unreadable += 1
            outcome = "rejected" if unreadable == unreadable_tries else None
        if outcome is None and tries == max_tries:
            outcome = "rejected"
        if outcome:
            assert tries == len(served), f"asked again after {outcome}: {served}"
            return outcome
    return "unfinished"


def test_faults_are_retried_and_every_pair_ends_in_one_file(tmp_path, monkeypatch):
    """Faults are drawn per request text (seed 10 gives 30 pairs every kind of fault and one
    order two unreadable replies), so what each pair ends in is decided by the retry rule,
    not by how the client's requests interleave; the slow fault outlasts the client's timeout,
    which leaves a busy 2-core machine ample time for an ordinary reply."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    items = pairs(30)
    with FakeLLM(None, fault_rate=0.3, seed=10, slow_s=16.0,
                 faults=("429", "500", "slow", "truncated", "garbage")) as server:
        client = make_client(f"openai:judge-model@{server.url}", timeout=8.0)
        summary, out, rej = run(client, items, tmp_path, concurrency=8, max_tries=6,
                                base_delay=0.02, max_delay=0.3, unreadable_tries=2)
    assert set(server.fault_counts) == {"429", "500", "slow", "truncated", "garbage"}
    outcomes = {p.id: {order_outcome(server.served.get(user_prompt(p.instruction, a, b), []),
                                     6, 2)
                       for a, b in ((p.output_1, p.output_2), (p.output_2, p.output_1))}
                for p in items}
    judged = sorted(i for i, o in outcomes.items() if o == {"judged"})
    rejected = sorted(i for i, o in outcomes.items() if "rejected" in o)
    assert sorted(r["id"] for r in out) == judged and sorted(r["id"] for r in rej) == rejected
    assert len(judged) + len(rejected) == len(items) and rejected  # each pair in one file
    assert {r["reason"] for r in rej} == {"unparsable_reply"}
    assert 1 <= summary.retries["timeout"] <= server.fault_counts["slow"]
    assert all(r["winner"] == (2 if int(r["id"][1:]) % 2 == 0 else 1) for r in out)


def test_a_judge_that_never_answers_is_rejected_with_the_reason(tmp_path):
    with FakeLLM(None, fault_rate=1.0, faults=("garbage",)) as server:
        client = make_client(f"openai:judge-model@{server.url}")
        summary, out, rej = run(client, pairs(2), tmp_path, max_tries=2, base_delay=0.01)
    assert not out and [r["reason"] for r in rej] == ["unparsable_reply"] * 2
    assert not any(r["transient"] for r in rej)


def test_hf_judge_reads_its_own_logprobs(tmp_path, pasta_tokenizer):
    """A tiny random local model: its verdicts are noise, but they must come from the
    log-probabilities over A and B whenever those are among its top tokens, and each pair must
    end in a file."""
    from solm.core.models import tiny_model
    model, tok = tiny_model(pasta_tokenizer)
    model.save_pretrained(tmp_path / "tiny")
    tok.save_pretrained(tmp_path / "tiny")
    client = make_client(f"hf:{tmp_path / 'tiny'}", batch_size=4)
    summary, out, rej = run(client, pairs(2), tmp_path, concurrency=4, max_tries=1,
                            top_logprobs=len(tok))
    assert len(out) + len(rej) == 2
    assert summary.read_from.get("logprobs", 0) == 2 * len(out)  # the whole vocabulary: found
    for r in out:
        assert 0.0 < r["p_2"] < 1.0


# ---- the command ---------------------------------------------------------------------------

def test_pasta_judge_pairs_files_by_instruction_and_resumes(tmp_path):
    from typer.testing import CliRunner

    from solm.cli.pasta import app

    instructions = [f"question {i}" for i in range(4)]
    # AlpacaEval style (a JSON list, no ids): paired by instruction
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps([{"instruction": q, "output": f"plain {i}",
                                     "generator": "base"} for i, q in enumerate(instructions)]))
    model = tmp_path / "model.jsonl"
    model.write_text("\n".join(json.dumps({"prompt": q, "response": f"GOOD {i}"})
                               for i, q in enumerate(reversed(instructions))) + "\n")
    out = tmp_path / "judged.jsonl"
    runner = CliRunner()
    with FakeLLM(None) as server:
        args = ["judge", "-b", str(baseline), "-m", str(model), "-o", str(out),
                "--judge", f"openai:judge@{server.url}", "--cache-dir", str(tmp_path / "c"),
                "-q"]
        first = runner.invoke(app, args)
        assert first.exit_code == 0, first.output
        assert server.judge_requests == 8
        second = runner.invoke(app, args)
        assert second.exit_code == 0 and server.judge_requests == 8
    rows = list(read_jsonl(out))
    assert len(rows) == 4 and all(r["winner"] == 2 and r["generator_2"] == "model" for r in rows)
    assert {r["instruction"] for r in rows} == set(instructions)
    assert json.loads(second.output[second.output.index("{"):])["skipped_done"] == 4
    manifest = json.loads((tmp_path / "judged.jsonl.manifest.json").read_text())
    assert manifest["command"] == "pasta judge" and manifest["summary"]["skipped_done"] == 4
    assert set(manifest["inputs"]) == {str(baseline), str(model)}
    # a row without an output is named by file and row
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "q"}) + "\n")
    res = runner.invoke(app, ["judge", "-b", str(baseline), "-m", str(bad), "-o",
                              str(tmp_path / "x.jsonl"), "--judge", "openai:j@http://127.0.0.1:9"])
    assert res.exit_code != 0 and "bad.jsonl:1" in res.output and "output" in res.output

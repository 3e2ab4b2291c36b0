"""`pasta prefs`: the pair choice against a brute-force reading of its rule, and the command
end to end on a tiny model with the fake judge (pairs, resumption without judging twice)."""

import json
import math
import os
import random
import subprocess
import sys

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fake_llm_server import FakeLLM
from solm.prefs.score import (ALL_TOO_SHORT, NO_WELL_FORMED, ONE_DISTINCT, TIED, Scored,
                              choose_pair, distinct, parse_quality_weight)


def brute_force(samples, weight):
    """The rule written plainly: chosen = the well-formed, long-enough sample with the highest
    score (at inf: quality, then speedup), the earliest on ties; rejected = the lowest-ranked
    sample, malformed or too short ones below every other, the latest on ties."""
    def value(s):
        if math.isinf(weight):
            return (s.quality, s.speedup)
        return (s.speedup + (weight * s.quality if weight else 0.0),)

    good = [s for s in samples if s.well_formed and not s.too_short]
    best = max(value(s) for s in good)
    chosen = min((s for s in good if value(s) == best), key=lambda s: s.sample)
    bad = [s for s in samples if not (s.well_formed and not s.too_short)]
    pool = bad if bad else good
    worst = min(value(s) for s in pool)
    rejected = max((s for s in pool if value(s) == worst), key=lambda s: s.sample)
    if not bad and best == worst:
        return None  # every eligible sample scores the same: a pair would prefer nothing
    return chosen.sample, rejected.sample


@pytest.mark.parametrize("weight", [0.0, 1.0, 4.0, math.inf])
def test_the_pair_is_the_best_well_formed_against_the_worst(weight):
    rng = random.Random(int(weight) if not math.isinf(weight) else 99)
    for _ in range(500):
        n = rng.randint(2, 6)
        samples = [Scored(k, rng.random() < 0.7, rng.choice([0.5, 1.0, 1.5, 2.0]),
                          rng.choice([0.0, 0.25, 0.5, 1.0]), too_short=rng.random() < 0.2)
                   for k in range(n)]
        if not any(s.well_formed for s in samples):
            assert choose_pair(samples, weight).skipped == NO_WELL_FORMED
            continue
        if not any(s.well_formed and not s.too_short for s in samples):
            assert choose_pair(samples, weight).skipped == ALL_TOO_SHORT
            continue
        choice = choose_pair(samples, weight)
        expected = brute_force(samples, weight)
        if expected is None:
            assert choice.skipped == TIED and choice.chosen is None
            continue
        assert choice.chosen.well_formed
        assert (choice.chosen.sample, choice.rejected.sample) == expected


def test_a_malformed_sample_is_never_chosen_however_good():
    samples = [Scored(0, False, 10.0, 1.0), Scored(1, True, 1.0, 0.1),
               Scored(2, True, 1.2, 0.0)]
    for weight in (0.0, 1.0, math.inf):
        choice = choose_pair(samples, weight)
        assert choice.chosen.sample in (1, 2) and choice.rejected.sample == 0


def test_a_sample_too_short_is_never_chosen_however_fast():
    samples = [Scored(0, True, 9.0, 1.0, too_short=True), Scored(1, True, 1.0, 0.1),
               Scored(2, True, 1.2, 0.0)]
    for weight in (0.0, 1.0, math.inf):
        choice = choose_pair(samples, weight)
        assert choice.chosen.sample in (1, 2) and choice.rejected.sample == 0


def test_prompts_without_a_pair_say_why():
    assert choose_pair([Scored(0, True, 1, 1)], 1.0).skipped == ONE_DISTINCT
    assert choose_pair([Scored(0, False, 1, 1), Scored(1, False, 2, 1)], 1.0).skipped == \
        NO_WELL_FORMED


def test_identical_samples_count_once():
    assert distinct([[1, 2], [3], [1, 2], [1, 2], [4]]) == [(0, 3), (1, 1), (4, 1)]


@pytest.mark.parametrize("text,ok", [("0", 0.0), ("2.5", 2.5), ("inf", math.inf),
                                     ("-1", None), ("nan", None), ("fast", None)])
def test_the_quality_weight(text, ok):
    if ok is None:
        with pytest.raises(ValueError):
            parse_quality_weight(text)
    else:
        assert parse_quality_weight(text) == ok


def _pasta(*args, env_extra=None):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "solm.cli.main", "pasta", *args],
                          capture_output=True, text=True, env=env, timeout=600)


def _rows(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_prefs_end_to_end_resumes_without_judging_twice(tmp_path, tiny_folder):
    prompts = tmp_path / "dolly.jsonl"
    prompts.write_text("\n".join(json.dumps({"id": f"q{i}", "prompt": q, "response": r})
                                 for i, (q, r) in enumerate([
                                     ("Name three fruits.", "Apples, pears and GOOD plums."),
                                     ("How do I boil an egg?", "GOOD: boil it for 8 minutes."),
                                     ("Write a haiku about rain.", "Rain falls GOOD and soft.")
                                 ])) + "\n")
    out = tmp_path / "prefs"
    with FakeLLM(None) as server:
        args = ["prefs", "-p", str(prompts), "-o", str(out), "-m", tiny_folder,
                "--baseline-model", tiny_folder, "-n", "3", "--max-new-tokens", "10",
                "--quality-weight", "2", "--judge", f"openai:judge@{server.url}",
                "--dtype", "fp32", "--batch-size", "4", "-q"]
        env = {"SOLM_CACHE": str(tmp_path / "cache1")}
        first = _pasta(*args, "--cache-dir", str(tmp_path / "cache1"), env_extra=env)
        assert first.returncode == 0, first.stderr[-3000:]
        asked = server.judge_requests
        judged = _rows(out / "judgments.jsonl")
        samples = _rows(out / "samples.jsonl")
        assert len(samples) == 9
        distinct_total = sum(len(distinct([s["ids"] for s in samples if s["id"] == q]))
                             for q in ("q0", "q1", "q2"))
        # each distinct sample against two references, both orders, asked once
        assert len(judged) == distinct_total * 2 and asked == 2 * len(judged)
        # a kill: the last two judgments and the last sample lost; a fresh verdict cache,
        # so only the lost judgments can be asked again
        (out / "judgments.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in judged[:-2]))
        (out / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in samples[:-1]))
        again = _pasta(*args, "--cache-dir", str(tmp_path / "cache2"), env_extra=env)
        assert again.returncode == 0, again.stderr[-3000:]
        assert server.judge_requests == asked + 2 * 2
    resumed = _rows(out / "samples.jsonl")
    assert sorted((r["id"], r["sample"]) for r in resumed) == \
        sorted((r["id"], r["sample"]) for r in samples)
    lost = samples[-1]
    redone = next(r for r in resumed if (r["id"], r["sample"]) == (lost["id"], lost["sample"]))
    assert redone["ids"] == lost["ids"]  # seeded: the same sample again
    pairs = _rows(out / "pairs.jsonl")
    scored = _rows(out / "scored.jsonl")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pairs"] == len(pairs)
    assert summary["pairs"] + sum(summary["skipped"].values()) == 3
    for p in pairs:
        mine = [s for s in scored if s["id"] == p["id"]]
        assert p["n"] == len({s["copy_of"] for s in mine})
        assert p["chosen"]["score"] == max(s["score"] for s in mine if s["well_formed"])
        assert p["rejected"]["score"] == min(s["score"] for s in mine)
        # scores are speedup + 2 x quality, the quality a soft win rate
        for s in mine:
            assert 0.0 <= s["quality"] <= 1.0
            assert s["score"] == pytest.approx(s["theoretical_speedup"] + 2 * s["quality"],
                                               abs=2e-4)


def test_a_baseline_file_missing_a_prompt_is_refused(tmp_path, tiny_folder):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "a", "prompt": "Hi"}) + "\n"
                       + json.dumps({"id": "b", "prompt": "Yo"}) + "\n")
    base = tmp_path / "base.jsonl"
    base.write_text(json.dumps({"id": "a", "prompt": "Hi", "response": "Hello."}) + "\n")
    r = _pasta("prefs", "-p", str(prompts), "-o", str(tmp_path / "o"), "-m", tiny_folder,
               "--baseline", str(base), "--quality-weight", "0", "-n", "2", "--dtype", "fp32",
               "-q")
    assert r.returncode != 0 and "no Baseline-SFT answer" in r.stderr and "'b'" in r.stderr


def test_the_length_guard_compares_text_lengths_with_the_baseline_answer():
    from solm.core.records import Record
    from solm.prefs.job import score_prompt

    def sample(ids, content, cp):
        return {"ids": ids, "content_tokens": content, "critical_path": cp,
                "forward_passes": cp, "total_tokens": len(ids), "flags": [], "annotated": "x"}
    samples = [sample([1], 79, 10), sample([2], 80, 40), sample([3], 20, 5)]
    scored, rows = score_prompt(Record("a", "q"), samples, baseline_tokens=100,
                                judgments=None, references=[], quality_weight=0.0,
                                vocab_well_formed=lambda s: True, min_length_ratio=0.8)
    assert [x.too_short for x in scored] == [True, False, True]
    assert [r["too_short"] for r in rows] == [True, False, True]
    choice = choose_pair(scored, 0.0)
    assert choice.chosen.sample == 1  # the slowest, but the only one long enough


def test_own_speed_is_the_samples_text_over_its_critical_path():
    from solm.core.records import Record
    from solm.prefs.job import score_prompt

    samples = [{"ids": [1], "content_tokens": 90, "critical_path": 30, "forward_passes": 30,
                "total_tokens": 100, "flags": [], "annotated": "x"},
               {"ids": [2], "content_tokens": 10, "critical_path": 10, "forward_passes": 10,
                "total_tokens": 10, "flags": [], "annotated": "x"}]
    common = dict(judgments=None, references=[], quality_weight=0.0,
                  vocab_well_formed=lambda s: True)
    by_baseline, _ = score_prompt(Record("a", "q"), samples, 100, **common)
    own, _ = score_prompt(Record("a", "q"), samples, 100, speed="own", **common)
    assert [x.speedup for x in by_baseline] == [100 / 30, 100 / 10]  # the short one "wins"
    assert [x.speedup for x in own] == [3.0, 1.0]  # only the parallel one is faster
    assert choose_pair(own, 0.0).chosen.sample == 0
    assert choose_pair(by_baseline, 0.0).chosen.sample == 1


def test_tied_samples_make_no_pair():
    """Chosen and rejected both scored 0.88 and BoNBoN trained on the pair."""
    tied = [Scored(0, True, 0.88, None), Scored(1, True, 0.88, None)]
    assert choose_pair(tied, 0.0).skipped == TIED
    # the same score, but one is malformed: a real preference, kept
    assert choose_pair([Scored(0, True, 0.88, None), Scored(1, False, 0.88, None)],
                       0.0).rejected.sample == 1


def test_prefs_reruns_keep_earlier_pairs_and_refuse_other_settings(tmp_path, tiny_folder):
    """A smaller --limit rewrote pairs.jsonl smaller; another model's rerun reused
    the samples and relabelled them; a changed λ was accepted silently. Also: a baseline
    file of `id` + `response` rows (as --help says) is read, and the pairs name their
    sampler (what `pasta bonbon` takes as its reference)."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"q{i}", "prompt": q}) + "\n" for i, q in
                               enumerate(["Name three fruits.", "Boil an egg.", "Rain?"])))
    base = tmp_path / "base.jsonl"
    base.write_text("".join(json.dumps({"id": f"q{i}", "response": "A plain answer."}) + "\n"
                            for i in range(3)))
    out = tmp_path / "prefs"

    def command(**changed):
        options = {"--max-new-tokens": "8", "--quality-weight": "0", "--seed": "0",
                   **{k.replace("_", "-"): v for k, v in changed.items()}}
        return ["prefs", "-p", str(prompts), "-o", str(out), "-m", tiny_folder, "--baseline",
                str(base), "-n", "3", "--temperature", "1.5", "--dtype", "fp32",
                "--batch-size", "4", "-q", *[x for kv in options.items() for x in kv]]

    from typer.testing import CliRunner

    from solm.cli import pasta as pasta_app

    class Ran:
        def __init__(self, result):
            self.returncode, self.stderr = result.exit_code, result.output

    def _pasta(*argv):  # in-process: the refused reruns never load a model
        return Ran(CliRunner().invoke(pasta_app.app, list(argv)))

    args = command()
    first = _pasta(*args, "--limit", "2")
    assert first.returncode == 0, first.stderr[-3000:]
    manifest = json.loads((out / "solm_manifest.json").read_text())
    assert manifest["row_settings"]["model"] == tiny_folder
    pairs_before = (out / "pairs.jsonl").read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["prompts"] == 2
    assert all(p["model"] == tiny_folder for p in _rows(out / "pairs.jsonl"))
    # sample k of a prompt is seeded seed + k: at temperature 1.5 the three differ
    drawn = _rows(out / "samples.jsonl")
    for q in ("q0", "q1"):
        assert len({tuple(s["ids"]) for s in drawn if s["id"] == q}) > 1
    smaller = _pasta(*args, "--limit", "1")
    assert smaller.returncode == 0, smaller.stderr[-3000:]
    assert (out / "pairs.jsonl").read_text() == pairs_before
    assert json.loads((out / "summary.json").read_text())["prompts"] == 2
    for change in ({"--quality_weight": "1"}, {"--seed": "1"}, {"--max_new_tokens": "9"}):
        refused = _pasta(*command(**change), "--limit", "2")
        assert refused.returncode == 1 and "holds results made with" in refused.stderr
        assert "--restart" in refused.stderr
        assert (out / "pairs.jsonl").read_text() == pairs_before
    again = _pasta(*command(**{"--seed": "1"}), "--limit", "1", "--restart")
    assert again.returncode == 0, again.stderr[-3000:]
    aside = [d for d in out.iterdir() if d.name.startswith("previous-")]
    assert len(aside) == 1 and (aside[0] / "pairs.jsonl").read_text() == pairs_before
    assert json.loads((out / "summary.json").read_text())["prompts"] == 1


def test_a_rerun_with_other_weights_rescores_the_samples_it_has(tmp_path, tiny_folder):
    """λ, μ and ν are the knobs a user turns between BoNBoN rounds: a rerun with other weights
    decodes nothing (the samples stay byte for byte) and its pairs equal those of a fresh
    folder sampled and scored with those weights from the start."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"q{i}", "prompt": q}) + "\n" for i, q in
                               enumerate(["Name three fruits.", "Boil an egg.", "Rain?"])))
    base = tmp_path / "base.jsonl"
    base.write_text("".join(json.dumps({"id": f"q{i}", "response": "A plain answer of a few "
                                                                    "words."}) + "\n"
                            for i in range(3)))

    def command(out, *weights):
        return ["prefs", "-p", str(prompts), "-o", str(out), "-m", tiny_folder, "--baseline",
                str(base), "-n", "3", "--temperature", "1.5", "--dtype", "fp32",
                "--batch-size", "4", "--max-new-tokens", "12", "--seed", "0", "-q",
                "--score", "content", *weights]

    from typer.testing import CliRunner

    from solm.cli import pasta as pasta_app

    def run(*argv):
        result = CliRunner().invoke(pasta_app.app, list(argv))
        assert result.exit_code == 0, result.output[-3000:]

    folder = tmp_path / "reused"
    run(*command(folder, "--quality-weight", "0", "--repeat-weight", "0"))
    samples_before = (folder / "samples.jsonl").read_bytes()
    scores_before = [r["score"] for r in _rows(folder / "scored.jsonl")]
    heavy = ("--quality-weight", "5", "--repeat-weight", "3", "--guard-weight", "2",
             "--min-length-ratio", "0.5")
    run(*command(folder, *heavy))
    assert (folder / "samples.jsonl").read_bytes() == samples_before
    assert json.loads((folder / "summary.json").read_text())["samples_decoded_now"] == 0
    fresh = tmp_path / "fresh"
    run(*command(fresh, *heavy))
    for name in ("scored.jsonl", "pairs.jsonl"):
        assert _rows(folder / name) == _rows(fresh / name), name
    assert [r["score"] for r in _rows(folder / "scored.jsonl")] != scores_before


def test_a_sample_every_judgment_of_which_was_rejected_is_a_tie():
    """The planted bug (an unjudged sample's quality read as 0) passed the tests: a
    sample with no surviving judgment carries no information, so it scores as a tie (0.5),
    while a judged one scores its mean win rate."""
    from solm.core.records import Record
    from solm.prefs.job import comparison_id, score_prompt

    def sample(ids):
        return {"ids": ids, "content_tokens": len(ids), "critical_path": len(ids),
                "forward_passes": len(ids), "total_tokens": len(ids), "flags": []}

    rec = Record("q", "Prompt?")
    samples = [sample([1, 2, 3]), sample([4, 5])]
    judged = {comparison_id("q", 0, "baseline"): {"p_2": 0.9},
              comparison_id("q", 0, "dataset"): {"p_2": 0.7}}  # sample 1: none survived
    scored, rows = score_prompt(rec, samples, 3, judged, ["baseline", "dataset"], 1.0,
                                lambda s: True)
    by_sample = {x.sample: x for x in scored}
    assert by_sample[0].quality == pytest.approx(0.8)
    assert by_sample[1].quality == 0.5 and by_sample[1].extra["unjudged"]
    assert rows[1]["score"] == pytest.approx(3 / 2 + 0.5)


def test_the_well_formed_rate_counts_every_sample_copies_included(tmp_path):
    """summary.well_formed_rate is over the N samples drawn (a copy is a sample the model
    wrote again), not over the distinct ones: two copies of a malformed answer and one
    well-formed answer give 1/3 (1/2 over distinct samples)."""
    from solm.core.records import Record
    from solm.prefs.job import PrefsConfig, PrefsSummary, write_results

    def sample(ids, ok):
        return {"ids": ids, "content_tokens": len(ids), "critical_path": len(ids),
                "forward_passes": len(ids), "total_tokens": len(ids), "flags": [],
                "annotated": "x", "response": "x", "forced": [], "ended": True, "ok": ok}

    rec = Record("q", "Prompt?")
    samples = {"q": [sample([1, 2], False), sample([1, 2], False), sample([3, 4, 5], True)]}
    summary = PrefsSummary()
    write_results(tmp_path, [rec], samples, {"q": {"tokens": 3}}, None, {"q": {}},
                  PrefsConfig(samples=3, quality_weight=0.0), lambda s: s["ok"], summary)
    assert summary.well_formed_rate == round(1 / 3, 4)
    assert summary.distinct_mean == 2.0


def test_each_scored_row_reports_both_speedups_by_their_own_counts():
    """theoretical = baseline tokens / critical path; realized per step = baseline tokens /
    forward passes (hand-worked: 12 / 4 and 12 / 6)."""
    from solm.core.records import Record
    from solm.prefs.job import score_prompt

    s = {"ids": [1, 2, 3], "content_tokens": 10, "critical_path": 4, "forward_passes": 6,
         "total_tokens": 12, "flags": []}
    _, rows = score_prompt(Record("q", "P?"), [s], 12, None, [], 0.0, lambda x: True)
    assert rows[0]["theoretical_speedup"] == 3.0 and rows[0]["realized_step_speedup"] == 2.0


# ---- `--score content`: passes saved + λ min(1, content / baseline) - μ repeats --------------

def _word_trigram_repeats(text: str) -> float:
    """Repeated word 3-grams, counted a second way: occurrences beyond the first, over all."""
    from collections import Counter

    words = text.split()
    grams = list(zip(words, words[1:], words[2:]))
    return (len(grams) - len(Counter(grams))) / len(grams) if grams else 0.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 60), st.integers(1, 60), st.booleans(),
                          st.integers(0, 3), st.integers(0, 4), st.integers(0, 4)),
                min_size=2, max_size=6),
       st.integers(1, 60), st.sampled_from([0.0, 0.5, 2.0]), st.sampled_from([0.0, 1.0, 5.0]),
       st.sampled_from([0.0, 1.0, 3.0]))
# a well-formed and an ill-formed sample that score the same: still a pair (well-formedness
# ranks first), which the tie rule once mistook for a tie by comparing the pools' lengths
@example(draws=[(1, 1, False, 0, 0, 0), (1, 1, True, 0, 0, 0)], baseline=1, lam=0.0, mu=0.0,
         nu=0.0)
def test_the_content_score_picks_what_a_brute_force_ranking_picks(draws, baseline, lam, mu,
                                                                  nu):
    from solm.core.records import Record
    from solm.prefs.job import score_prompt
    from solm.prefs.score import choose_pair

    texts = ["a b c d e f", "a b c a b c a b c", "one two three one two three", "x y"]
    samples = [{"ids": [k, content, path, text, promises, guarded],
                "content_tokens": content, "critical_path": path, "well": well,
                "response": texts[text], "forward_passes": path, "total_tokens": content,
                "flags": [], "promises": promises, "guarded_blocks": min(guarded, promises)}
               for k, (content, path, well, text, promises, guarded) in enumerate(draws)]
    scored, _ = score_prompt(Record("p", "P"), samples, baseline, None, [], lam,
                             lambda s: s["well"], score="content", repeat_weight=mu,
                             guard_weight=nu)
    choice = choose_pair(scored, lam)

    def by_hand(s):
        guarded = s["guarded_blocks"] / s["promises"] if s["promises"] else 0.0
        return (1 - s["critical_path"] / s["content_tokens"]
                + lam * min(1.0, s["content_tokens"] / baseline)
                - mu * _word_trigram_repeats(s["response"]) - nu * guarded)

    values = [by_hand(s) for s in samples]
    well = [k for k, s in enumerate(samples) if s["well"]]
    if not well:
        assert choice.chosen is None
        return
    best = max(values[k] for k in well)
    worst_pool = [k for k, s in enumerate(samples) if not s["well"]] or well
    worst = min(values[k] for k in worst_pool)
    if len(samples) < 2 or (worst_pool is well and abs(best - worst) < 1e-12):
        assert choice.chosen is None
        return
    assert choice.chosen is not None and samples[choice.chosen.sample]["well"]
    assert abs(values[choice.chosen.sample] - best) < 1e-9
    assert choice.chosen.sample == min(k for k in well if abs(values[k] - best) < 1e-9)
    assert abs(values[choice.rejected.sample] - worst) < 1e-9
    assert choice.rejected.sample in worst_pool

"""tip eval run / report: every policy x budget point decoded, resumable per problem x sample x
policy, accuracy as the mean per-problem fraction, the report with its plots and the
registers-in-use figures."""

import json

import pytest

from typer.testing import CliRunner

from solm.core.systems.tip import steps_and_kills
from solm.eval.tip_eval import Point, eval_points, summarise


def test_points_expand_budgets_for_budgeted_policies_only():
    pts = eval_points(["dense", "streamingllm", "h2o", "tip"], [128, 256])
    assert [p.label for p in pts] == ["dense", "streamingllm@128", "streamingllm@256",
                                      "h2o@128", "h2o@256", "tip"]


def test_steps_and_kills(tip_tok):
    from conftest import TIP_REGISTERS
    from solm.core.systems.tip import TipVocab

    vocab = TipVocab.from_tokenizer(tip_tok, TIP_REGISTERS)
    r = sorted(vocab.registers)
    ids = [5, r[0], 6, r[1], 7, r[0], 8, r[0], 9, r[2]]
    assert steps_and_kills(ids, vocab) == (5, 2)
    assert steps_and_kills(ids, None) == (0, 0)


def row(pid, sample, correct, policy="tip", budget=None, live=50.0, generated=300):
    return {"data": "m", "id": pid, "policy": policy, "budget": budget, "sample": sample,
            "correct": correct, "generated": generated, "mean_live_tokens": live + 20,
            "live_response_tokens": live, "decode_s": 1.0, "registers_opened": 4,
            "steps_killed": 1, "flags": []}


def test_accuracy_is_the_mean_of_per_problem_fractions():
    rows = [row("a", 0, True), row("a", 1, False), row("a", 2, False), row("a", 3, False),
            row("b", 0, True)]
    (s,) = summarise(rows, [{"data": "m", "policy": "tip", "budget": None, "tokens": 1500,
                             "wall_s": 3.0}])
    assert s["accuracy"] == (0.25 + 1.0) / 2  # pooled would be 2/5
    assert s["throughput_tok_s"] == 500.0 and s["share_steps_killed"] == 0.25


def test_a_stopped_segment_is_left_out_of_the_throughput():
    """A segment stopped midway paid for rows still in flight that no row counts: its
    tokens over its wall time would understate the speed, so only complete segments (and
    segments written before the mark existed) count."""
    rows = [row("a", 0, True), row("b", 0, True)]
    segments = [{"data": "m", "policy": "tip", "budget": None, "tokens": 100, "wall_s": 10.0,
                 "complete": False},
                {"data": "m", "policy": "tip", "budget": None, "tokens": 900, "wall_s": 3.0,
                 "complete": True},
                {"data": "m", "policy": "tip", "budget": None, "tokens": 300, "wall_s": 1.0}]
    (s,) = summarise(rows, segments)
    assert s["throughput_tok_s"] == (900 + 300) / (3.0 + 1.0)
    (s,) = summarise(rows, segments[:1])
    assert s["throughput_tok_s"] is None


def test_per_sample_figures_are_means_over_samples():
    """5 samples of 2 problems: decode time, live KV and length are means over the samples
    (written out by hand), not sums over problems."""
    times, lives, gens = [1.0, 2.0, 3.0, 6.0, 8.0], [10.0, 20.0, 30.0, 40.0, 50.0], \
        [100, 200, 300, 400, 500]
    rows = []
    for i, (t, live, g) in enumerate(zip(times, lives, gens)):
        r = row("a" if i < 4 else "b", i, True, live=live, generated=g)
        r["decode_s"] = t
        r["flags"] = [["max_new_tokens"], ["pool_full"], ["pool_full", "max_new_tokens"], [],
                      []][i]
        rows.append(r)
    (s,) = summarise(rows, [])
    assert s["capped"] == 2  # the samples the token cap cut, not every flagged one
    assert s["decode_s"] == 4.0  # (1 + 2 + 3 + 6 + 8) / 5; over the 2 problems: 10
    assert s["live_response_tokens"] == 30.0 and s["mean_live_tokens"] == 50.0
    assert s["generated_tokens"] == 300.0 and s["samples"] == 5 and s["problems"] == 2
    assert s["throughput_tok_s"] is None  # no timing segments


def test_run_resume_and_report(tmp_path, tiny_folder):
    from solm.cli import tip

    data = tmp_path / "probs.jsonl"
    data.write_text("".join(json.dumps({"id": f"p{i}", "problem": f"What is {i}+1?",
                                        "answer": str(i + 1)}) + "\n" for i in range(3)))
    out = tmp_path / "run"
    args = ["eval", "run", "-o", str(out), "--data", str(data), "--model", tiny_folder,
            "--registers", "4", "--policies", "dense,streamingllm,tip", "--budgets", "8,16",
            "--samples", "2", "--max-new-tokens", "6", "--page-size", "4", "--batch-size", "3",
            "--quiet"]
    runner = CliRunner()
    r = runner.invoke(tip.app, args)
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    keys = {(x["id"], x["policy"], x["budget"], x["sample"]) for x in rows}
    assert len(rows) == len(keys) == 3 * 4 * 2
    assert all(x["generated"] <= 6 for x in rows)
    # lose the last rows of one point, as a kill would: only they are decoded again
    kept = [x for x in rows if not (x["policy"] == "tip" and x["id"] == "p2")]
    (out / "samples.jsonl").write_text("".join(json.dumps(x) + "\n" for x in kept))
    segments = len((out / "timing.jsonl").read_text().splitlines())
    r = runner.invoke(tip.app, args)
    assert r.exit_code == 0, r.output
    again = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(again) == 24
    new_segments = [json.loads(x) for x in (out / "timing.jsonl").read_text().splitlines()
                    ][segments:]
    assert [(s["policy"], s["rows"]) for s in new_segments] == [("tip", 2)]
    # other settings would mix rows: refused
    r = runner.invoke(tip.app, [*args[:-1], "--temperature", "0.9", "--quiet"])
    assert r.exit_code != 0 and "temperature" in r.output
    r = runner.invoke(tip.app, ["eval", "report", str(out), "--quiet"])
    assert r.exit_code == 0, r.output
    report = (out / "report" / "report.md").read_text()
    assert "streamingllm@16" in report and "Registers in use" in report
    assert len(list((out / "report").glob("*.png"))) == 3
    summary = json.loads((out / "report" / "summary.json").read_text())
    assert {p["label"] for p in summary["points"]} == {"dense", "streamingllm@8",
                                                       "streamingllm@16", "tip"}


def test_point_label():
    assert Point("h2o", 256).label == "h2o@256" and Point("tip", None).label == "tip"


def test_the_long_decodes_figure_starts_at_256_generated_tokens():
    """`live_response_tokens_256plus` averages the decodes of 256 tokens or more (by hand:
    256 and 300 in, 255 out)."""
    rows = [row("a", 0, True, live=10.0, generated=255), row("a", 1, True, live=20.0,
                                                             generated=256),
            row("b", 0, True, live=40.0, generated=300)]
    (s,) = summarise(rows, [])
    assert s["decodes_256plus"] == 2 and s["live_response_tokens_256plus"] == 30.0


def test_a_resumed_run_decodes_each_sample_as_a_fresh_run_does(tmp_path, tiny_folder):
    """Sample k of a problem is seeded seed + k whatever else is left to decode: rows lost
    to a kill come back identical (sampling at temperature 1, one request at a time)."""
    from solm.cli import tip

    data = tmp_path / "probs.jsonl"
    data.write_text("".join(json.dumps({"id": f"p{i}", "problem": f"What is {i}+2?",
                                        "answer": str(i + 2)}) + "\n" for i in range(2)))
    out = tmp_path / "run"
    args = ["eval", "run", "-o", str(out), "--data", str(data), "--model", tiny_folder,
            "--registers", "4", "--policies", "dense", "--samples", "3", "--max-new-tokens",
            "8", "--page-size", "4", "--batch-size", "1", "--temperature", "1.0",
            "--top-p", "1.0", "--quiet"]
    runner = CliRunner()
    assert runner.invoke(tip.app, args).exit_code == 0
    rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    by_key = {(x["id"], x["sample"]): x["response"] for x in rows}
    assert len(set(by_key.values())) > 1  # sampled: the samples differ
    kept = [x for x in rows if (x["id"], x["sample"]) not in {("p0", 1), ("p1", 0)}]
    (out / "samples.jsonl").write_text("".join(json.dumps(x) + "\n" for x in kept))
    assert runner.invoke(tip.app, args).exit_code == 0
    again = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert {(x["id"], x["sample"]): x["response"] for x in again} == by_key


@pytest.mark.parametrize("solved,n", [(0, 5), (3, 4), (187, 200), (60, 60)])
def test_the_accuracy_interval_is_wilsons_over_problems(solved, n):
    """One sample a problem: the interval is the binomial one, found numerically here."""
    from test_agreement import wilson_by_bisection

    rows = [row(f"p{i}", 0, i < solved) for i in range(n)]
    for i, r in enumerate(rows):
        r["peak_live_tokens"], r["peak_pages"] = 10 * i, i % 7
    (s,) = summarise(rows, [])
    assert s["accuracy_ci95"] == pytest.approx(list(wilson_by_bisection(solved, n)), abs=1e-4)
    assert s["peak_pages"] == max(i % 7 for i in range(n))
    assert s["peak_live_tokens"] == pytest.approx(sum(10 * i for i in range(n)) / n, abs=0.05)

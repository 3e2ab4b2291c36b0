"""`pasta eval run` / `report` end to end on a tiny model with the fake judge, resumption, and
the aggregation they rest on."""

import json
import re
import math
import subprocess
import sys

import pytest

from fake_llm_server import FakeLLM
from solm.core.errors import SolmError
from solm.eval.methods import Method
from solm.eval.report import pareto
from solm.eval.summary import speed


def test_method_specs():
    assert Method.parse("sot=smollm2-135m") == Method("sot", "sot", "smollm2-135m")
    assert Method.parse("apar:lora-1=runs/x") == Method("lora-1", "apar", "runs/x")
    for bad in ("sot", "beam=m", "sot:=m", "sot:a b=m", "=m"):
        with pytest.raises(SolmError):
            Method.parse(bad)


def test_speed_aggregates_per_prompt_ratios():
    base = {"a": {"wall_s": 4.0, "content_tokens": 100}, "b": {"wall_s": 1.0, "content_tokens": 10},
            "c": {"wall_s": 2.0, "content_tokens": 50}}
    method = {"a": {"wall_s": 1.0, "content_tokens": 100, "critical_path": 25},
              "b": {"wall_s": 4.0, "content_tokens": 10, "critical_path": 10},
              "z": {"wall_s": 1.0, "content_tokens": 5, "critical_path": 5}}  # no baseline row
    s = speed(method, base)
    assert s["prompts"] == 2
    assert s["realized_speedup"]["geomean"] == pytest.approx(1.0)  # 4x and 1/4x
    assert s["realized_speedup"]["mean"] == pytest.approx((4 + 0.25) / 2)
    assert s["theoretical_speedup"]["geomean"] == pytest.approx(math.sqrt(4 * 1))
    assert s["parallelism"]["mean"] == pytest.approx((4 + 1) / 2)
    assert s["tokens_per_s"] == pytest.approx(110 / 5)
    assert s["distrusted_prompts"] == 0  # 4x realized on 4x theoretical, 1/4x on 1x
    method["a"]["wall_s"] = 0.5  # 8x realized where the passes allow 4x: flagged
    assert speed(method, base)["distrusted_prompts"] == 1
    method["a"]["wall_s"] = 4.0 / 4.3  # 4.3x on 4x: within 10%, noise
    assert speed(method, base)["distrusted_prompts"] == 0



def test_a_run_with_untimed_rows_reports_no_throughput():
    """Re-audit round 5: a batched (quality) row has no wall time; a throughput over the
    timed rows alone would divide all the content by part of the time, so there is none."""
    base = {"a": {"wall_s": 2.0, "content_tokens": 40}, "b": {"wall_s": 2.0,
                                                             "content_tokens": 40}}
    timed = {"a": {"wall_s": 1.0, "content_tokens": 40, "critical_path": 20},
             "b": {"wall_s": 1.0, "content_tokens": 60, "critical_path": 30}}
    assert speed(timed, base)["tokens_per_s"] == pytest.approx(100 / 2)
    half = {**timed, "b": {**timed["b"], "wall_s": None, "batched": 2}}
    assert speed(half, base)["tokens_per_s"] is None


def test_geomean_raises_values_to_its_floor():
    """Re-audit round 5: a prompt whose figure is 0 (an empty answer) counts at the floor and
    pulls the mean down, the closed form sqrt(floor x 4); it is not dropped."""
    from solm.core.stats import geomean

    assert geomean([0.0, 4.0], floor=1e-2) == pytest.approx(math.sqrt(1e-2 * 4))
    assert geomean([0.0, 4.0]) == pytest.approx(4.0)  # no floor: dropped


def test_pareto_front():
    pts = [(1.0, 50.0), (2.0, 40.0), (1.5, 45.0), (1.2, 30.0), (0.8, 60.0)]
    assert pareto(pts) == [(0.8, 60.0), (1.0, 50.0), (1.5, 45.0), (2.0, 40.0)]


def _cli(*args, env_extra=None):
    import os
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "solm.cli.main", "pasta", "eval", *args],
                          capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.slow
def test_eval_run_and_report_end_to_end(tmp_path, tiny_folder):
    prompts = tmp_path / "alpaca.jsonl"
    prompts.write_text("\n".join(json.dumps({"instruction": q}) for q in (
        "Name three fruits.", "How do I boil an egg?", "Write a haiku about rain.")) + "\n")
    run_dir = tmp_path / "run"
    reference = tmp_path / "reference.json"  # AlpacaEval's model_outputs form: no ids
    reference.write_text(json.dumps([{"instruction": q, "output": "GOOD reference",
                                      "generator": "gpt4"} for q in (
        "Name three fruits.", "How do I boil an egg?", "Write a haiku about rain.")]))
    with FakeLLM(None) as server:
        args = ["run", "-o", str(run_dir), "--prompts", str(prompts),
                "--method", f"sequential={tiny_folder}", "--method", f"sot={tiny_folder}",
                "--method", f"apar:tiny-apar={tiny_folder}",
                "--method", f"sequential:seq2={tiny_folder}", "--baseline", "sequential",
                "--judge", f"openai:judge@{server.url}", "--max-new-tokens", "8",
                "--sot-skeleton-tokens", "12", "--sot-point-tokens", "4", "--dtype", "fp32",
                "--reference", str(reference), "--no-compile", "-q"]
        first = _cli(*args, env_extra={"SOLM_CACHE": str(tmp_path / "cache")})
        assert first.returncode == 0, first.stderr[-3000:]
        requests = server.judge_requests
        out = {label: [json.loads(x) for x in (run_dir / "outputs" / f"{label}.jsonl")
                       .read_text().splitlines()]
               for label in ("sequential", "sot", "tiny-apar", "seq2")}
        # both orders of every pair, each distinct comparison asked once (identical outputs of
        # two methods share their verdicts through the cache)
        distinct = {(b["instruction"], *order) for label in ("sot", "tiny-apar", "seq2")
                    for b, m in zip(out["sequential"], out[label])
                    for order in ((b["output"], m["output"]), (m["output"], b["output"]))}
        references = {(b["instruction"], *order) for label in out for b in out[label]
                      for order in ((b["output"], "GOOD reference"),
                                    ("GOOD reference", b["output"]))}
        assert len(distinct) + len(references) <= requests <= 3 * 3 * 2 + 4 * 3 * 2
        # the same command again: nothing decoded, nothing asked
        again = _cli(*args, env_extra={"SOLM_CACHE": str(tmp_path / "cache")})
        assert again.returncode == 0, again.stderr[-3000:]
        assert server.judge_requests == requests
    for label in ("sequential", "sot", "tiny-apar"):
        rows = [json.loads(x) for x in (run_dir / "outputs" / f"{label}.jsonl").read_text()
                .splitlines()]
        assert len(rows) == 3 and [r["index"] for r in rows] == [0, 1, 2]
        assert all(r["generator"] == label and r["wall_s"] > 0 and "output" in r
                   for r in rows)
    for label in ("sot", "tiny-apar"):
        judged = (run_dir / "judgments" / f"{label}.jsonl").read_text().splitlines()
        assert len(judged) == 3
    summary = json.loads((run_dir / "summary.json").read_text())
    seq = summary["methods"]["sequential"]
    assert seq["baseline"] and seq["speed"]["theoretical_speedup"]["geomean"] == 1.0
    sot = summary["methods"]["sot"]
    # the blocks the guards closed reach the summary (the eval rows carry the decode's count)
    apar_rows = out["tiny-apar"]
    assert all(isinstance(r["guarded_blocks"], int) for r in apar_rows)
    assert summary["methods"]["tiny-apar"]["speed"]["guarded_blocks"] == pytest.approx(
        sum(r["guarded_blocks"] for r in apar_rows) / max(1, sum(r["threads"] for r in apar_rows)),
        abs=1e-4)
    # against the reference (the GOOD one): every method loses every pair
    for label in ("sequential", "sot", "tiny-apar", "seq2"):
        vs_ref = summary["methods"][label]["vs_reference"]
        assert vs_ref["n"] == 3 and vs_ref["win_rate"] < 50
    # the summary's figures, recomputed from the outputs files (the rule written again)
    base_wall = {r["id"]: r["wall_s"] for r in out["sequential"]}
    ratios = [base_wall[r["id"]] / r["wall_s"] for r in out["sot"]]
    assert sot["speed"]["prompts"] == 3
    assert sot["speed"]["realized_speedup"]["geomean"] == pytest.approx(
        math.prod(ratios) ** (1 / 3), rel=1e-3)
    # the fake judge prefers the text with more "GOOD": neither has any, so every pair ties
    assert not any("GOOD" in r["output"] for rows in out.values() for r in rows)
    assert sot["vs_baseline"]["n"] == 3 and sot["vs_baseline"]["win_rate"] == 50.0
    printed = json.loads(again.stdout)
    assert set(printed) == {"sequential", "sot", "tiny-apar", "seq2"}
    # sot's own model also decoded sequentially (seq2): its speedup without a model change
    assert sot["speed_vs_same_model"]["sequential"] == "seq2"
    assert sot["speed_vs_same_model"]["prompts"] == 3
    # a different method under a used label is refused
    clash = _cli("run", "-o", str(run_dir), "--prompts", str(prompts),
                 "--method", "sequential=smollm2-135m", "--no-judge")
    assert clash.returncode != 0 and "sequential" in clash.stderr
    report = _cli("report", str(run_dir), "-o", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr[-3000:]
    text = (tmp_path / "report" / "report.md").read_text()
    assert "| sot | sot |" in text and "(baseline)" in text
    assert "`sot` against `seq2` (its own model, sequential)" in text
    for axis in ("realized_speedup", "theoretical_speedup", "parallelism"):
        png = tmp_path / "report" / f"winrate_vs_{axis}.png"
        assert png.exists() and png.stat().st_size > 5000


def test_alpaca_eval_prompts_from_the_hub_file_and_local_files(tmp_path, monkeypatch):
    import huggingface_hub

    from solm.core.errors import DataError
    from solm.eval.run import alpaca_eval_records

    hub_file = tmp_path / "alpaca_eval.json"  # the hub's file is a JSON list
    hub_file.write_text(json.dumps([{"instruction": f"q{i}", "output": "o", "generator": "g",
                                     "dataset": "helpful_base"} for i in range(5)]))
    monkeypatch.setattr(huggingface_hub, "hf_hub_download",
                        lambda repo, name, repo_type: str(hub_file))
    recs = alpaca_eval_records("tatsu-lab/alpaca_eval", limit=3)
    assert [(i, r.prompt) for i, r in recs] == [(0, "q0"), (1, "q1"), (2, "q2")]

    def offline(*args, **kwargs):
        raise OSError("no network")
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with pytest.raises(SolmError, match="--prompts"):
        alpaca_eval_records("tatsu-lab/alpaca_eval", limit=3)
    jsonl = tmp_path / "local.jsonl"
    jsonl.write_text("\n".join(json.dumps({"instruction": f"l{i}"}) for i in range(4)) + "\n")
    assert len(alpaca_eval_records(str(jsonl), None)) == 4
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"instruction": "ok"}, {"nothing": 1}]))
    with pytest.raises(DataError, match="bad.json: item 1"):
        alpaca_eval_records(str(bad), None)


def test_a_run_folder_refuses_another_judge_or_prompts_file(tmp_path):
    """Outputs are reused by prompt id and judgments by pair, so a rerun into the
    same folder with another judge, reference or prompts file is refused; a decode-only
    rerun (--no-judge) keeps the judge recorded."""
    from solm.eval.methods import Method
    from solm.eval.run import read_run_file, write_run_file

    methods = [Method.parse("sequential=m")]
    base = {"prompts": "a.jsonl", "judge": "hf:one", "reference": None, "decode": {"x": 1}}
    write_run_file(tmp_path, methods, "sequential", base)
    write_run_file(tmp_path, methods, "sequential", {**base, "judge": None})
    assert read_run_file(tmp_path)["judge"] == "hf:one"
    for change in ({"judge": "hf:two"}, {"prompts": "b.jsonl"}, {"decode": {"x": 2}}):
        with pytest.raises(SolmError, match="use another run folder"):
            write_run_file(tmp_path, methods, "sequential", {**base, **change})
    write_run_file(tmp_path, methods, "sequential", {**base, "reference": "gpt4.json"})
    with pytest.raises(SolmError, match="its reference settings were gpt4.json"):
        write_run_file(tmp_path, methods, "sequential", {**base, "reference": "other.json"})


def test_timed_methods_are_warmed_first_and_alternate_their_order(tmp_path, pasta_tokenizer):
    """Every realized-speedup figure warms both paths before timing and alternates
    their order, so neither always runs first."""
    from solm.core.records import Record
    from solm.eval.methods import MethodRunner
    from solm.eval.run import decode_outputs

    calls = []

    class Runner:
        tokenizer = pasta_tokenizer
        timed = MethodRunner.timed

        def __init__(self, label):
            self.label = label

        def warm_up(self):
            calls.append(("warm", self.label))

        def decode(self, rec, index, repeats):
            calls.append((rec.id, self.label))
            return {"id": rec.id, "index": index}

    records = [(i, Record(f"p{i}", f"Prompt {i}?")) for i in range(4)]
    runners = {"base": Runner("base"), "pasta": Runner("pasta")}
    decode_outputs(runners, records, tmp_path, repeats=1)
    assert calls == [("warm", "base"), ("warm", "pasta"),
                     ("p0", "base"), ("p0", "pasta"), ("p1", "pasta"), ("p1", "base"),
                     ("p2", "base"), ("p2", "pasta"), ("p3", "pasta"), ("p3", "base")]


def test_batched_quality_run_writes_the_timed_outputs_and_resumes(tmp_path, tiny_folder):
    """`pasta eval run --batch-size 2` (a quality run through the one decode loop) writes, per
    method, the answers a timed one-at-a-time run writes (greedy), marks its rows batched and
    untimed, and a rerun decodes only the prompt its outputs file lost."""
    from typer.testing import CliRunner

    from solm.cli.main import app

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "prompt": p}) + "\n" for i, p in
                               enumerate(["Name a colour.", "Count to three.",
                                          "Say something kind about rivers."])))

    def run(folder: str, *extra: str):
        r = CliRunner().invoke(app, [
            "pasta", "eval", "run", "-o", str(tmp_path / folder), "--prompts", str(prompts),
            "--method", f"sequential={tiny_folder}", "--method", f"apar:ap={tiny_folder}",
            "--no-judge", "--max-new-tokens", "12", "--temperature", "0", "--dtype", "fp32",
            "--no-compile", "-q", *extra])
        assert r.exit_code == 0, r.output

    def rows(folder: str, label: str) -> list[dict]:
        path = tmp_path / folder / "outputs" / f"{label}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]

    run("timed")
    run("batched", "--batch-size", "2")
    for label in ("sequential", "ap"):
        timed = {r["id"]: r for r in rows("timed", label)}
        batched = {r["id"]: r for r in rows("batched", label)}
        assert set(batched) == {"p0", "p1", "p2"}
        for rid, row in batched.items():
            assert row["output"] == timed[rid]["output"]
            assert row["index"] == timed[rid]["index"] == int(rid[1])
            assert row["batched"] == 2 and row["wall_s"] is None
    path = tmp_path / "batched" / "outputs" / "ap.jsonl"
    kept = [line for line in path.read_text().splitlines() if '"p1"' not in line]
    path.write_text("\n".join(kept) + "\n")
    run("batched", "--batch-size", "2")
    again = rows("batched", "ap")
    assert [r["id"] for r in again] == ["p0", "p2", "p1"]
    assert again[-1]["output"] == {r["id"]: r for r in rows("timed", "ap")}["p1"]["output"]
    assert len(rows("batched", "sequential")) == 3


def test_a_decode_summary_counts_each_flag_per_row():
    """Re-audit round 5: `flagged` counts the rows that carry each flag."""
    from solm.decode.jobs import DecodeSummary

    summary = DecodeSummary()
    for flags in (["max_new_tokens"], ["max_new_tokens", "fork_capped"], []):
        summary.count({"flags": flags})
    assert summary.done == 3
    assert summary.flagged == {"max_new_tokens": 2, "fork_capped": 1}


def test_a_pasta_eval_row_keeps_what_the_summary_reads():
    """Every figure `speed()` reads from a PASTA method's rows survives `eval_row` (a row
    without `guarded_blocks` makes the summary's guarded share None)."""
    import inspect

    from solm.decode.pasta.system import eval_row
    from solm.eval import summary

    read = set(re.findall(r'(?:r|m|row)(?:\.get\(|\[)"(\w+)"',
                          inspect.getsource(summary.speed)))
    assert {"guarded_blocks", "threads", "flags", "critical_path"} <= read
    written = {"id", "prompt", "mode", "response", "annotated", "content_tokens",
               "critical_path", "promises", "total_tokens", "parallelism", "content_speedup",
               "forward_passes", "threads", "guarded_blocks", "wall_s", "prefill_s",
               "decode_s", "compile_s", "flags"}  # what `pasta decode` writes per row
    decoded = {k: 1 for k in written}
    decoded.update(mode="parallel", flags=[], annotated="x", response="x")
    kept = eval_row(decoded)
    assert read - {"output", "generated_tokens"} <= set(kept), read - set(kept)


def test_speed_reports_the_interval_well_formed_answers_and_repeats():
    """The figures, by hand: content tokens per pass against the baseline's with its
    paired bootstrap interval, the share of well-formed Pasta-Lang answers, and repeated word
    3-grams ('a b c a b c': 4 trigrams, the last repeats the first)."""
    from solm.core.stats import bootstrap_geomean_ci, geomean, repeated_ngram_share

    assert repeated_ngram_share("a b c a b c".split(), 3) == 0.25
    assert repeated_ngram_share(["a", "b"], 3) == 0.0
    assert bootstrap_geomean_ci([2.0, 2.0, 2.0]) == (2.0, 2.0)
    assert bootstrap_geomean_ci([1.5]) is None
    ratios = [1.1, 1.4, 0.9, 1.6, 1.3, 1.2, 2.0, 1.05]
    lo, hi = bootstrap_geomean_ci(ratios)
    assert min(ratios) < lo < geomean(ratios) < hi < max(ratios)
    good = '1. <promise topic="a" tokens="1"/><async>x y</async>\n<sync/>Done.'
    base = {k: {"content_tokens": 10, "forward_passes": 10, "output": "a b c d e"}
            for k in "pq"}
    method = {"p": {"content_tokens": 10, "forward_passes": 5, "critical_path": 5,
                    "annotated": good, "flags": [], "output": "a b c a b c"},
              "q": {"content_tokens": 10, "forward_passes": 8, "critical_path": 8,
                    "annotated": good.replace("</async>", ""), "flags": [], "output": "a b c"}}
    s = speed(method, base)
    assert s["passes_per_token_reduction"]["geomean"] == pytest.approx(math.sqrt(2 * 1.25), abs=1e-4)
    assert s["passes_per_token_reduction_ci95"][0] >= 1.25 - 1e-9
    assert s["well_formed"] == 0.5  # q's block never closes
    assert s["repeated_3grams"] == pytest.approx((0.25 + 0.0) / 2)
    assert speed(base, base)["well_formed"] is None  # no Pasta-Lang answers


def test_a_method_added_to_a_run_keeps_the_others_and_their_settings(tmp_path):
    """A run folder takes a new method (its decode settings join the record); a method
    already in it decoded with other settings is still refused."""
    from solm.core.errors import SolmError
    from solm.eval.methods import Method
    from solm.eval.run import write_run_file

    def decode(labels, penalty=1.2):
        return {"decode": {"max_new_tokens": 8, "by_method": {
            label: {"repetition_penalty": penalty} for label in labels}},
            "engines": {label: "torch" for label in labels}}

    a, b = Method.parse("sequential:a=m1"), Method.parse("pasta:b=m2")
    write_run_file(tmp_path, [a], "a", decode(["a"]))
    write_run_file(tmp_path, [a, b], "a", decode(["a", "b"]))
    record = json.loads((tmp_path / "run.json").read_text())
    assert set(record["decode"]["by_method"]) == {"a", "b"} == set(record["engines"])
    assert [m["label"] for m in record["methods"]] == ["a", "b"]
    write_run_file(tmp_path, [b], "a", decode(["b"]))  # a rerun of one method
    with pytest.raises(SolmError, match="decode settings"):
        write_run_file(tmp_path, [a], "a", decode(["a"], penalty=1.0))

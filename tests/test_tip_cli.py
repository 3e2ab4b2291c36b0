"""tip traces / decode / bench end to end on a tiny model."""

import json

from typer.testing import CliRunner

from solm.cli import tip
from solm.annotate.tip_traces import build_traces

runner = CliRunner()
SOLUTION = ("First we add the two numbers. Then we check the sum against the bound. "
            "Next, note that 7 is prime.\nFinally the answer is 12.")


def words(s: str) -> int:
    return len(s.split())


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_tip_decode_writes_stats_and_resumes(tmp_path, tiny_folder):
    prompts = write(tmp_path / "p.jsonl", [{"id": "a", "problem": "1+1?"},
                                           {"id": "b", "problem": "2+2?"}])
    out = tmp_path / "o.jsonl"
    args = ["decode", "--model", tiny_folder, "--prompts", str(prompts), "--out", str(out),
            "--registers", "4", "--samples", "2", "--max-new-tokens", "5", "--batch-size", "3",
            "--page-size", "8", "--num-pages", "64", "--quiet"]
    r = runner.invoke(tip.app, args)
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted((x["id"], x["sample"]) for x in rows) == [("a", 0), ("a", 1), ("b", 0),
                                                            ("b", 1)]
    assert all(x["generated"] <= 5 and x["peak_pages"] >= 1 for x in rows)
    summary = json.loads(r.stdout)
    assert summary["done"] == 4 and summary["throughput_tok_s"] > 0
    r = runner.invoke(tip.app, args)
    assert r.exit_code == 0 and json.loads(r.stdout)["skipped"] == 4
    assert len(out.read_text().splitlines()) == 4
    r = runner.invoke(tip.app, args[:-1] + ["--policy", "h2o", "--budget", "8"])
    assert r.exit_code != 0 and "budget" in r.output


def test_tip_bench_reports_ratios_against_dense(tmp_path, tiny_folder):
    sols = iter([("q", SOLUTION)] * 100)
    rows = build_traces(sols, words, n_traces=3, min_tokens=60, registers=4,
                        min_step_tokens=4)
    traces = write(tmp_path / "t.jsonl", rows)
    out = tmp_path / "bench.json"
    r = runner.invoke(tip.app, ["bench", "--traces", str(traces), "--model", tiny_folder,
                                "--registers", "4", "--budget", "32", "--page-size", "8",
                                "--batch-size", "2", "--out", str(out), "--quiet",
                                "--policies", "dense,tip,streamingllm,h2o"])
    assert r.exit_code == 0, r.output
    s = json.loads(out.read_text())
    by = {p["policy"]: p for p in s["policies"]}
    assert set(by) == {"dense", "tip", "streamingllm", "h2o"}
    assert by["dense"]["live_kv_vs_dense"] == 1.0
    assert s["live_kv_vs_dense"] == by["tip"]["live_kv_vs_dense"] < 0.95
    assert by["streamingllm"]["mean_live_tokens"] <= 32 and by["h2o"]["mean_live_tokens"] <= 32
    assert s["throughput_vs_dense"] > 0
    assert all(p["bandwidth_gbs"] > 0 and 0 < p["bandwidth_fraction"] for p in s["policies"])
    assert out.with_suffix(".png").stat().st_size > 0  # the bar chart beside the JSON


def test_tip_traces_writes_traces_and_a_manifest(tmp_path):
    source = tmp_path / "math.jsonl"
    source.write_text("".join(json.dumps({"id": f"m{i}", "problem": f"What is {i}+1?",
                                          "solution": SOLUTION}) + "\n" for i in range(30)))
    out = tmp_path / "traces.jsonl"
    r = runner.invoke(tip.app, ["traces", "--source", str(source), "-o", str(out), "--n", "2",
                                "--min-tokens", "60", "--registers", "4", "-q"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 2 and all(row["response"].startswith("<reg_0>") for row in rows)
    manifest = json.loads((tmp_path / "traces.jsonl.manifest.json").read_text())
    assert manifest["command"] == "tip traces" and str(source) in manifest["inputs"]
    assert manifest["traces"] == 2

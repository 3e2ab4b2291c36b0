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


TIMED = ("prefill_s", "decode_s")


def _tip_decode_args(tiny_folder, *extra):
    return ["decode", "--model", tiny_folder, "--registers", "4", "--max-new-tokens", "6",
            "--batch-size", "1", "--page-size", "8", "--num-pages", "64", "--no-compile",
            "--dtype", "fp32", "--quiet", *extra]


def test_tip_decode_shards_merge_into_the_unsharded_rows(tmp_path, tiny_folder):
    from solm.core.shard import merge_file

    prompts = write(tmp_path / "p.jsonl", [{"id": f"q{i}", "problem": f"What is {i} + {i}?"}
                                           for i in range(3)])
    whole, sharded = tmp_path / "whole.jsonl", tmp_path / "sharded.jsonl"
    common = _tip_decode_args(tiny_folder, "--prompts", str(prompts), "--samples", "2")
    for k in range(2):
        r = runner.invoke(tip.app, [*common, "--out", str(sharded), "--shard", f"{k}/2"])
        assert r.exit_code == 0, r.output
    part = [json.loads(x)["id"] for x in
            sharded.with_name("sharded.shard-1-of-2.jsonl").read_text().splitlines()]
    assert part == ["q1", "q1"]  # shard 1 of 2 holds the second prompt, both samples
    assert runner.invoke(tip.app, [*common, "--out", str(whole)]).exit_code == 0
    merge_file(sharded)

    def rows(path):
        return sorted((tuple(sorted((k, v) for k, v in json.loads(x).items()
                                    if k not in TIMED)) for x in path.read_text().splitlines()))

    assert len(rows(whole)) == 6 and rows(sharded) == rows(whole)


def test_tip_decode_answers_one_prompt_as_a_file_decode_does(tmp_path, tiny_folder):
    prompts = write(tmp_path / "p.jsonl", [{"id": "q", "problem": "What is 2 + 2?"}])
    out = tmp_path / "o.jsonl"
    r = runner.invoke(tip.app, _tip_decode_args(tiny_folder, "--prompts", str(prompts),
                                                "--out", str(out), "--temperature", "0"))
    assert r.exit_code == 0, r.output
    from solm.decode.tip.system import steps_text

    row = json.loads(out.read_text())
    r = runner.invoke(tip.app, _tip_decode_args(tiny_folder, "What is 2 + 2?",
                                                "--temperature", "0"))
    assert r.exit_code == 0, r.output
    assert r.stdout == steps_text(row) + "\n"
    assert "killed by a register reuse" in r.stderr
    assert not (tmp_path / "runs").exists()


def test_tip_decode_takes_sampling_from_the_model_then_from_flags(tmp_path, tiny_folder):
    import shutil

    from solm.core.provenance import manifest_path, read_manifest

    model = tmp_path / "model"
    shutil.copytree(tiny_folder, model)
    (model / "generation_config.json").write_text(json.dumps(
        {"do_sample": True, "temperature": 0.3, "top_p": 0.5}))
    prompts = write(tmp_path / "p.jsonl", [{"id": "q", "problem": "1+1?"}])

    def recorded(out, *flags):
        r = runner.invoke(tip.app, [*_tip_decode_args(str(model), "--prompts", str(prompts),
                                                      "--out", str(out)), *flags])
        assert r.exit_code == 0, r.output
        return read_manifest(manifest_path(out))["row_settings"]

    from_model = recorded(tmp_path / "a.jsonl")
    assert (from_model["temperature"], from_model["top_p"]) == (0.3, 0.5)
    flagged = recorded(tmp_path / "b.jsonl", "--temperature", "0.9")
    assert (flagged["temperature"], flagged["top_p"]) == (0.9, 0.5)
    (model / "generation_config.json").unlink()
    built_in = recorded(tmp_path / "c.jsonl")  # tip decode's own defaults: the thesis'
    assert (built_in["temperature"], built_in["top_p"]) == (0.6, 0.95)


def test_tip_bench_replays_the_registers_of_tip_annotate_output(tmp_path, tiny_folder):
    """`tip annotate` keeps the plain solution as `response` and the registers in
    `annotated`: the bench replays the annotated text, so TIP frees what its registers kill
    (a replay of the plain text would free nothing: live KV equal to dense)."""
    sols = iter([("q", SOLUTION)] * 100)
    rows = build_traces(sols, words, n_traces=3, min_tokens=60, registers=4,
                        min_step_tokens=4)
    annotated = [{"prompt": r["prompt"], "annotated": r["response"],
                  "response": r["response"].replace("<reg_0>", "").replace("<reg_1>", "")
                  .replace("<reg_2>", "").replace("<reg_3>", "")} for r in rows]
    assert all("<reg_" not in r["response"] for r in annotated)
    traces = write(tmp_path / "a.jsonl", annotated)
    out = tmp_path / "bench.json"
    r = runner.invoke(tip.app, ["bench", "--traces", str(traces), "--model", tiny_folder,
                                "--registers", "4", "--page-size", "8", "--batch-size", "2",
                                "--out", str(out), "--quiet", "--policies", "dense,tip"])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["live_kv_vs_dense"] < 0.95


def _no_loading(monkeypatch):
    """Any model load fails loudly: what is refused must be refused before it."""
    import solm.core.models as models

    def boom(*a, **k):
        raise AssertionError("a model was loaded before the input was checked")

    monkeypatch.setattr(models, "load_model", boom)
    monkeypatch.setattr(models, "load_decoder", boom)


def test_a_prompt_too_long_is_refused_before_any_model_loads(tmp_path, tiny_folder,
                                                             monkeypatch):
    long = " ".join(["word"] * 5000)  # the tiny model holds 4096 positions
    prompts = write(tmp_path / "p.jsonl", [{"id": "a", "problem": "1+1?", "answer": "2"},
                                           {"id": "b", "problem": long, "answer": "1"}])
    _no_loading(monkeypatch)
    for args in (["decode", "-p", str(prompts), "-o", str(tmp_path / "o.jsonl")],
                 ["eval", "run", "-d", str(prompts), "-o", str(tmp_path / "ev"),
                  "--policies", "tip"]):
        r = runner.invoke(tip.app, [*args, "-m", tiny_folder, "--registers", "4"])
        assert r.exit_code != 0
        assert f"{prompts}:2 [field 'problem']" in r.output and "tokens" in r.output, r.output
        assert "Traceback" not in r.output and "Token indices" not in r.output


def test_a_gold_answer_that_is_not_text_or_a_number_is_refused(tmp_path, tiny_folder,
                                                               monkeypatch):
    _no_loading(monkeypatch)
    for bad, said in (({"a": 1}, "dict"), ([1], "list"), (True, "bool"), (None, "null"),
                      ("", "empty")):
        prompts = write(tmp_path / "p.jsonl", [{"id": "ok", "question": "q", "answer": "1"},
                                               {"id": "x", "question": "q", "answer": bad}])
        for args in (["decode", "-p", str(prompts), "-o", str(tmp_path / "o.jsonl")],
                     ["eval", "run", "-d", str(prompts), "-o", str(tmp_path / "ev"),
                      "--policies", "tip"]):
            r = runner.invoke(tip.app, [*args, "-m", tiny_folder, "--registers", "4"])
            assert r.exit_code != 0, (bad, r.output)
            assert f"{prompts}:2 [field 'answer']" in r.output and said in r.output, r.output


def test_registers_other_than_the_models_are_refused(tmp_path, tiny_folder, monkeypatch):
    """A model that records 2 registers decodes with 2: --registers 16 is refused before
    any load or export; --registers 2, or none, is the model's own."""
    import shutil

    from solm.core.models import resolve_registers

    model = tmp_path / "two"
    shutil.copytree(tiny_folder, model)
    (model / "solm.json").write_text(json.dumps({"system": "tip", "control_tokens": "tip",
                                                 "num_registers": 2}))
    assert resolve_registers(str(model), None) == 2 == resolve_registers(str(model), 2)
    assert resolve_registers(tiny_folder, 16) == 16 and resolve_registers(tiny_folder, None) == 16
    _no_loading(monkeypatch)
    prompts = write(tmp_path / "p.jsonl", [{"id": "a", "problem": "1+1?"}])
    for n in ("16", "100000"):
        for args in (["decode", "-p", str(prompts), "-o", str(tmp_path / "o.jsonl")],
                     ["eval", "run", "-d", str(prompts), "-o", str(tmp_path / "ev")],
                     ["decode", "1+1?"]):
            r = runner.invoke(tip.app, [*args, "-m", str(model), "--registers", n])
            assert r.exit_code != 0
            assert f"trained with 2 registers, not {n}" in r.output, r.output

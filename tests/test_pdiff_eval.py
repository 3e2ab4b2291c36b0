"""Planned Diffusion as a method of `pasta eval run`: specs, per-token figures, chunk health."""

import json
import math
import subprocess
import sys

import pytest

from solm.core.errors import SolmError
from solm.eval.methods import Method
from solm.eval.summary import chunk_health, speed


def test_pdiff_method_specs_take_knobs_in_a_canonical_order():
    m = Method.parse("pdiff:pd=runs/m,confidence_threshold=0.9,steps_ratio=0.5")
    assert (m.label, m.kind, m.model) == ("pd", "pdiff", "runs/m")
    assert m.options == "steps_ratio=0.5,confidence_threshold=0.9"
    assert m.knobs() == {"steps_ratio": 0.5, "confidence_threshold": 0.9}
    assert Method.parse("pdiff=m,confidence_threshold=off").knobs() == {
        "confidence_threshold": None}
    for bad in ("pdiff=m,steps=2", "pdiff=m,steps_ratio=fast", "apar=m,steps_ratio=0.5",
                "pdiff=m,steps_ratio"):
        with pytest.raises(SolmError):
            Method.parse(bad)


def test_per_token_figures_are_ratios_of_the_same_prompt():
    base = {"a": {"wall_s": 2.0, "content_tokens": 100, "forward_passes": 100},
            "b": {"wall_s": 1.0, "content_tokens": 50, "forward_passes": 50}}
    method = {"a": {"wall_s": 1.0, "content_tokens": 200, "forward_passes": 50,
                    "critical_path": 50},
              "b": {"wall_s": 1.0, "content_tokens": 25, "forward_passes": 50,
                    "critical_path": 50}}
    s = speed(method, base)
    # a: 1 pass/token vs 0.25 -> 4x; b: 1 vs 2 -> 0.5x; geomean sqrt(2)
    assert s["passes_per_token_reduction"]["geomean"] == pytest.approx(math.sqrt(2), abs=1e-4)
    # wall per token: a 0.02 vs 0.005 -> 4x; b 0.02 vs 0.04 -> 0.5x
    assert s["wall_per_token_speedup"]["geomean"] == pytest.approx(math.sqrt(2), abs=1e-4)
    assert s["passes_per_token"]["geomean"] == pytest.approx(math.sqrt(0.25 * 2), abs=1e-4)


def test_chunk_health_counts_pad_only_chunks_and_repeats():
    rows = {"a": {"well_formed": True, "chunk_repeated_ngrams": 0.5, "chunks": [
                {"slots": 10, "pads": 8, "pad_only": False},
                {"slots": 10, "pads": 8, "pad_only": True}]},
            "b": {"well_formed": False, "chunk_repeated_ngrams": None, "chunks": []}}
    h = chunk_health(rows)
    assert h["answers"] == 2 and h["well_formed"] == 0.5 and h["with_chunks"] == 0.5
    assert h["chunks"] == 2 and h["pad_only_share"] == 0.5
    assert h["pad_share_of_slots"] == 1.0 and h["repeated_ngrams"] == 0.5


def test_pasta_eval_runs_pdiff_beside_the_baseline(tmp_path, tiny_folder):
    prompts = tmp_path / "alpaca.jsonl"
    prompts.write_text("\n".join(json.dumps({"instruction": q}) for q in (
        "Name three fruits.", "How do I boil an egg?")) + "\n")
    run_dir = tmp_path / "run"
    import os
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "SOLM_CACHE": str(tmp_path / "cache")}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "solm.cli.main", "pasta", "eval", *args],
                              capture_output=True, text=True, env=env, timeout=600)

    r = cli("run", "-o", str(run_dir), "--prompts", str(prompts),
            "--method", f"sequential={tiny_folder}",
            "--method", f"pdiff:pd={tiny_folder},steps_ratio=0.5", "--max-new-tokens", "24",
            "--dtype", "fp32", "--no-judge", "--no-compile", "-q")
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(x) for x in (run_dir / "outputs" / "pd.jsonl").read_text().splitlines()]
    base = {json.loads(x)["id"]: json.loads(x) for x in
            (run_dir / "outputs" / "sequential.jsonl").read_text().splitlines()}
    assert len(rows) == 2 and all(r["kind"] == "pdiff" and "chunks" in r for r in rows)
    assert all(r["critical_path"] == r["forward_passes"] > 0 for r in rows)
    summary = json.loads((run_dir / "summary.json").read_text())
    pd = summary["methods"]["pd"]
    assert pd["options"] == "steps_ratio=0.5" and pd["chunk_health"]["answers"] == 2
    gains = [(base[r["id"]]["forward_passes"] / max(base[r["id"]]["content_tokens"], 1))
             / (r["forward_passes"] / max(r["content_tokens"], 1)) for r in rows]
    assert pd["speed"]["passes_per_token_reduction"]["geomean"] == pytest.approx(
        math.prod(gains) ** (1 / len(gains)), rel=1e-3)
    rep = cli("report", str(run_dir), "-o", str(tmp_path / "report"))
    assert rep.returncode == 0, rep.stderr[-3000:]
    text = (tmp_path / "report" / "report.md").read_text()
    assert "| pd `steps_ratio=0.5` |" in text and "pad-only" in text
    assert (tmp_path / "report" / "winrate_vs_passes_per_token_reduction.png").exists()
    # the content column: the method's mean content over the baseline's, recounted from rows
    ratio = (sum(r["content_tokens"] for r in rows)
             / sum(b["content_tokens"] for b in base.values()))
    row = next(line for line in text.splitlines() if line.startswith("| pd `"))
    assert f"| {ratio:.2f}x |" in row
    assert (tmp_path / "report" / "content_vs_passes_per_token_reduction.png").exists()


@pytest.mark.slow
def test_a_first_pdiff_decode_shows_diffusion(tmp_path):
    """The built-in prompts (and 2 of 2 AlpacaEval prompts tried) planned no chunk,
    so a first `pdiff decode` never showed diffusion. With its defaults, the kept model plans
    chunks on the built-in prompts and they are denoised."""
    from typer.testing import CliRunner

    from solm.cli import pdiff

    out = tmp_path / "first.jsonl"
    r = CliRunner().invoke(pdiff.app, ["decode", "-m", "pdiff-cpu", "-o", str(out), "-q"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 3
    planned = [row for row in rows if row["chunks"]]
    assert len(planned) >= 2, [row["response"][:60] for row in rows]
    assert all(row["denoise_passes"] > 0 for row in planned)


def test_content_against_the_baseline_is_each_methods_mean_over_the_baselines(tmp_path):
    from solm.eval.report import plot_content, points

    def method(content, baseline=False, well=None, gain=None):
        return {"baseline": baseline, "kind": "pdiff", "model": "m",
                "chunk_health": {"well_formed": well} if well is not None else None,
                "speed": {"content_tokens_mean": content,
                          "passes_per_token_reduction": {"geomean": gain}}}

    summaries = [{"run": "runs/a", "methods": {"pd": method(150.0, well=0.9, gain=1.3),
                                               "base": method(200.0, baseline=True)}},
                 {"run": "runs/b", "methods": {"base": method(80.0, baseline=True),
                                               "pd": method(100.0, gain=0.9)}}]
    pts = {p["name"]: p for p in points(summaries)}
    # each run's method against that run's own baseline, whatever the order they come in
    assert pts["a/pd"]["content_ratio"] == pytest.approx(150 / 200)
    assert pts["b/pd"]["content_ratio"] == pytest.approx(100 / 80)
    assert pts["a/base"]["content_ratio"] == 1.0 and pts["a/pd"]["well_formed"] == 0.9
    png = tmp_path / "content.png"
    plot_content(list(pts.values()), png)
    assert png.stat().st_size > 1000

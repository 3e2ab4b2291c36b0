"""`--compare` says what it measured and when it cannot be read as a speedup; decode
defaults come from a model's generation_config.json unless a flag overrides them."""

import json

import pytest
from typer.testing import CliRunner

from solm.core.generation import model_generation_defaults, resolve_decode
from solm.decode.compare import compare_lines, compare_report, is_degenerate, steps_phrase


@pytest.mark.parametrize("text,degenerate", [
    ("1.  \n2. 1.  2. ", True), ("", True), ("- \n- \n* ", True), ("1. 2. 3. 4. a", True),
    ("Paris.", False), ("1. Sleep eight hours.\n2. Eat greens.", False),
    ("Drink water, walk daily and sleep well.", False)])
def test_degenerate_answers_are_mostly_tags_and_list_markers(text, degenerate):
    assert is_degenerate(text) == degenerate


def test_mostly_tags_is_degenerate():
    assert is_degenerate("Eat greens.", content_tokens=4, total_tokens=20)
    assert not is_degenerate("Eat greens.", content_tokens=4, total_tokens=6)


def test_steps_are_worded_the_right_way_round():
    assert steps_phrase(150, 100) == "1.50x fewer steps than one token per step"
    assert steps_phrase(14, 21).startswith("1.50x more steps")
    assert steps_phrase(8, 8) == "one token per step, as sequential decoding"
    assert steps_phrase(3, 4, tags=False) == "1.33x more steps than one token per step"


def row(tokens, wall, response="Sleep eight hours every night.", total=None, passes=None):
    return {"content_tokens": tokens, "wall_s": wall, "response": response,
            "total_tokens": total or tokens, "forward_passes": passes or tokens}


def test_compare_reports_latency_and_rates_and_warns():
    par = row(15, 0.5, "1.  \n2. 1.  2. ", total=30, passes=21)
    seq = row(280, 9.25)
    r = compare_report(par, seq)
    assert r["latency_ratio"] == pytest.approx(18.5)
    assert r["parallel_content_tokens_per_s"] == pytest.approx(30.0)
    assert r["sequential_content_tokens_per_s"] == pytest.approx(280 / 9.25)
    assert r["content_rate_ratio"] == pytest.approx(30.0 / (280 / 9.25))
    assert len(r["warnings"]) == 2
    text = "\n".join(compare_lines(par, seq))
    assert "latency ratio (sequential wall time / parallel wall time): 18.50x" in text
    assert "content tokens/s ratio (parallel / sequential): 0.99x" in text
    assert "differ in length by more than 2x (15 vs 280" in text
    assert "parallel answer is degenerate" in text
    similar = compare_report(row(100, 1.0), row(120, 2.0))
    assert similar["warnings"] == [] and similar["latency_ratio"] == pytest.approx(2.0)


def test_decode_compare_prints_both_decodes_labelled(tiny_folder):
    from solm.cli import pasta

    r = CliRunner().invoke(pasta.app, ["decode", "Name three fruits.", "-m", tiny_folder,
                                       "--compare", "--max-new-tokens", "8", "--dtype",
                                       "fp32", "--no-compile"])
    assert r.exit_code == 0, r.output
    for label in ("  parallel:", "sequential:", "latency ratio (sequential wall time",
                  "content tokens/s ratio (parallel / sequential)"):
        assert label in r.output
    assert "x fewer steps" in r.output or "one token per step" in r.output or \
        "x more steps" in r.output


def write_config(folder, **fields):
    (folder / "generation_config.json").write_text(json.dumps(fields))


def test_generation_config_defaults_follow_the_hugging_face_convention(tmp_path):
    write_config(tmp_path, repetition_penalty=1.3, no_repeat_ngram_size=4, temperature=0.7,
                 top_p=0.9)
    # do_sample absent: greedy, so temperature and top_p do not apply
    assert model_generation_defaults(str(tmp_path)) == {"repetition_penalty": 1.3,
                                                        "no_repeat_ngram": 4}
    write_config(tmp_path, do_sample=True, top_p=0.9)
    assert model_generation_defaults(str(tmp_path)) == {"top_p": 0.9, "temperature": 1.0}
    d = resolve_decode(str(tmp_path), {"temperature": 0.0, "top_p": None,
                                       "repetition_penalty": None, "no_repeat_ngram": 2})
    assert d.values == {"temperature": 0.0, "top_p": 0.9, "repetition_penalty": 1.0,
                        "no_repeat_ngram": 2}
    assert d.sources == {"temperature": "flag", "top_p": "model",
                         "repetition_penalty": "default", "no_repeat_ngram": "flag"}
    assert "top_p 0.9 (generation_config.json)" in d.describe()


def test_kept_models_ship_their_repetition_penalty():
    for name in ("pasta-sft-cpu", "baseline-sft-cpu"):
        assert model_generation_defaults(name) == {"repetition_penalty": 1.2}
    assert model_generation_defaults("smollm2-135m") == {}


def test_decode_uses_the_models_defaults_and_says_so(tiny_folder, tmp_path):
    import shutil

    from solm.cli import pasta

    folder = tmp_path / "m"
    shutil.copytree(tiny_folder, folder)
    write_config(folder, repetition_penalty=1.25)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "a", "prompt": "hi"}) + "\n")
    out = tmp_path / "o.jsonl"
    r = CliRunner().invoke(pasta.app, ["decode", "-p", str(prompts), "-o", str(out), "-m",
                                       str(folder), "--max-new-tokens", "4", "--no-compile"])
    assert r.exit_code == 0, r.output
    assert "repetition_penalty 1.25 (generation_config.json)" in r.output
    manifest = json.loads((tmp_path / "o.jsonl.manifest.json").read_text())
    assert manifest["row_settings"]["repetition_penalty"] == 1.25
    r = CliRunner().invoke(pasta.app, ["decode", "-p", str(prompts), "-o",
                                       str(tmp_path / "o2.jsonl"), "-m", str(folder),
                                       "--max-new-tokens", "4", "--repetition-penalty", "1.0",
                                       "--no-compile"])
    assert "repetition_penalty 1 (flag)" in r.output


@pytest.mark.slow
def test_quiet_hides_the_libraries_deprecation_warnings():
    """Loading a kept LoRA model makes transformers warn (FutureWarning) about an API it
    deprecated: noise for a user, hidden under --quiet."""
    import os
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "solm.cli.main", "pasta", "decode", "Hi", "-m",
                        "pasta-sft-cpu", "--max-new-tokens", "2", "-q"], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Warning" not in r.stderr, r.stderr[-2000:]


def test_every_command_that_picks_an_engine_defaults_to_auto():
    """One engine default: whatever command a user runs (decode, eval, bench, serve, demo,
    prefs, distill), it decodes on the engine measured fastest here unless told otherwise;
    `check-engines` compares llama.cpp against the reference, so it names one."""
    from cli_walk import commands

    defaults = {" ".join(path): p.default for path, cmd in commands() for p in cmd.params
                if p.name == "engine"}
    assert len(defaults) >= 15
    assert {k: v for k, v in defaults.items() if v != "auto"} == {"check-engines": "llama.cpp"}

"""A batch decode that could not answer some inputs says how many in its last line, records
the refused ids in its manifest, keeps what it wrote and exits non-zero; a prompt the model's
context cannot hold is refused before any work, naming file, line and field; an unknown
model name fails at once offline; an empty prompt is refused."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

runner = CliRunner()


def write_prompts(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def decode(tiny_folder, prompts, out, *extra):
    from solm.cli import pasta

    return runner.invoke(pasta.app, ["decode", "-m", tiny_folder, "-p", str(prompts), "-o",
                                     str(out), "--mode", "sequential", "--engine", "torch",
                                     "--max-new-tokens", "4", "--no-compile", *extra])


def test_refused_prompts_fail_the_run_and_keep_the_answers(tmp_path, tiny_folder):
    prompts, out = tmp_path / "p.jsonl", tmp_path / "out.jsonl"
    long = " ".join(["word"] * 300)  # more than the pool (64 x a batch of 3)
    write_prompts(prompts, [{"id": "short", "prompt": "Hi."}, {"id": "big", "prompt": long},
                            {"id": "also", "prompt": "Name a colour."}])
    r = decode(tiny_folder, prompts, out, "--pool-size", "64")
    assert r.exit_code == 1, r.output
    last = [line for line in r.output.splitlines() if line.strip()][-1]
    assert "1 of 3 decodes refused" in r.output and "'big'" in r.output
    assert "error" in last or "refused" in " ".join(r.output.splitlines()[-3:])
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted(x["id"] for x in rows) == ["also", "short"]
    manifest = json.loads(out.with_name(out.name + ".manifest.json").read_text())
    assert manifest["refused_ids"] == ["big"]
    assert [x["id"] for x in manifest["summary"]["refused"]] == ["big"]
    # a rerun with a pool that holds it decodes just the refused prompt and exits 0
    r = decode(tiny_folder, prompts, out, "--pool-size", "1024")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["refused"] == [] and summary["done"] == 1 and summary["skipped"] == 2
    assert sorted(json.loads(x)["id"] for x in out.read_text().splitlines()) == [
        "also", "big", "short"]


def test_a_prompt_longer_than_the_context_is_refused_before_any_work(tmp_path, pasta_tokenizer):
    from solm.cli import pasta
    from solm.core.models import tiny_model
    from steered_models import save_model

    model, tok = tiny_model(pasta_tokenizer, seed=2, max_position_embeddings=96)
    save_model(model, tok, tmp_path / "m")
    prompts, out = tmp_path / "p.jsonl", tmp_path / "out.jsonl"
    write_prompts(prompts, [{"id": "ok", "prompt": "Hi."},
                            {"id": "huge", "instruction": " ".join(["word"] * 200)}])
    r = runner.invoke(pasta.app, ["decode", "-m", str(tmp_path / "m"), "-p", str(prompts),
                                  "-o", str(out), "--mode", "sequential", "--engine", "torch",
                                  "--max-new-tokens", "4", "--no-compile"])
    assert r.exit_code == 1
    assert f"{prompts}:2 [field 'instruction']" in r.output
    assert "context holds 96" in r.output and "Traceback" not in r.output
    assert not out.exists() or out.read_text() == ""  # refused before the first decode


@pytest.mark.parametrize("length,fits", [(95, False), (96, False), (94, True)])
def test_the_context_check_leaves_room_for_one_answer_token(pasta_tokenizer, length, fits):
    from solm.core.chat import check_prompt_fits
    from solm.core.errors import DataError
    from solm.core.records import Record

    tok = pasta_tokenizer
    saved = tok.model_max_length
    try:
        tok.model_max_length = 95
        if fits:
            check_prompt_fits(tok, [1] * length, Record("r", "x"))
        else:
            with pytest.raises(DataError, match="context holds 95"):
                check_prompt_fits(tok, [1] * length, Record("r", "x"))
    finally:
        tok.model_max_length = saved


def test_an_unknown_model_name_fails_at_once_naming_the_kept_models(monkeypatch):
    from solm.core.errors import SolmError
    from solm.core.models import ARTIFACTS, resolve_model_path

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SolmError) as e:
        resolve_model_path("no-such-org/no-such-model")
    assert "HF_HUB_OFFLINE" in str(e.value) and all(name in str(e.value) for name in ARTIFACTS)
    with pytest.raises(SolmError, match="no such file or folder"):
        resolve_model_path("./runs/missing-model")
    # unreachable hub without the variable: decided by the connection probe
    monkeypatch.delenv("HF_HUB_OFFLINE")
    import solm.core.models as models

    monkeypatch.setattr(models, "_hub_reachable", lambda timeout=3.0: False)
    with pytest.raises(SolmError, match="cannot be reached"):
        resolve_model_path("no-such-org/no-such-model")
    monkeypatch.setattr(models, "_hub_reachable", lambda timeout=3.0: True)
    assert resolve_model_path("no-such-org/no-such-model") == "no-such-org/no-such-model"


def test_an_empty_prompt_argument_is_refused(tiny_folder):
    from solm.cli import pasta

    r = runner.invoke(pasta.app, ["decode", "  ", "-m", tiny_folder, "--engine", "torch"])
    assert r.exit_code == 1 and "empty" in r.output


def test_the_torch_engine_says_it_ran(tmp_path, tiny_folder):
    prompts, out = tmp_path / "p.jsonl", tmp_path / "out.jsonl"
    write_prompts(prompts, [{"id": "a", "prompt": "Hi."}])
    r = decode(tiny_folder, prompts, out, "--dtype", "fp32")
    assert r.exit_code == 0, r.output
    assert "engine torch: float32 weights on cpu" in r.output


@pytest.mark.parametrize("engine", ["onnxruntime", "llama.cpp"])
def test_every_engine_says_it_ran_and_with_which_weights(tmp_path, tiny_folder, engine,
                                                         monkeypatch):
    from solm.cli import pasta

    monkeypatch.setenv("SOLM_CACHE", str(tmp_path / "cache"))
    prompts, out = tmp_path / "p.jsonl", tmp_path / "out.jsonl"
    write_prompts(prompts, [{"id": "a", "prompt": "Hi."}])
    r = runner.invoke(pasta.app, ["decode", "-m", tiny_folder, "-p", str(prompts), "-o",
                                  str(out), "--mode", "sequential", "--engine", engine,
                                  "--max-new-tokens", "4"])
    assert r.exit_code == 0, r.output
    assert f"engine {engine}: " in r.output and " weights" in r.output

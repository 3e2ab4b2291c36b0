"""The engine seam (`solm.engines`): engine names are the registry's business. Every decode
path asks its engine (`Engine.step`, `torch_step`, `applies`...) instead of comparing names."""

import re
from pathlib import Path

import pytest

from solm.core.errors import SolmError
from solm.engines import AUTO, ENGINE_CHOICES, ENGINES, REFERENCE, choose

ROOT = Path(__file__).resolve().parents[1] / "solm"
NAME_TEST = re.compile(r"""(==|!=)\s*["'](%s)["']|["'](%s)["']\s*(==|!=)|in\s*\(\s*["'](%s)["']"""
                       % (("|".join(re.escape(n) for n in ENGINES),) * 3))


def comparisons_outside_the_registry() -> list[str]:
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.parent.name == "engines":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if NAME_TEST.search(line):
                out.append(f"{path.relative_to(ROOT.parent)}:{n}: {line.strip()}")
    return out


def test_no_engine_name_is_compared_outside_the_registry():
    found = comparisons_outside_the_registry()
    assert not found, ("an engine name compared outside solm/engines (ask the engine "
                       "instead):\n" + "\n".join(found))


def test_the_name_finder_finds_the_comparisons_it_forbids():
    """The finder itself, on lines written the ways a comparison is written."""
    for line in ('if engine == "llama.cpp":', "x = e != 'torch'", 'if "torch" == name:',
                 'if choice in ("llama.cpp", "auto"):'):
        assert NAME_TEST.search(line), line
    for line in ('engine = "llama.cpp"', 'ENGINES["torch"]', "if engine.torch_step:"):
        assert not NAME_TEST.search(line), line


def test_every_engine_option_offers_the_registrys_engines():
    """The decode systems' `engine` setting and the commands' `--engine` option take their
    choices from the registry: every engine registered, and auto."""
    import dataclasses

    from typer.testing import CliRunner

    from solm.cli import main as solm_main
    from solm.decode.registry import EngineChoice

    field = next(f for f in dataclasses.fields(EngineChoice) if f.name == "engine")
    assert set(field.metadata["choices"]) == set(ENGINES) | {AUTO}
    r = CliRunner().invoke(solm_main.app, ["pasta", "decode", "--engine", "nope", "-p", "x"])
    assert r.exit_code != 0
    assert all(name in r.output for name in ENGINES)


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_an_explicit_engine_that_refuses_is_a_one_line_error(name, monkeypatch):
    engine = ENGINES[name]
    monkeypatch.setattr(engine, "unavailable", lambda: None)
    monkeypatch.setattr(engine, "refusal", lambda system, **facts: f"no {system} here")
    with pytest.raises(SolmError, match=f"--engine {re.escape(name)}: no pasta here"):
        choose(name, "pasta")
    others = [n for n in ENGINES if n != name]
    for other in others:
        monkeypatch.setattr(ENGINES[other], "unavailable", lambda: None)
        monkeypatch.setattr(ENGINES[other], "refusal", lambda system, **facts: None)
    assert choose(AUTO, "pasta") == others[0]  # auto passes over the refusing engine


def test_llama_cpp_refuses_what_its_cache_cannot_express():
    """TIP's H2O (it drops single tokens, not pages) is refused on llama.cpp, dense is not;
    torch refuses nothing."""
    from solm.decode.tip.policies import make_policy

    llama, torch_engine = ENGINES["llama.cpp"], ENGINES["torch"]
    assert llama.refusal("tip", policy=make_policy("h2o", 256, 16))
    assert llama.refusal("tip", policy=make_policy("dense", None, 16)) is None
    assert torch_engine.refusal("tip", policy=make_policy("h2o", 256, 16)) is None


# ---- `--engine auto` from what `solm bench step` measured ---------------------------------

def _measured(tmp_path, monkeypatch, costs: dict[str, dict[int, float]], tpp: float | None,
              model: str = "smollm2-135m", fed: float | None = None):
    """A cache holding `bench step` figures ({engine: {k: ms}}) for this CPU and `model`, and
    (if given) the content tokens per pass a PASTA parallel decode of `model` measured, with
    `fed` tokens fed per pass (default: as many)."""
    from solm.engines.bandwidth import cpu_description
    from solm.decode.pasta.config import PastaDecodeConfig
    from solm.engines.cost import record_step_costs, record_tokens_per_pass

    monkeypatch.setenv("SOLM_CACHE", str(tmp_path / "cache"))
    for engine in ENGINES.values():
        monkeypatch.setattr(engine, "unavailable", lambda: None)
        monkeypatch.setattr(engine, "refusal", lambda system, **facts: None)
    record_step_costs({"cpu": cpu_description(), "model": model, "engines": [
        {"engine": e, "variant": "v", "ms": {str(k): v for k, v in ms.items()}}
        for e, ms in costs.items()]})
    if tpp is not None:
        passes = 100
        fed_total = round((fed or tpp) * passes)
        record_tokens_per_pass(model, "pasta", PastaDecodeConfig(mode="parallel"),
                               [{"content_tokens": round(tpp * passes) - 7,
                                 "generated_tokens": fed_total - 9,
                                 "forward_passes": passes // 2},
                                {"content_tokens": 7, "generated_tokens": 9,
                                 "forward_passes": passes // 2}])


def test_a_pass_of_k_tokens_costs_the_measured_line_between_ks():
    import numpy as np

    from solm.engines.cost import pass_ms

    ms = {"1": 10.0, "2": 16.0, "4": 30.0, "8": 50.0}
    for k in (1, 1.5, 2, 3.25, 4, 7.9, 8):
        assert pass_ms(ms, k) == pytest.approx(np.interp(k, [1, 2, 4, 8], [10, 16, 30, 50]))
    assert pass_ms(ms, 12) == pytest.approx(50 + 5 * 4)  # the last slope, carried on
    assert [pass_ms({"4": 7.0}, k) for k in (1, 4, 9.5)] == [7.0] * 3  # one k: flat


@pytest.mark.parametrize("tpp,fed", [(1.0, 1.0), (3.0, 3.0), (1.0, 3.0)])
def test_auto_takes_the_engine_whose_passes_buy_the_most_tokens_per_second(
        tmp_path, monkeypatch, tpp, fed):
    """llama.cpp: 10 ms for one token, 40 for four (linear); torch: 25 ms flat. One token a
    pass: llama.cpp writes 1/10 a ms against torch's 1/25. Three a pass: llama.cpp 3/30,
    torch 3/25: torch. One content token in passes that feed three (tags, block openers):
    a pass costs a 3-token pass, llama.cpp 1/30 against torch's 1/25: torch. Sequential
    decodes of the same model still go to llama.cpp."""
    from solm.decode.pasta.config import PastaDecodeConfig

    names = list(ENGINES)
    llama, reference = [n for n in names if n != REFERENCE][0], REFERENCE
    _measured(tmp_path, monkeypatch, {llama: {1: 10, 2: 20, 4: 40},
                                      reference: {1: 25, 2: 25, 4: 25}}, tpp, fed=fed)
    rates = {llama: tpp / (10 * fed), reference: tpp / 25}
    expected = max(rates, key=rates.get)
    assert choose(AUTO, "pasta", config=PastaDecodeConfig(mode="parallel"),
                  model="smollm2-135m") == expected
    assert choose(AUTO, "pasta", config=PastaDecodeConfig(mode="sequential"),
                  model="smollm2-135m") == llama


def test_auto_without_a_measurement_here_keeps_the_registrys_order(tmp_path, monkeypatch):
    from solm.decode.pasta.config import PastaDecodeConfig

    llama = [n for n in ENGINES if n != REFERENCE][0]
    # measured for another model only: this one's passes are not known
    _measured(tmp_path, monkeypatch, {llama: {1: 90}, REFERENCE: {1: 10}}, None,
              model="some/other-model")
    assert choose(AUTO, "pasta", config=PastaDecodeConfig(mode="parallel"),
                  model="smollm2-135m") == next(iter(ENGINES))


def test_an_adapter_is_timed_by_its_parents_measurement(tmp_path, monkeypatch):
    """A LoRA adapter's passes cost its parent's: the parent's figures decide."""
    from solm.engines.cost import base_model

    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "adapter_config.json").write_text('{"base_model_name_or_path": "x"}')
    (folder / "solm.json").write_text('{"parent_model": "smollm2-135m"}')
    assert base_model(str(folder)) == "smollm2-135m"
    assert base_model("smollm2-135m") == "smollm2-135m"


def test_a_model_folder_is_timed_under_its_absolute_path_whatever_spelling(tmp_path,
                                                                           monkeypatch):
    """`./m`, `m/` and `/abs/m` name one folder, so one record; a name that is no folder
    (a hub id) is kept as written."""
    from solm.engines.cost import base_model

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    absolute = str((tmp_path / "m").resolve())
    assert base_model("m") == base_model("./m/") == base_model(absolute) == absolute
    assert base_model("some-org/some-model") == "some-org/some-model"


def test_a_kept_difference_is_timed_by_its_bases_measurement(tmp_path, monkeypatch):
    """A full finetune kept as its difference from the base has the base's shapes: the
    base's figures decide (the unpacked folder itself was never measured)."""
    from solm.core import models
    from solm.engines.cost import base_model

    kept = tmp_path / "kept" / "some-kept"
    kept.mkdir(parents=True)
    (kept / "delta.json").write_text('{"base": "smollm2-135m", "rank": 2}')
    monkeypatch.setattr(models, "ARTIFACTS_DIR", tmp_path / "kept")
    monkeypatch.setitem(models.ARTIFACTS, "some-kept", "a test model")
    assert base_model("some-kept") == "smollm2-135m"
    assert base_model(str(kept)) == "smollm2-135m"
    assert base_model(str(tmp_path)) == str(tmp_path.resolve())  # a plain folder: itself


def test_a_finished_decode_keeps_its_tokens_per_pass_for_auto(tmp_path, tiny_folder,
                                                              monkeypatch):
    import json

    from typer.testing import CliRunner

    from solm.cli import pasta

    monkeypatch.setenv("SOLM_CACHE", str(tmp_path / "cache"))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": str(i), "prompt": f"Say {i}"}) + "\n"
                               for i in range(3)))
    out = tmp_path / "out.jsonl"
    r = CliRunner().invoke(pasta.app, ["decode", "-p", str(prompts), "-o", str(out), "-m",
                                       tiny_folder, "--max-new-tokens", "5", "-q"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    kept = json.loads((tmp_path / "cache" / "tokens_per_pass.json").read_text())
    passes = sum(r["forward_passes"] for r in rows)
    assert kept[tiny_folder]["pasta:parallel"] == pytest.approx(
        {"content": sum(r["content_tokens"] for r in rows) / passes,
         "fed": sum(r["tokens_fed"] for r in rows) / passes}, abs=1e-4)

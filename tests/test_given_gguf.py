"""A GGUF file given as the model runs on llama.cpp as it is (its own weight and KV types),
or is refused with the reason; nothing is converted unless asked (`solm export gguf`)."""

from __future__ import annotations

import json

import gguf
import pytest
from typer.testing import CliRunner

from steered_models import save_model

runner = CliRunner()
TEXTS = ["Give three tips for staying healthy.", "What is 2 + 2?", "Describe a cat.",
         "Name a prime number."]


def file_type(path) -> int:
    return int(gguf.GGUFReader(str(path)).fields["general.file_type"].contents())


@pytest.fixture(scope="module")
def tiny_ggufs(tmp_path_factory, pasta_tokenizer):
    """A tiny random llama with PASTA's tokens written as f32 and as f16 GGUFs, its folder,
    and the same model without control tokens as f32."""
    from solm.core.models import load_tokenizer, tiny_model
    from solm.engines.llamacpp.export import write_gguf

    root = tmp_path_factory.mktemp("given")
    model, tok = tiny_model(pasta_tokenizer, seed=3, hidden_size=64, num_layers=2)
    save_model(model, tok, root / "folder")
    for outtype in ("f32", "f16"):
        write_gguf(model, tok, root / f"tiny.{outtype}.gguf", outtype,
                   meta={"system": "pasta", "control_tokens": "pasta"})
    plain_tok = load_tokenizer("smollm2-135m")
    plain, _ = tiny_model(plain_tok, seed=3, hidden_size=64, num_layers=2)
    write_gguf(plain, plain_tok, root / "plain.f32.gguf", "f32")
    return root


def decode(tmp_path, model, engine, *extra):
    from solm.cli import pasta

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": str(i), "prompt": t}) + "\n"
                               for i, t in enumerate(TEXTS)))
    out = tmp_path / f"{engine}-{len(list(tmp_path.glob('*.jsonl')))}.jsonl"
    r = runner.invoke(pasta.app, ["decode", "-m", str(model), "-p", str(prompts), "-o",
                                  str(out), "--mode", "sequential", "--engine", engine,
                                  "--temperature", "0", "--max-new-tokens", "12",
                                  "--dtype", "fp32", *extra])
    return r, out


def test_a_given_f32_gguf_runs_as_it_is_and_equals_torch(tmp_path, tiny_ggufs, monkeypatch):
    monkeypatch.setenv("SOLM_CACHE", str(tmp_path / "cache"))
    given = tiny_ggufs / "tiny.f32.gguf"
    r, out = decode(tmp_path, given, "llama.cpp")
    assert r.exit_code == 0, r.output
    assert "as given (f32 weights, F32 KV cache)" in r.output
    manifest = json.loads(out.with_name(out.name + ".manifest.json").read_text())
    assert manifest["settings"]["gguf_type"] == "f32"
    assert manifest["speed"]["gguf"] == str(given.resolve())
    assert not list((tmp_path / "cache").rglob("*.gguf"))  # nothing exported
    ours = {x["id"]: x["response"] for x in map(json.loads, open(out))}
    r, ref = decode(tmp_path, tiny_ggufs / "folder", "torch")
    assert r.exit_code == 0, r.output
    assert ours == {x["id"]: x["response"] for x in map(json.loads, open(ref))}


def test_a_given_gguf_keeps_its_own_type_under_the_default_gguf_type(tmp_path, tiny_ggufs,
                                                                       monkeypatch):
    from solm.engines.llamacpp.given import FILE_TYPES, given_gguf

    monkeypatch.setenv("SOLM_CACHE", str(tmp_path / "cache"))
    given = tiny_ggufs / "tiny.f16.gguf"
    assert FILE_TYPES[file_type(given)] == "f16"
    assert given_gguf(str(given), "q8_0", "pasta") == "f16"  # the default does not convert
    assert given_gguf(str(given), "f16", "pasta") == "f16"
    r, out = decode(tmp_path, given, "llama.cpp")
    assert r.exit_code == 0, r.output
    assert "as given (f16 weights, F16 KV cache)" in r.output
    assert json.loads(out.with_name(out.name + ".manifest.json").read_text()
                      )["settings"]["gguf_type"] == "f16"
    assert not list((tmp_path / "cache").rglob("*.gguf"))


def test_a_given_gguf_is_refused_in_one_line_rather_than_converted(tmp_path, tiny_ggufs,
                                                                    monkeypatch):
    monkeypatch.setenv("SOLM_CACHE", str(tmp_path / "cache"))
    r, out = decode(tmp_path, tiny_ggufs / "tiny.f16.gguf", "llama.cpp", "--gguf-type", "f32")
    assert r.exit_code == 1 and "holds f16 weights" in r.output and "solm export gguf" \
        in r.output and "Traceback" not in r.output
    r, out = decode(tmp_path, tiny_ggufs / "plain.f32.gguf", "llama.cpp")
    assert r.exit_code == 1 and "control tokens" in r.output and "--engine torch" in r.output
    assert not out.exists() and not list((tmp_path / "cache").rglob("*.gguf"))


def test_auto_passes_over_llama_cpp_for_a_gguf_it_cannot_run_as_given(tiny_ggufs):
    from solm.decode.pasta.runtime import PastaDecodeConfig
    from solm.decode.pasta.system import PastaEngine
    from solm.engines import choose

    settings = PastaEngine(engine="auto")
    plain = str(tiny_ggufs / "plain.f32.gguf")
    assert choose("auto", "pasta", config=PastaDecodeConfig(mode="sequential"),
                  settings=settings, model=plain) != "llama.cpp"
    settings = PastaEngine(engine="llama.cpp")
    assert choose("llama.cpp", "pasta", config=PastaDecodeConfig(mode="sequential"),
                  settings=settings, model=str(tiny_ggufs / "tiny.f16.gguf")) == "llama.cpp"
    assert settings.gguf_type == "f16"

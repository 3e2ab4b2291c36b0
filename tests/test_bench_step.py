"""`solm bench step`: the pass-cost probes compute real k-sequence passes, the figures are
medians and ratios of what was timed, and the command writes them."""

import json
import time
from pathlib import Path
import statistics

import pytest
import torch

from solm.engines import ENGINES
from solm.engines.probe import FIRST_ID, context_ids
from solm.engines.torch.engine import TorchProbe
from solm.eval.step_cost import floor_ms, measure


class Scripted:
    """A probe whose passes take scripted times: k=1 passes 1,2,3,... ms, k=2 passes 10x."""

    engine, variant, weight_bytes = "fake", "x", 4_000_000

    def __init__(self):
        self.prepared, self.calls, self.closed = None, [], False

    def prepare(self, k_max, context):
        self.prepared = (k_max, context)

    def one_pass(self, k):
        self.calls.append(k)
        return (len([c for c in self.calls if c == k]) * (10 if k == 2 else 1)) / 1000

    def close(self):
        self.closed = True


def test_measure_takes_the_median_after_a_warm_up_and_ratios_to_one_token():
    probe = Scripted()
    cost = measure(probe, [1, 2], context=8, repeats=4)
    assert probe.prepared == (2, 8) and probe.closed
    assert probe.calls == [1] * 5 + [2] * 5  # one untimed warm-up per k
    assert cost.ms[1] == pytest.approx(statistics.median([2, 3, 4, 5]))  # the warm-up (1) left out
    assert cost.ms[2] == pytest.approx(10 * statistics.median([2, 3, 4, 5]))
    assert cost.times_one() == {1: 1.0, 2: 10.0}
    d = cost.to_dict(bandwidth=2e9)
    assert d["floor_ms"] == pytest.approx(4_000_000 / 2e9 * 1000, abs=1e-3) == floor_ms(4e6, 2e9)


def hf_last_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, -1].float()


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_every_engines_probe_runs_k_sequences_on_one_context(name, tiny_folder, tmp_path,
                                                             monkeypatch):
    """One body over the engine registry: in each engine's exact format, every token of a
    timed pass gets the logits its own sequence (the shared context, then the token) gets
    from the Hugging Face forward, pass after pass (the cache is left as it was): no token
    reads another's."""
    from solm.core.models import load_decoder

    engine = ENGINES[name]
    if engine.unavailable():
        pytest.skip(engine.unavailable())
    monkeypatch.setenv("SOLM_CACHE", str(tmp_path / "cache"))
    probes = engine.probes(tiny_folder, [engine.exact_format])  # llama.cpp: flash off, on
    assert len({p.variant for p in probes}) == len(probes) >= 1
    model, _ = load_decoder(tiny_folder, dtype="fp32", device="cpu", system="pasta")
    for probe in probes:
        probe.prepare(k_max=4, context=6)
        for k in (1, 4, 4):
            started = time.perf_counter()
            seconds = probe.one_pass(k)
            assert 0 < seconds <= time.perf_counter() - started  # the pass's own time
            assert probe.logits.shape[0] == k
            for s in range(k):
                want = hf_last_logits(model, context_ids(0, 6) + [FIRST_ID + s])
                assert (probe.logits[s].float() - want).abs().max() < 1e-3, \
                    (name, probe.variant, k, s)
        probe.close()


def test_a_torch_probe_sequence_reads_only_its_own_keys(pasta_tokenizer):
    from solm.core.models import tiny_model

    model, _ = tiny_model(pasta_tokenizer, seed=5)
    probe = TorchProbe(model)
    probe.prepare(k_max=3, context=6)
    seen = []
    segments = probe.step.segments
    probe.step.segments = lambda index, reads: seen.append(reads) or segments(index, reads)
    probe.one_pass(3)
    assert [sum(b - a for a, b in ranges) for _, ranges in seen[-1]] == [7] * 3
    probe.close()


def test_bench_step_writes_its_figures_and_plot(tmp_path, tiny_folder, monkeypatch):
    from typer.testing import CliRunner

    from solm.cli import main as solm_main

    from solm.engines.torch.engine import TorchProbe

    monkeypatch.setenv("SOLM_CACHE", str(tmp_path / "cache"))
    # the real pass runs, its clock is scripted: a busy machine's timings would flag the row
    # (a wider pass cheaper than a narrower one) and keep nothing for `auto`
    real_pass = TorchProbe.one_pass
    monkeypatch.setattr(TorchProbe, "one_pass",
                        lambda self, k: real_pass(self, k) * 0 + 0.001 * (1 + k))

    out, plot = tmp_path / "cost.json", tmp_path / "cost.png"
    r = CliRunner().invoke(solm_main.app, [
        "bench", "step", "-m", tiny_folder, "--engines", "torch", "--ks", "2,1",
        "--context", "4", "--repeats", "2", "--bandwidth-gbps", "5", "-o", str(out),
        "--plot", str(plot)])
    assert r.exit_code == 0, r.output
    got = json.loads(out.read_text())
    assert got["ks"] == [1, 2] and got["bandwidth_gbps"] == 5.0 and got["cpu"].strip()
    (e,) = got["engines"]
    assert e["engine"] == "torch" and e["times_one"]["1"] == 1.0
    assert e["ms"] == {"1": 2.0, "2": 3.0} and e["times_one"]["2"] == 1.5 and not e["flags"]
    assert e["floor_ms"] == pytest.approx(e["weight_mb"] * 2**20 / 5e9 * 1000, rel=1e-2)
    assert plot.stat().st_size > 1000
    # kept for `--engine auto`, under this CPU and the model
    kept = json.loads((tmp_path / "cache" / "step_cost.json").read_text())
    assert kept[got["cpu"]][str(Path(tiny_folder).resolve())] == got
    bad = CliRunner().invoke(solm_main.app, ["bench", "step", "-m", tiny_folder, "--ks", "0,2"])
    assert bad.exit_code != 0 and "--ks" in bad.output


def test_an_engine_not_installed_is_skipped_with_why(tiny_folder, monkeypatch):
    """llama-cpp-python missing: the registry's llama.cpp says so, `bench step` times the
    others and reports it skipped, and with nothing else asked exits in one line."""
    from typer.testing import CliRunner

    import solm.engines.llamacpp.binding as binding
    from solm.cli import main as solm_main

    monkeypatch.setattr(binding, "llama_cpp_available", lambda: False)
    assert "not installed" in ENGINES["llama.cpp"].unavailable()
    assert ENGINES["torch"].unavailable() is None
    r = CliRunner().invoke(solm_main.app, ["bench", "step", "-m", tiny_folder, "--engines",
                                           "llama.cpp", "--bandwidth-gbps", "5"])
    assert r.exit_code != 0 and "no engine to time: llama.cpp: llama-cpp-python is not" \
        in " ".join(r.output.split())


def test_bench_step_keeps_flash_attention_where_it_is_faster_for_every_format(tmp_path,
                                                                            monkeypatch):
    """The rule written a second way: on for this CPU iff every format timed both ways sums
    fewer ms with it on; the llama.cpp engine's contexts then take it (the environment
    overrides)."""
    import itertools

    from solm.engines.bandwidth import cpu_description
    from solm.engines import cost

    monkeypatch.setenv("SOLM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(cost.FLASH_ENV, raising=False)
    assert cost.flash_attn_here() is False  # nothing measured: off
    for a, b in itertools.product([(10, 20), (12, 30)], repeat=2):
        rows = [{"engine": "llama.cpp", "variant": "q8_0", "ms": {"1": 11, "4": 25}},
                {"engine": "llama.cpp", "variant": "q8_0" + cost.FLASH,
                 "ms": {"1": a[0], "4": a[1]}},
                {"engine": "llama.cpp", "variant": "q4_0", "ms": {"1": 11, "4": 25}},
                {"engine": "llama.cpp", "variant": "q4_0" + cost.FLASH,
                 "ms": {"1": b[0], "4": b[1]}},
                {"engine": "torch", "variant": "float32", "ms": {"1": 1, "4": 1}}]
        on = sum(a) < 36 and sum(b) < 36
        assert cost.record_flash_attn({"cpu": cpu_description(), "engines": rows}) is on
        assert cost.flash_attn_here() is on
    assert cost.record_flash_attn({"cpu": "x", "engines": rows[:1]}) is None
    monkeypatch.setenv(cost.FLASH_ENV, "on")
    assert cost.flash_attn_here() is True


def test_the_llama_cpp_engines_contexts_take_the_flash_setting(monkeypatch):
    from solm.decode.pasta.system import PastaEngine
    from solm.engines import cost

    seen = []
    monkeypatch.setattr("solm.engines.llamacpp.binding.LlamaContext",
                        lambda *a, **k: seen.append(k["flash_attn"]) or object())
    monkeypatch.setattr("solm.engines.llamacpp.step.LlamaCppStep", lambda ctx: ctx)
    for gguf_type, value in (("q4_0", "on"), ("q4_0", "off"), ("f32", "on")):
        monkeypatch.setenv(cost.FLASH_ENV, value)
        settings = PastaEngine(engine="llama.cpp", gguf_type=gguf_type)
        ENGINES["llama.cpp"].step("slots", settings, 64)
    assert seen == [True, False, False]  # never beside f32 weights (its kernel rounds to F16)


def test_bench_steps_default_formats_are_the_ones_decodes_run():
    """`--engine auto` rates an engine by what bench step timed: by default that must be the
    weight format a decode on that engine uses (an engine settings object made with no
    arguments)."""
    import inspect

    from solm.cli.bench_step import step_command
    from solm.decode.registry import EngineChoice

    params = inspect.signature(step_command).parameters
    made = EngineChoice()
    assert params["gguf_types"].default.default == made.gguf_type
    assert params["onnx_types"].default.default == made.onnx_type

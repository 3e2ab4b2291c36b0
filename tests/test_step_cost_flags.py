"""`solm bench step` on a busy machine: a row whose repeats wander, or whose wider pass
measured cheaper than a narrower one, is flagged and not kept for `--engine auto`; flash
attention is decided only from clean rows; the copy bandwidth every figure quotes is kept
only from a probe whose copies agree, and then the highest such figure."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings, strategies as st

from solm.eval.step_cost import MONOTONE_SLACK, SPREAD_BOUND, StepCost, measure, quartile_spread


class ScriptedProbe:
    engine, variant, weight_bytes = "llama.cpp", "q4_0", 1 << 20

    def __init__(self, times):
        self.times = times  # k -> list of seconds, the first one the warm-up

    def prepare(self, k_max, context):
        self.left = {k: list(v) for k, v in self.times.items()}

    def one_pass(self, k):
        return self.left[k].pop(0)

    def close(self):
        pass


def steady(ms, n=9, jitter=0.01):
    return [ms / 1000 * (1 + jitter * ((i % 3) - 1)) for i in range(n + 1)]


def test_a_quiet_row_is_kept_and_a_wandering_or_non_monotone_one_is_flagged():
    quiet = measure(ScriptedProbe({1: steady(6), 2: steady(9), 4: steady(12)}), [1, 2, 4],
                    64, 9)
    assert quiet.flags == []
    busy = measure(ScriptedProbe({1: steady(6), 2: [0.009] + [0.009, 0.03] * 4 + [0.009],
                                  4: steady(12)}), [1, 2, 4], 64, 9)
    assert any("k=2 repeats spread" in f for f in busy.flags)
    backwards = measure(ScriptedProbe({1: steady(6), 2: steady(739), 4: steady(696)}),
                        [1, 2, 4], 64, 9)
    assert backwards.flags == ["k=4 (696.00 ms) cheaper than k=2 (739.00 ms)"]


@settings(max_examples=200, deadline=None)
@given(ms=st.dictionaries(st.sampled_from([1, 2, 3, 4, 8]), st.floats(1, 100), min_size=2),
       spread=st.dictionaries(st.sampled_from([1, 2, 3, 4, 8]), st.floats(1, 2)))
def test_flags_follow_the_two_rules_written_another_way(ms, spread):
    cost = StepCost("e", "v", 1, ms=dict(ms), spread=dict(spread))
    wandering = any(v > SPREAD_BOUND for v in spread.values())
    backwards = any(ms[b] * MONOTONE_SLACK < ms[a]
                    for a, b in itertools.permutations(ms, 2) if b > a)
    assert bool(cost.flags) == (wandering or backwards)


def test_quartile_spread():
    assert quartile_spread([1.0] * 8) == 1.0
    assert quartile_spread([1, 1, 2, 2, 2, 2, 3, 3]) > 1.5
    assert quartile_spread([1, 5]) == 1.0  # too few to tell


def result_with(rows):
    return {"model": "smollm2-135m", "cpu": "test-cpu", "engines": rows}


def row(engine, variant, ms, flags=()):
    return {"engine": engine, "variant": variant, "ms": {str(k): v for k, v in ms.items()},
            "flags": list(flags)}


def test_only_clean_rows_are_kept_and_an_earlier_clean_row_survives_a_flagged_rerun(
        tmp_path, monkeypatch):
    from solm.engines import cost

    monkeypatch.setenv("SOLM_CACHE", str(tmp_path))
    first = result_with([row("llama.cpp", "q4_0", {1: 6, 4: 12}),
                         row("torch", "bfloat16", {1: 43, 4: 58})])
    assert cost.record_step_costs(first) is not None
    busy = result_with([row("llama.cpp", "q4_0", {1: 60, 4: 50}, ["k=4 cheaper"]),
                        row("torch", "bfloat16", {1: 40, 4: 55})])
    cost.record_step_costs(busy)
    kept = json.loads((tmp_path / "step_cost.json").read_text())["test-cpu"]
    rows = {(e["engine"], e["variant"]): e["ms"] for e in kept["smollm2-135m"]["engines"]}
    assert rows[("llama.cpp", "q4_0")] == {"1": 6, "4": 12}  # the flagged rerun left it
    assert rows[("torch", "bfloat16")] == {"1": 40, "4": 55}  # the clean rerun replaced it
    assert cost.record_step_costs(result_with([row("torch", "bfloat16", {1: 1},
                                                   ["wandered"])])) is None


@pytest.mark.parametrize("plain,flash,flags,expected", [
    ({1: 62, 4: 120}, {1: 103, 4: 60}, (), False),  # slower one token: off, though the sum wins
    ({1: 7, 4: 15}, {1: 6, 4: 12}, (), True),
    ({1: 7, 4: 15}, {1: 6, 4: 12}, ("wandered",), None),  # a flagged row decides nothing
])
def test_flash_attention_is_decided_from_clean_rows_and_the_one_token_pass(
        tmp_path, monkeypatch, plain, flash, flags, expected):
    from solm.engines import cost

    monkeypatch.setenv("SOLM_CACHE", str(tmp_path))
    result = result_with([row("llama.cpp", "q4_0", plain),
                          row("llama.cpp", "q4_0+flash", flash, flags)])
    assert cost.record_flash_attn(result) is expected


def test_the_bandwidth_kept_is_a_clean_probes_and_the_highest(tmp_path, monkeypatch):
    from solm.engines.bandwidth import PROBE_BYTES, machine_bandwidth

    monkeypatch.setenv("SOLM_CACHE", str(tmp_path))
    gbs = lambda t: 2 * PROBE_BYTES / t  # noqa: E731
    busy = lambda device: [0.1, 0.5, 0.1, 0.4]  # noqa: E731  slowest / fastest 5x
    assert machine_bandwidth("cpu", copies=busy) == pytest.approx(gbs(0.1))
    assert not (tmp_path / "bandwidth.json").exists()  # shown once, not kept
    quiet = lambda device: [0.02, 0.021, 0.02]  # noqa: E731
    assert machine_bandwidth("cpu", copies=quiet) == pytest.approx(gbs(0.02))
    slower = lambda device: [0.03, 0.031, 0.03]  # noqa: E731 a clean probe, a slower spell
    assert machine_bandwidth("cpu", remeasure=True, copies=slower) == pytest.approx(gbs(0.02))
    assert machine_bandwidth("cpu", copies=busy) == pytest.approx(gbs(0.02))  # kept figure
    faster = lambda device: [0.01, 0.0101, 0.0102]  # noqa: E731
    assert machine_bandwidth("cpu", remeasure=True, copies=faster) == pytest.approx(gbs(0.01))


@pytest.mark.parametrize("flags,kind,tokens", [
    ("fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8", "amx", 50750),
    ("fpu avx2 avx512f avx512_bf16", "avx512_bf16", 17000),
    ("fpu avx2 fma", "other", 60000),
])
def test_compile_auto_counts_each_cpu_kinds_measured_build_time(flags, kind, tokens):
    """`--compile auto` on a CPU: the graphs' build measured per kind (AMX: 406 s for 4
    graphs on an empty cache) against 8 ms saved a token."""
    from solm.engines.torch.compiled import compile_cpu_kind, compile_pays_tokens, should_compile

    cpuinfo = f"processor : 0\\nflags\\t\\t: {flags}\\n"
    assert compile_cpu_kind(cpuinfo) == kind
    assert compile_pays_tokens(cpuinfo) == tokens
    assert should_compile(True, 0, "cpu") and not should_compile(False, 10 ** 9, "cpu")

"""TIP replay benchmark: the same traces teacher-forced under each eviction policy, one run."""

from __future__ import annotations

import math
import time
from typing import Callable

from solm.decode.tip.policies import POLICIES
from solm.decode.tip.runtime import TipDecodeConfig, TipRequest, TipRuntime


def read_trace_rows(path, limit: int | None = None) -> list[dict]:
    """Rows with a text `prompt` and a register-annotated text `response`; a row without them
    is a located error, and a file with none is refused (nothing to replay)."""
    from solm.core.errors import DataError
    from solm.core.jsonl import read_jsonl_numbered

    rows = []
    for line, row in read_jsonl_numbered(path):
        for name in ("prompt", "response"):
            if not isinstance(row.get(name), str) or not row[name].strip():
                raise DataError("missing or empty (a trace needs `prompt` and a "
                                "register-annotated `response`)", path=str(path), line=line,
                                field=name)
        rows.append(row)
        if limit is not None and len(rows) >= limit:
            break
    if not rows:
        raise DataError("no traces: the file is empty; nothing was replayed", path=str(path))
    return rows


def pages_needed(traces: list[tuple[list[int], list[int]]], page_size: int,
                 batch_size: int, registers: int = 16) -> int:
    """Enough pages for the batch's longest requests under dense (the worst case), plus
    one partly filled page per step boundary for TIP's fresh pages."""
    longest = sorted((len(p) + len(r) for p, r in traces), reverse=True)[:batch_size]
    return sum(math.ceil(n / page_size) + registers + 2 for n in longest)


def replay_policy(rt: TipRuntime, traces: list[tuple[list[int], list[int]]], policy: str,
                  budget: int | None, batch_size: int,
                  on_step: Callable[[int], None] | None = None) -> dict:
    cfg = TipDecodeConfig(policy=policy, budget=budget, batch_size=batch_size,
                          max_new_tokens=max(len(r) for _, r in traces) + 1)
    reqs = [TipRequest(i, p, forced=r) for i, (p, r) in enumerate(traces)]
    steps = [0]

    def count(n: int) -> None:
        steps[0] += 1
        if on_step is not None:
            on_step(n)

    reads_before, steps_s = rt.step_reads, rt.steps_s
    started, built = time.perf_counter(), rt.compile_s
    results = list(rt.run(reqs, cfg, on_step=count))
    wall = time.perf_counter() - started - (rt.compile_s - built)  # graph building apart
    tokens = sum(r.generated for r in results)
    return {
        "policy": policy, "budget": budget, "requests": len(results), "tokens": tokens,
        "wall_s": round(wall, 2), "throughput_tok_s": tokens / wall,
        "mean_live_tokens": sum(r.mean_live_tokens * r.generated for r in results) / tokens,
        "peak_pages": max(r.peak_pages for r in results),
        "fragmentation": sum(r.fragmentation for r in results) / len(results),
        "prefill_s": round(sum(r.prefill_s for r in results), 2),
        **step_bandwidth(rt, steps[0], rt.step_reads - reads_before,
                         rt.steps_s - steps_s),
    }


def step_bandwidth(rt: TipRuntime, steps: int, slot_reads: int, seconds: float) -> dict:
    """Bandwidth the decode steps achieved: weights once per step plus the KV slots gathered
    (counted per layer by the paged cache), against the machine's probed bandwidth. Not on
    another engine's paged KV, whose reads solm does not see (nothing is reported there)."""
    if rt.engine_kv is not None:
        return {}
    from solm.core.quantize import weight_bytes
    from solm.engines.bandwidth import achieved, kv_bytes_per_token, machine_bandwidth

    per_layer = kv_bytes_per_token(rt.model) // len(rt.cache.layers)
    return achieved(weight_bytes(rt.model), steps, slot_reads, per_layer, seconds,
                    machine_bandwidth(rt.device))


def run_tip_bench(rt: TipRuntime, traces: list[tuple[list[int], list[int]]],
                  policies: list[str], budget: int, batch_size: int, engine: str,
                  on_policy: Callable[[dict], None] | None = None,
                  on_step: Callable[[int], None] | None = None,
                  fresh_kv: Callable[[], object] | None = None) -> dict:
    """Each policy replays every trace; `on_policy(row)` gets each policy's figures as soon
    as it is done (with its ratios against dense when dense ran first). `fresh_kv`: another
    engine's paged KV made anew for each policy (see `bench_kv`)."""
    # warm-up: the first forward passes of a process are slow (allocator, kernels)
    warm = [(p, r[:16]) for p, r in traces[:2]]
    for policy in policies:
        replay_policy(rt, warm, policy, budget, batch_size)
    rows = []
    for policy in policies:
        if fresh_kv is not None:
            rt.engine_kv = None  # the last policy's context goes before the next is made
            rt.engine_kv = fresh_kv()
        row = {"engine": engine,
               **replay_policy(rt, traces, policy, budget if POLICIES[policy].needs_budget
                               else None, batch_size, on_step)}
        rows.append(row)
        _add_ratios(rows)
        if on_policy:
            on_policy(row)
    by = {r["policy"]: r for r in rows}
    summary: dict = {"engine": rows[0]["engine"], "policies": rows, "traces": len(traces),
                     "page_size": rt.page_size, "batch_size": batch_size, "budget": budget,
                     "mean_trace_tokens": sum(len(r) for _, r in traces) / len(traces)}
    if "dense" in by and "tip" in by:
        summary["throughput_vs_dense"] = by["tip"]["throughput_vs_dense"]
        summary["live_kv_vs_dense"] = by["tip"]["live_kv_vs_dense"]
    return summary


def plan_engines(choices: list[str], policies: list[str], budget: int, page_size: int,
                 named: bool, **settings) -> list[tuple]:
    """(engine settings, the policies it replays, {refused policy: why}) per engine choice.
    An engine named leaves out the policies it cannot run when the policies were not named
    (`all`); a named one it cannot run is a one-line error, as in `tip decode`; `auto` takes
    an engine that runs every policy."""
    from solm.core.errors import SolmError
    from solm.decode.tip.policies import make_policy
    from solm.decode.tip.system import TipEngine
    from solm.engines import ENGINES, choose

    plans, resolved = [], set()
    for choice in choices:
        engine = TipEngine(engine=choice, page_size=page_size, **settings)
        # the engine named, or the one auto takes before it sees the policies
        first_pick = ENGINES.get(choice) or next(
            e for e in ENGINES.values()
            if e.unavailable() is None and e.refusal("tip", settings=engine) is None)
        why = {n: first_pick.refusal("tip", policy=make_policy(n, budget, page_size),
                                     settings=engine) for n in policies}
        refused = {n: r for n, r in why.items() if r}
        if choice in ENGINES and not named and len(refused) < len(policies):
            engine.engine = choose(choice, "tip", settings=engine)
        else:
            first = next(iter(refused), None)
            engine.engine = choose(choice, "tip", settings=engine,
                                   policy=make_policy(first, budget, page_size) if first else None)
            refused = {}
        if engine.engine in resolved:
            raise SolmError(f"--engine {','.join(choices)}: {choice} resolves to "
                            f"{engine.engine}, which is already in the list")
        resolved.add(engine.engine)
        plans.append((engine, [n for n in policies if n not in refused], refused))
    return plans


def bench_kv(traces: list[tuple[list[int], list[int]]], engine, batch_size: int):
    """The engine's paged KV for a replay (None on torch): one stream per batch row, each as
    long as the longest trace. Made anew for each policy: on llama.cpp the policy replayed
    second in one context ran 16-20% slower whichever it was (AMD EPYC, 2 cores, q8_0, 8
    traces of 2,000 tokens: TIP 59.1 tokens/s first, 49.5 after dense; dense 59.3 first,
    47.5 after TIP; `bench/results/tip_llamacpp_2k.md`)."""
    from solm.engines import get_engine

    longest = max(len(p) + len(r) for p, r in traces) + 2
    return get_engine(engine.engine).step("paged", engine, batch_size * longest, batch_size,
                                          independent=True)


def bench_runtime(model, tokenizer, traces: list[tuple[list[int], list[int]]], engine,
                  batch_size: int, compile: bool) -> TipRuntime:
    """The paged runtime a replay runs on: torch's pool, or the engine's paged KV
    (`bench_kv`)."""
    kv = bench_kv(traces, engine, batch_size)
    return TipRuntime(model, tokenizer,
                      num_pages=pages_needed(traces, engine.page_size, batch_size,
                                             engine.registers),
                      page_size=engine.page_size, num_registers=engine.registers,
                      compile=compile and kv is None, kv=kv)


def merge_engines(summaries: list[dict]) -> dict:
    """One report of several engines' replays: every policy row (with its engine), the
    first engine's ratios against dense on top, each engine's beside them, and each other
    engine's throughput over the reference's per policy when both ran
    (`<engine>_vs_<reference>_throughput`)."""
    from solm.engines import REFERENCE

    first = summaries[0]
    merged = {k: v for k, v in first.items() if k != "policies"}
    merged["policies"] = [r for s in summaries for r in s["policies"]]
    merged["engines"] = {s["engine"]: {k: s[k] for k in
                                       ("throughput_vs_dense", "live_kv_vs_dense",
                                        "compiled", "dtype", "gguf_type", "onnx_type", "refused")
                                       if k in s}
                         for s in summaries}
    by = {(r["engine"], r["policy"]): r for r in merged["policies"]}
    for other in dict.fromkeys(e for e, _ in by if e != REFERENCE):
        ratios = {p: by[other, p]["throughput_tok_s"] / by[REFERENCE, p]["throughput_tok_s"]
                  for e, p in by if e == other and (REFERENCE, p) in by}
        if ratios:
            merged[f"{other.replace('.', '_')}_vs_{REFERENCE}_throughput"] = ratios
    return merged


def _add_ratios(rows: list[dict]) -> None:
    dense = next((r for r in rows if r["policy"] == "dense"), None)
    if dense is None:
        return
    for r in rows:
        r["throughput_vs_dense"] = r["throughput_tok_s"] / dense["throughput_tok_s"]
        r["live_kv_vs_dense"] = r["mean_live_tokens"] / dense["mean_live_tokens"]

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
    (counted per layer by the paged cache), against the machine's probed bandwidth."""
    from solm.core.quantize import weight_bytes
    from solm.decode.bandwidth import achieved, kv_bytes_per_token, machine_bandwidth

    per_layer = kv_bytes_per_token(rt.model) // len(rt.cache.layers)
    return achieved(weight_bytes(rt.model), steps, slot_reads, per_layer, seconds,
                    machine_bandwidth(rt.device))


def run_tip_bench(rt: TipRuntime, traces: list[tuple[list[int], list[int]]],
                  policies: list[str], budget: int, batch_size: int,
                  on_policy: Callable[[dict], None] | None = None,
                  on_step: Callable[[int], None] | None = None) -> dict:
    """Each policy replays every trace; `on_policy(row)` gets each policy's figures as soon
    as it is done (with its ratios against dense when dense ran first)."""
    # warm-up: the first forward passes of a process are slow (allocator, kernels)
    warm = [(p, r[:16]) for p, r in traces[:2]]
    for policy in policies:
        replay_policy(rt, warm, policy, budget, batch_size)
    rows = []
    for policy in policies:
        row = replay_policy(rt, traces, policy, budget if POLICIES[policy].needs_budget
                            else None, batch_size, on_step)
        rows.append(row)
        _add_ratios(rows)
        if on_policy:
            on_policy(row)
    by = {r["policy"]: r for r in rows}
    summary: dict = {"policies": rows, "traces": len(traces), "page_size": rt.page_size,
                     "batch_size": batch_size, "budget": budget,
                     "mean_trace_tokens": sum(len(r) for _, r in traces) / len(traces)}
    if "dense" in by and "tip" in by:
        summary["throughput_vs_dense"] = by["tip"]["throughput_vs_dense"]
        summary["live_kv_vs_dense"] = by["tip"]["live_kv_vs_dense"]
    return summary


def _add_ratios(rows: list[dict]) -> None:
    dense = next((r for r in rows if r["policy"] == "dense"), None)
    if dense is None:
        return
    for r in rows:
        r["throughput_vs_dense"] = r["throughput_tok_s"] / dense["throughput_tok_s"]
        r["live_kv_vs_dense"] = r["mean_live_tokens"] / dense["mean_live_tokens"]

"""Replay benchmark: realized vs theoretical speedup of the PASTA runtime, measured side by side.

For each annotated response, the runtime teacher-forces the recorded tokens on the real
schedule: the stripped response sequentially, the annotated one in parallel, each decoded
`repeats` times in interleaved runs whose order alternates (so a slow spell of the machine
hits both alike), the median kept. Speedups are ratios of decode time (prefill excluded; it
is the same prompt in both). `seq_vs_generate` compares the sequential runtime's tokens/s
with `model.generate` (static cache, same dtype) producing the same number of tokens from
the same prompt, prefill included in both; with it, `generate` joins the interleaved runs
and its median is compared with the sequential median.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable

import torch

from solm.core.chat import prompt_ids, text_ids
from solm.core.pasta_lang import strip
from solm.core.systems.pasta_schedule import DISTRUST, pasta_metrics
from solm.decode.pasta.runtime import PastaRuntime
from solm.core.stats import geomean


@dataclass
class PastaBenchRow:
    id: str
    content_tokens: int
    sequential_tokens: int
    critical_path: int
    forward_passes: int
    promises: int
    seq_s: float
    par_s: float
    realized_speedup: float
    theoretical_speedup: float
    efficiency: float
    replay_exact: bool
    seq_tokens_per_s: float | None = None
    generate_tokens_per_s: float | None = None
    seq_forward_passes: int = 0
    seq_kv_read: int = 0  # pool slots the sequential decode's steps read
    # realized above theoretical by more than 10%: a measurement artefact, not a result
    distrusted: bool = False


def time_generate(model, ids: list[int], n_tokens: int) -> float:
    """Seconds for model.generate to produce exactly n_tokens greedily with a static cache."""
    device = next(model.parameters()).device
    inputs = torch.tensor([ids], device=device)
    t = time.perf_counter()
    with torch.no_grad():
        model.generate(inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=n_tokens,
                       min_new_tokens=n_tokens, do_sample=False, cache_implementation="static",
                       pad_token_id=model.config.eos_token_id)
    return time.perf_counter() - t


def bench_row(rt: PastaRuntime, row: dict, repeats: int = 2, compare_generate: bool = False,
              generate: Callable[[list[int], int], float] | None = None) -> PastaBenchRow:
    """`generate(ids, n)`: seconds for the yardstick to produce n tokens from ids (default:
    `model.generate`)."""
    generate = generate or (lambda ids, n: time_generate(rt.model, ids, n))
    tok = rt.tokenizer
    prompt = prompt_ids(tok, row["prompt"], row.get("system"))
    annotated = text_ids(tok, row["annotated"])
    plain = text_ids(tok, strip(row["annotated"]))
    metrics = pasta_metrics(annotated, rt.vocab)
    seqs, pars, gens = [], [], []
    runs = {"sequential": lambda: seqs.append(rt.replay(prompt, plain, mode="sequential")),
            "parallel": lambda: pars.append(rt.replay(prompt, annotated, mode="parallel")),
            "generate": lambda: gens.append(generate(prompt, len(plain)))}
    order = ["sequential", "parallel"] + (["generate"] if compare_generate else [])
    for k in range(max(1, repeats)):  # interleaved, order alternating: drift hits all alike
        for name in (order if k % 2 == 0 else order[::-1]):
            runs[name]()
    seq, par = _median_run(seqs), _median_run(pars)
    realized = seq.decode_s / par.decode_s
    theoretical = metrics.theoretical_speedup(len(plain))
    out = PastaBenchRow(
        id=str(row["id"]), content_tokens=metrics.content_tokens, sequential_tokens=len(plain),
        critical_path=metrics.critical_path, forward_passes=par.forward_passes,
        promises=metrics.promises, seq_s=seq.decode_s, par_s=par.decode_s,
        realized_speedup=realized, theoretical_speedup=theoretical,
        efficiency=realized / theoretical, distrusted=realized > DISTRUST * theoretical,
        replay_exact=par.ids == annotated and seq.ids == plain,
        seq_forward_passes=seq.forward_passes, seq_kv_read=seq.kv_read)
    if compare_generate:  # both the median of the same number of interleaved runs
        out.seq_tokens_per_s = len(plain) / seq.wall_s
        out.generate_tokens_per_s = len(plain) / sorted(gens)[(len(gens) - 1) // 2]
    return out


def _median_run(runs: list):
    """The run whose decode time is the median (the lower middle one for an even count)."""
    return sorted(runs, key=lambda r: r.decode_s)[(len(runs) - 1) // 2]


def sequential_bandwidth(rows: list[PastaBenchRow], weight_bytes: int, kv_token_bytes: int,
                         machine: float | None) -> dict:
    """Bandwidth the sequential decodes achieved (weights per step + keys/values read)."""
    from solm.engines.bandwidth import achieved

    return achieved(weight_bytes, sum(r.seq_forward_passes for r in rows),
                    sum(r.seq_kv_read for r in rows), kv_token_bytes,
                    sum(r.seq_s for r in rows), machine)


def compile_for(rt: PastaRuntime, rows: list[dict]) -> float:
    """With a compiled step: build every graph these rows' replays will use, before timing.
    Returns the seconds it took (0 when the step is not compiled)."""
    if getattr(rt.forward, "compiled", None) is None:
        return 0.0
    t = time.perf_counter()
    tok = rt.tokenizer
    slots, fed = 0, 1
    for row in rows:
        annotated = text_ids(tok, row["annotated"])
        slots = max(slots, len(prompt_ids(tok, row["prompt"], row.get("system")))
                    + len(annotated) + 1)
        fed = max(fed, pasta_metrics(annotated, rt.vocab).promises + 1)
    rt.forward.compile_buckets(fed, slots)
    return time.perf_counter() - t


def warm_up(rt: PastaRuntime, rows: list[dict], compare_generate: bool,
            generate: Callable[[list[int], int], float] | None = None) -> float:
    """One untimed replay of each side of the longest row: every code path, and every key
    length a timed replay will meet, seen once before timing. (Warmed on 32 tokens alone, the
    first timed replay to reach a new key length paid its allocator growth; with --repeats
    1 that was always the sequential side, which goes furthest: efficiency read 1.40.)"""
    t = time.perf_counter()
    tok = rt.tokenizer
    row = max(rows, key=lambda r: len(text_ids(tok, strip(r["annotated"]))))
    prompt = prompt_ids(tok, row["prompt"], row.get("system"))
    annotated = text_ids(tok, row["annotated"])
    plain = text_ids(tok, strip(row["annotated"]))
    rt.replay(prompt, plain, mode="sequential")
    rt.replay(prompt, annotated, mode="parallel")
    if compare_generate:
        (generate or (lambda ids, n: time_generate(rt.model, ids, n)))(prompt, len(plain))
    return time.perf_counter() - t


def summarize(rows: list[PastaBenchRow], warmup_s: float) -> dict:
    gen_rows = [r for r in rows if r.generate_tokens_per_s]
    return {
        "rows": len(rows),
        "realized_speedup": geomean([r.realized_speedup for r in rows]),
        "theoretical_speedup": geomean([r.theoretical_speedup for r in rows]),
        "efficiency": geomean([r.efficiency for r in rows]),
        # a parallel pass cheaper than a sequential one by more than 10%: not a result
        "efficiency_flagged": geomean([r.efficiency for r in rows]) > DISTRUST,
        "seq_vs_generate": geomean([r.seq_tokens_per_s / r.generate_tokens_per_s
                                    for r in gen_rows]) if gen_rows else None,
        # the realized speedup against the faster of the two sequential decodings (the
        # runtime's, or the yardstick's where that is faster on this CPU)
        "realized_vs_best_sequential": geomean([r.realized_speedup for r in rows]) * min(
            1.0, geomean([r.seq_tokens_per_s / r.generate_tokens_per_s for r in gen_rows]))
        if gen_rows else None,
        "generate_rows": len(gen_rows),
        "replay_exact": all(r.replay_exact for r in rows),
        # rows whose realized speedup is above the theoretical one by more than 10%
        "distrusted_rows": sum(r.distrusted for r in rows),
        "mean_promises": sum(r.promises for r in rows) / max(1, len(rows)),
        "mean_sequential_tokens": sum(r.sequential_tokens for r in rows) / max(1, len(rows)),
        "seq_ms_per_token": 1000 * sum(r.seq_s for r in rows) / max(1, sum(
            r.sequential_tokens for r in rows)),
        "par_ms_per_step": 1000 * sum(r.par_s for r in rows) / max(1, sum(
            r.forward_passes for r in rows)),
        "warmup_s": warmup_s,
    }


def run_pasta_bench(rt: PastaRuntime, rows: Iterable[dict], repeats: int = 2,
              generate_rows: int | None = None,
              on_row: Callable[[PastaBenchRow], None] | None = None,
              generate: Callable[[list[int], int], float] | None = None
              ) -> tuple[list[PastaBenchRow], dict]:
    """Every row replayed on `rt`; `generate`: the sequential yardstick (`bench_row`)."""
    rows = list(rows)
    if not rows:
        raise ValueError("no annotated rows to benchmark")
    want_generate = generate_rows is None or generate_rows > 0
    build_s = compile_for(rt, rows)
    warmup_s = build_s + warm_up(rt, rows, want_generate, generate)
    results = []
    for i, row in enumerate(rows):
        compare = generate_rows is None or i < generate_rows
        r = bench_row(rt, row, repeats=repeats, compare_generate=compare, generate=generate)
        results.append(r)
        if on_row:
            on_row(r)
    summary = summarize(results, warmup_s)
    compiled = getattr(rt.forward, "compiled", None)
    summary["graphs"] = compiled.compiles if compiled is not None else 0
    summary["graph_build_s"] = round(compiled.build_s if compiled is not None else 0.0, 1)
    return results, summary


def plot_speedups(rows: list[PastaBenchRow], path) -> None:
    """Realized vs theoretical speedup per row, with the efficiency = 1 diagonal."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 5))
    th = [r.theoretical_speedup for r in rows]
    re = [r.realized_speedup for r in rows]
    ax.scatter(th, re, s=18, alpha=0.7)
    top = max(th + re + [1.0]) * 1.05
    ax.plot([1, top], [1, top], "k--", lw=1, label="efficiency 1.0")
    ax.plot([1, top], [0.85, 0.85 * top], ":", color="gray", lw=1, label="efficiency 0.85")
    ax.set_xlabel("theoretical speedup (sequential tokens / critical path)")
    ax.set_ylabel("realized speedup (sequential / parallel decode time)")
    ax.set_title(f"PASTA replay, {len(rows)} rows: efficiency "
                 f"{geomean([r.efficiency for r in rows]):.2f} (geomean)")
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

"""`pasta bench`: replay annotated responses on the real schedule; realized against theoretical
speedup, and the sequential step against `model.generate`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from solm.cli.checks import check_paths
from solm.cli.console import console, info, out_console, progress
from solm.cli.flags import engine_option, gguf_type_option
from solm.cli.flags import (model_command, out_option, CompileOption, ConfigOption,
                            DebugOption, DeviceOption, DtypeOption, ModelOption, QuantizeOption,
                            QuietOption)
from solm.cli.job_helpers import settings_from
from solm.cli.setting_options import setting_option
from solm.decode.pasta.system import PastaEngine


BENCH_BESIDE = (".summary.json", ".png")  # what `pasta bench -o OUT` writes beside OUT


@model_command
def bench(
    annotated: Path = typer.Option(..., "--annotated", "-a", help="JSONL with `prompt` and "
                                   "`annotated` (e.g. from `pasta annotate`)."),
    model: str = ModelOption,
    rows: int = typer.Option(40, min=1, help="How many annotated rows to replay."),
    min_promises: int = typer.Option(2, min=0, help="Only rows with at least this many promises."),
    max_tokens: Optional[int] = typer.Option(None, min=1, help="Only rows whose plain response has at "
                                             "most this many tokens."),
    repeats: int = typer.Option(2, min=1, help="Decode each row this many times; time the last "
                                "(the paper: 2)."),
    generate_rows: Optional[int] = typer.Option(None, min=0, help="Compare with model.generate on the "
                                                "first N rows only (default: all)."),
    pool_size: int = setting_option(PastaEngine, "pool_size"),
    dtype: str = DtypeOption,
    device: Optional[str] = DeviceOption,
    out: Optional[Path] = out_option(None, help="Per-row results (JSONL) and a "
                                       "summary next to it."),
    compile: Optional[bool] = CompileOption,
    quantize: Optional[str] = QuantizeOption,
    engine: str = engine_option(also="On llama.cpp (a model trained with --positions overlap), "
                                     "`seq_vs_generate` compares with llama.cpp's own "
                                     "generation loop on the same GGUF."),
    gguf_type: str = gguf_type_option(),
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    """Replay annotated responses: realized vs theoretical speedup, efficiency, vs generate.

    Input: JSONL rows with `id`, `prompt` and `annotated` (a Pasta-Lang response), as
    `pasta annotate` writes them (docs/guides/data.md, "Input formats", has a two-line example).
    Each row is teacher-forced on the real parallel schedule and its stripped text
    sequentially. Prints a JSON summary with `realized_speedup`, `theoretical_speedup`,
    `efficiency` (geometric means) and `seq_vs_generate` (against `model.generate`, or on
    `--engine llama.cpp` against llama.cpp's own loop); warm-up time is reported separately.

    Example: `pasta bench -a runs/bench/gpt4_rules.jsonl --config configs/pasta_bench_cpu.yaml -o runs/bench/replay.jsonl`
    """
    from dataclasses import asdict

    from solm.core.chat import text_ids
    from solm.core.jsonl import JsonlWriter, read_jsonl
    from solm.core.pasta_lang import promises, strip
    from solm.core.provenance import write_manifest
    from solm.core.quantize import weight_bytes
    from solm.engines.bandwidth import kv_bytes_per_token, machine_bandwidth
    from solm.engines.torch.compiled import should_compile
    from solm.decode.pasta.config import PastaDecodeConfig
    from solm.decode.pasta.system import load, one_request_runtime, prepare
    from solm.engines import get_engine
    from solm.core.paths import outputs_beside
    from solm.eval.pasta_bench import plot_speedups, run_pasta_bench, sequential_bandwidth

    check_paths([annotated], outputs_beside(out, *BENCH_BESIDE))
    settings = PastaEngine(engine=engine, gguf_type=gguf_type, pool_size=pool_size,
                           compile=compile, quantize=quantize)
    prepare(PastaDecodeConfig(mode="parallel"), settings, model)  # a refusal before loading
    chosen_engine = get_engine(settings.engine)
    m, tok = load(model, settings, dtype, device)
    chosen = []
    for row in read_jsonl(annotated):
        text = row.get("annotated")
        if not text or len(promises(text)) < min_promises:
            continue
        if max_tokens is not None and len(text_ids(tok, strip(text))) > max_tokens:
            continue
        chosen.append(row)
        if len(chosen) >= rows:
            break
    expected = sum(2 * repeats * len(text_ids(tok, strip(r["annotated"]))) for r in chosen)
    compiled = chosen_engine.torch_step and should_compile(compile, expected, m.device)
    on = (chosen_engine.describe(settings, str(m.dtype)) + (', compiled step' if compiled else '')
          + (', ' + quantize if quantize else ''))
    info(f"replaying {len(chosen)} rows from {annotated} ({on})")
    rt = one_request_runtime(m, tok, settings, compiled)
    generate = None
    # the yardstick on the same engine: its own one-token loop, same weights (None: torch's
    # model.generate)
    own = chosen_engine.sequential_loop(settings, pool_size)
    if own is not None:
        def own_generate(ids, n):
            _, prefill_s, decode_s = own.generate(ids, n)
            return prefill_s + decode_s

        generate = own_generate
    writer = None
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.unlink(missing_ok=True)  # timings from an earlier run are not comparable
        writer = JsonlWriter(out)

    def on_row(r, advance):
        if writer:
            writer.write(asdict(r))
        advance(status=f"{r.id}: {r.realized_speedup:.2f}x of {r.theoretical_speedup:.2f}x")

    with progress("replaying", len(chosen)) as advance:
        results, summary = run_pasta_bench(rt, chosen, repeats=repeats, generate_rows=generate_rows,
                                     on_row=lambda r: on_row(r, advance), generate=generate)
    if own is not None:
        own.close()
    summary.update({"model": model, "engine": settings.engine,
                    "generate": f"{settings.engine}'s own loop" if own is not None
                    else "model.generate",
                    "dtype": str(m.dtype).replace("torch.", "")
                    if chosen_engine.torch_step else gguf_type,
                    "repeats": repeats, "max_tokens": max_tokens, "compiled": compiled,
                    "quantize": quantize,
                    # solm sees only its own steps' reads
                    "sequential_bandwidth": None if not chosen_engine.torch_step else
                    sequential_bandwidth(
                        results, weight_bytes(m), kv_bytes_per_token(m),
                        machine_bandwidth(m.device))})
    if out:
        writer.close()
        Path(str(out) + BENCH_BESIDE[0]).write_text(json.dumps(summary, indent=2))
        plot_speedups(results, Path(str(out) + BENCH_BESIDE[1]))
        write_manifest(out, "pasta bench", settings_from(locals()), inputs=[annotated],
                       model=model, extra={"summary": summary})
        info(f"per-row results: {out}; plot: {out}.png")
    if summary["efficiency_flagged"]:
        console.print(f"[yellow]warning:[/] efficiency {summary['efficiency']:.2f} (> 1.1): a "
                      f"parallel pass measured cheaper than a sequential pass of the same "
                      f"model, which reading the same weights cannot be; distrust these "
                      f"timings (a busy machine or a cold path) and run again")
    if summary.get("seq_vs_generate") is not None and summary["seq_vs_generate"] < 1.0:
        console.print(f"[yellow]note:[/] the yardstick ({summary['generate']}) decoded "
                      f"sequentially faster than solm's sequential replay "
                      f"(seq_vs_generate {summary['seq_vs_generate']:.2f}): against it the "
                      f"realized speedup is {summary['realized_vs_best_sequential']:.2f}x")
    if summary["distrusted_rows"]:
        console.print(f"[yellow]warning:[/] {summary['distrusted_rows']} row(s) measured a "
                      f"realized speedup more than 10% above the theoretical one: "
                      f"measurements to distrust (a busy machine or a cold path), not results")
    out_console.print_json(json.dumps(summary))

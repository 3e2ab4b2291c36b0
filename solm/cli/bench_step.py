"""`solm bench step`: what a forward pass of k tokens costs on each engine, on this CPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from solm.cli.errors import command_group
from solm.cli.flags import (ConfigOption, DebugOption, ModelOption, QuietOption, model_command,
                            out_option)

BENCH_STEP_HELP = """Time one forward pass that feeds k tokens, one in each of k sequences, after
a context of --context tokens each (k = --ks), on every engine asked for and every weight
format: llama.cpp per --gguf-types (exported once, cached), onnxruntime per --onnx-types
(its ONNX graph, written once, cached), torch per --dtypes (solm's eager step). Prints, per engine and format, the median ms of a pass at each k and the same
in one-token passes ("x one"): a parallel thread pays only where k tokens cost about what
one costs. Beside them: the weights' bytes over this machine's copy bandwidth, the floor a
pass that reads every weight once cannot go below, whatever k.

Run it on a quiet machine (nothing else using the cores): a second process using torch
threads on a 2-core CPU slows a pass many times. The CPU is named in the output.

llama.cpp is timed with its flash attention off and on ("+flash"): which is faster depends on
the CPU, and the winner (on if it wins for every format timed) becomes the llama.cpp
engine's setting on this CPU ($SOLM_LLAMA_FLASH_ATTN=on|off overrides it).

The figures are also kept in solm's cache for `--engine auto`: on this CPU, for this model
(and adapters trained on it), auto then takes the engine where the tokens a decode writes
per pass (as its last decode here measured them) cost the least time.

Example: `solm bench step -m smollm2-135m --gguf-types q8_0,q4_0,f16 --onnx-types q4,fp32
--dtypes fp32 -o bench/results/step_cost.json`
"""

app = command_group("bench", "Measurements of this machine that choose defaults.")


def _decode_format(name: str) -> str:
    from solm.core.settings import field_of
    from solm.decode.registry import EngineChoice

    return field_of(EngineChoice, name).default


# the weight formats decodes use unless told otherwise, timed by default
DECODE_FORMATS = {name: _decode_format(name) for name in ("gguf_type", "onnx_type")}


def _list(text: str, name: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise typer.BadParameter("give at least one", param_hint=name)
    return items


@model_command
def step_command(
    model: str = ModelOption,
    engines: str = typer.Option("torch,llama.cpp,onnxruntime", help="Comma-separated engines to time "
                                "(an engine not installed here is skipped, with why)."),
    gguf_types: str = typer.Option(DECODE_FORMATS["gguf_type"], "--gguf-types",
                                   help="llama.cpp's weight formats (comma-separated export "
                                   "types; default: the one decodes use, so --engine auto "
                                   "rates the format it would run)."),
    onnx_types: str = typer.Option(DECODE_FORMATS["onnx_type"], "--onnx-types",
                                   help="onnxruntime's weight formats (comma-separated: fp32, "
                                   "i8, q8, q4; default: the one decodes use)."),
    dtypes: str = typer.Option("fp32", help="torch's weight dtypes (comma-separated: fp32, "
                               "bf16, fp16)."),
    ks: str = typer.Option("1,2,4,8,16", "--ks", help="Tokens per pass to time "
                           "(comma-separated; the smallest is the one-token reference)."),
    context: int = typer.Option(64, min=1, help="Tokens already in each sequence's cache."),
    repeats: int = typer.Option(35, min=1, help="Passes timed at each k (the median counts)."),
    bandwidth_gbps: Optional[float] = typer.Option(
        None, "--bandwidth-gbps", min=0.001, help="This machine's copy bandwidth in GB/s "
        "(default: solm's probe, measured once and cached)."),
    out: Optional[Path] = out_option(None, help="The figures as JSON."),
    plot: Optional[Path] = typer.Option(None, help="A PNG of ms per pass against k."),
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    from solm.cli.checks import check_paths
    from solm.cli.console import console, info, out_console
    from solm.core.errors import SolmError
    from solm.engines.bandwidth import cpu_description, machine_bandwidth
    from solm.engines import ENGINES
    from solm.eval.step_cost import measure, plot_costs

    check_paths([], [p for p in (out, plot) if p])
    if out and plot and out.resolve() == plot.resolve():
        raise typer.BadParameter("--out and --plot are one file", param_hint="--plot")
    wanted = _list(engines, "--engines")
    unknown = [e for e in wanted if e not in ENGINES]
    if unknown:
        raise typer.BadParameter(f"unknown engine(s) {', '.join(unknown)}: "
                                 f"{', '.join(ENGINES)}", param_hint="--engines")
    try:
        k_list = sorted({int(k) for k in _list(ks, "--ks")})
    except ValueError:
        raise typer.BadParameter("whole numbers, e.g. 1,2,4,8,16", param_hint="--ks") from None
    if k_list[0] < 1 or k_list[-1] > 64:
        raise typer.BadParameter("each k between 1 and 64", param_hint="--ks")
    bandwidth = (bandwidth_gbps * 1e9 if bandwidth_gbps else
                 machine_bandwidth("cpu", remeasure=True))
    cpu = cpu_description()
    info(f"{cpu}; copy bandwidth {bandwidth / 1e9:.1f} GB/s; k = {k_list}, context {context}")
    formats = {"dtypes": dtypes, "gguf_types": gguf_types, "onnx_types": onnx_types}  # by the option an engine reads
    probes, skipped = [], {}
    for name in wanted:
        engine = ENGINES[name]
        why = engine.unavailable()
        if why:
            skipped[name] = why
            continue
        option = engine.format_option
        probes += engine.probes(model, _list(formats[option], "--" + option.replace("_", "-")))
    if not probes:
        raise SolmError("no engine to time: " + "; ".join(f"{e}: {why}"
                                                           for e, why in skipped.items()))
    costs = [measure(p, k_list, context, repeats, progress=info) for p in probes]
    result = {"model": model, "cpu": cpu, "bandwidth_gbps": round(bandwidth / 1e9, 2),
              "context": context, "repeats": repeats, "ks": k_list, "skipped": skipped,
              "engines": [c.to_dict(bandwidth) for c in costs]}
    _print_table(result, out_console)
    from solm.engines.cost import record_flash_attn, record_step_costs

    flagged = [e for e in result["engines"] if e["flags"]]
    for e in flagged:
        console.print(f"[yellow]not kept:[/] {e['engine']} {e['variant']}: "
                      f"{'; '.join(e['flags'])} (a busy machine? rerun on a quiet one)",
                      highlight=False)
    kept = record_step_costs(result)
    info(f"kept for --engine auto: {kept}" if kept else
         "nothing kept for --engine auto: every row was flagged")
    flash = record_flash_attn(result)
    if flash is not None:
        info(f"llama.cpp's flash attention {'on' if flash else 'off'} on this CPU from now "
             f"(faster here; $SOLM_LLAMA_FLASH_ATTN=on|off overrides)")
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1) + "\n")
    if plot:
        plot.parent.mkdir(parents=True, exist_ok=True)
        plot_costs(costs, bandwidth, plot, f"{model}: one pass of k tokens ({cpu})")


def _print_table(result: dict, console) -> None:
    from rich import box
    from rich.table import Table

    table = Table(title=f"ms per pass of k tokens in k sequences, and x a one-token pass "
                        f"({result['cpu']}, context {result['context']}, median of "
                        f"{result['repeats']})", box=box.SIMPLE_HEAD)
    table.add_column("engine", no_wrap=True)  # whole names: the figures wrap instead
    table.add_column("floor", justify="right")
    for k in result["ks"]:
        table.add_column(f"k={k}", justify="right")
    for e in result["engines"]:
        table.add_row(f"{e['engine']} {e['variant']}" + (" (flagged)" if e.get("flags")
                                                         else ""),
                      f"{float(e['floor_ms']):.2f}",
                      *[f"{float(e['ms'][str(k)]):.2f}\n{float(e['times_one'][str(k)]):.2f}x"
                        for k in result["ks"]])
    console.print(table)
    for engine, why in result["skipped"].items():
        console.print(f"skipped {engine}: {why}")


app.command(name="step", help=BENCH_STEP_HELP)(step_command)

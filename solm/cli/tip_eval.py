"""`tip eval run` / `tip eval report`: the TIP protocol over eviction policies and budgets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from solm.core.sampling import SamplingConfig
from solm.cli.setting_options import setting_option
from solm.decode.tip.config import TipDecodeConfig
from solm.decode.tip.system import TipEngine
from solm.cli.checks import check_run_inputs
from solm.cli.console import handle_errors, info, out_console, progress
from solm.cli.flags import engine_option, gguf_type_option
from solm.cli.flags import (model_command, out_option, ConfigOption, DebugOption,
                            DeviceOption, DtypeOption, ForceOption, ModelOption, QuietOption,
                            ShardOption)
from solm.cli.job_helpers import finish_shard, sharded
from solm.cli.errors import command_group
from solm.core.errors import SolmError
from solm.eval.tip_eval import DATA_SETS, PROTOCOL

app = command_group(
    "eval",
    "Evaluate TIP against Dense, StreamingLLM and Paged H2O on maths: "
    "accuracy, live KV tokens, throughput, decode time.")

RUN_HELP = f"""Decode maths problems with every policy and budget and score the answers.

The thesis' protocol by default: {PROTOCOL['samples']} samples per problem, temperature
{PROTOCOL['temperature']}, top-p {PROTOCOL['top_p']}, batch {PROTOCOL['batch_size']}, page size
{PROTOCOL['page_size']}; budgets {', '.join(map(str, PROTOCOL['budgets']))} for the budgeted
policies (StreamingLLM, its variant that keeps the whole prompt, H2O; dense and tip take
none). The cap `--max-new-tokens` defaults
to {PROTOCOL['max_new_tokens']} (long enough for distilled reasoning traces; the TIP paper's
configuration files were not available to check their value, so set it to theirs when you
have it). `tip` runs `--model`; dense, streamingllm, streaming-prompt and h2o run `--dense-model`
(default: the same model).

Data (`--data`, repeatable): {', '.join(DATA_SETS)} (from `solm data get NAME`) or a JSONL
path with a problem and its gold answer. A problem's prompt is the problem plus the maths
instruction; correctness is the last `\\boxed{{}}` against the gold (integer match for AIME and
GSM8K, math-verify otherwise).

OUT gets `samples.jsonl` (one row per data set x problem x policy x budget x sample,
appended as each ends: rerun the same command to resume), `timing.jsonl` and `run.json`;
`tip eval report OUT` writes report.md and the plots.

Example (CPU): `tip eval run --data math500 --limit 20 --samples 2 --max-new-tokens 512 --model runs/tip/tip-sft --dense-model runs/tip/dense-sft --budgets 128,256,512 -o runs/tip/eval`
"""


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"{flag}: expected comma-separated integers, got '{text}'")
    if any(v < 1 for v in values):
        raise typer.BadParameter(f"{flag}: budgets are positive token counts")
    return values


def check_problems_fit(data: list[str], limit: Optional[int], models: set[str]) -> None:
    """Every problem's prompt fits each model's context: refused (file, line, field) before
    any model loads or any engine export."""
    from solm.core.math_task import load_problems
    from solm.core.records import Record
    from solm.decode.jobs import check_prompts_fit
    from solm.eval.tip_eval import data_file

    for spec in data:
        rows = load_problems(str(data_file(spec)[1]), math_prompt=False, limit=limit)
        records = [Record(r["id"], r["prompt"], origin=r["origin"]) for r in rows]
        for name in sorted(models):
            check_prompts_fit(name, records)


@app.command(help=RUN_HELP)
@model_command
def run(
    out: Path = out_option(..., help="Run folder (resumable)."),
    data: list[str] = typer.Option(["aime2024", "aime2025"], "--data", "-d",
                                   help="Data set name or JSONL path; repeatable."),
    model: str = ModelOption,
    dense_model: Optional[str] = typer.Option(None, help="Model of every policy but tip "
                                              "(default: --model)."),
    policies: str = typer.Option("dense,streamingllm,streaming-prompt,h2o,tip",
                                  help="Comma-separated."),
    budgets: str = typer.Option(",".join(map(str, PROTOCOL["budgets"])),
                                help="KV budgets (tokens) of the budgeted policies."),
    registers: Optional[int] = setting_option(TipEngine, "registers"),
    samples: int = setting_option(TipEngine, "samples", PROTOCOL["samples"],
                                  why="the evaluation protocol's"),
    temperature: float = setting_option(SamplingConfig, "temperature", PROTOCOL["temperature"],
                                        why="the evaluation protocol's (the thesis' sampling)"),
    top_p: float = setting_option(SamplingConfig, "top_p", PROTOCOL["top_p"],
                                  why="the evaluation protocol's (the thesis' sampling)"),
    seed: int = setting_option(SamplingConfig, "seed", help_suffix=" Sample k uses seed + k."),
    batch_size: int = typer.Option(PROTOCOL["batch_size"], min=1,
                                   help="Requests decoded together (refilled as they end)."),
    page_size: int = setting_option(TipEngine, "page_size", PROTOCOL["page_size"],
                                    why="the evaluation protocol's"),
    max_new_tokens: int = setting_option(TipDecodeConfig, "max_new_tokens",
                                         PROTOCOL["max_new_tokens"],
                                         why="the evaluation protocol's (AIME traces are long)"),
    limit: Optional[int] = typer.Option(None, min=1, help="Only the first N problems of "
                                        "each data set."),
    engine: str = engine_option(also="h2o decodes on torch only (it reads attention mass); "
                                     "under auto it does, named in run.json."),
    gguf_type: str = gguf_type_option(),
    shard: Optional[str] = ShardOption,
    dtype: str = DtypeOption,
    device: Optional[str] = DeviceOption,
    force: bool = ForceOption,
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    from solm.core.models import resolve_registers
    from solm.eval.tip_eval import (data_file, eval_points, pending, point_engine,
                                    run_tip_eval)

    points = eval_points([p.strip() for p in policies.split(",") if p.strip()],
                         _ints(budgets, "--budgets"), page_size)
    files = [data_file(spec)[1] for spec in data]  # a missing set fails before any load
    check_run_inputs(out, files)
    part, device = sharded(shard, device)
    if part is not None:
        out = part.folder(out)
        info(f"{part.tag}: every {part.count}th problem from position {part.index} -> {out}")
    registers = resolve_registers(model, registers)
    check_problems_fit(data, limit, {model, dense_model or model})
    protocol = {"samples": samples, "temperature": temperature, "top_p": top_p, "seed": seed,
                "batch_size": batch_size, "page_size": page_size,
                "max_new_tokens": max_new_tokens}
    engines = {p.label: point_engine(p, page_size, engine) for p in points}
    settings = {"model": model, "dense_model": dense_model or model, "registers": registers,
                **{k: v for k, v in protocol.items() if k != "batch_size"},
                **({"engines": engines, "gguf_type": gguf_type}
                   if set(engines.values()) != {"torch"} else {})}
    run_file = out / "run.json"
    if run_file.exists() and not force:
        before = json.loads(run_file.read_text())
        changed = {k: (before.get(k), v) for k, v in settings.items() if before.get(k) != v}
        if changed:
            k, (old, new) = next(iter(changed.items()))
            raise SolmError(f"{out} was run with {k}={old!r}, not {new!r}: its rows would mix; "
                            f"use another --out, or --force")
    if run_file.exists() and force:  # the points run before keep the engine they ran on
        earlier = json.loads(run_file.read_text()).get("engines", {})
        if earlier:
            settings["engines"] = {**earlier, **engines}
    out.mkdir(parents=True, exist_ok=True)
    run_file.write_text(json.dumps(settings, indent=1) + "\n")
    if part is not None:
        from solm.core.shard import mark_started
        mark_started(part, out, True, None)
    info(f"{len(points)} policy points x {len(data)} data set(s) x {samples} samples, "
         f"{registers} registers")
    with progress("decoding (samples)", pending(out, data, points, samples, limit,
                                                part)) as advance:
        summaries = run_tip_eval(
            out, data, points, model, dense_model, registers, protocol, limit, dtype, device,
            shard=part, engines=engines, gguf_type=gguf_type,
            on_row=lambda r: advance(status=f"{r['policy']}"
                                            f"{'' if r['budget'] is None else '@' + str(r['budget'])}"
                                            f" {r['data']}: live {r['mean_live_tokens']:.0f}"))
    finish_shard(part, out, folder=True)
    out_console.print_json(json.dumps({"out": str(out), "points": summaries}))


@app.command()
@handle_errors
def report(
    run_dir: Path = typer.Argument(..., help="A `tip eval run` folder."),
    out: Optional[Path] = out_option(None, help="Report folder (default: "
                                       "RUN_DIR/report)."),
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    """report.md, summary.json and plots of accuracy against live KV, throughput and decode
    time (one point per policy and budget, per data set), and whether the TIP model's
    registers are in use (share of steps killed; live response KV against the dense model's
    over decodes of 256+ tokens)."""
    from solm.eval.tip_report import write_tip_report

    path = write_tip_report(run_dir, out)
    info(f"-> {path}")
    out_console.print(path.read_text(), markup=False, highlight=False)

"""`pasta eval`: win rates from judgments; evaluation runs and their reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from solm.decode.pasta.config import PastaDecodeConfig
from solm.decode.sot.config import SotConfig
from solm.cli.options import sampling_options, without_seed
from solm.cli.setting_options import setting_option
from solm.decode.pasta.system import PastaEngine
from solm.cli.checks import check_paths, check_run_inputs, greater_than, judge_spec, one_of
from solm.cli.console import handle_errors, info, out_console, progress
from solm.cli.flags import engine_option, gguf_type_option
from solm.cli.flags import (loads_models, model_command, out_option, CompileOption, ConfigOption,
                            DebugOption, decode_flags, DeviceOption, DtypeOption, QuietOption,
                            ShardOption)
from solm.cli.job_helpers import finish_shard, settings_from, sharded, take_shard
from solm.cli.errors import command_group
from solm.core.errors import SolmError

app = command_group(
    "eval",
    "Quality and speed: win rates (raw and length-controlled), evaluation "
    "runs over AlpacaEval's instructions, reports with plots.")

WINRATE_HELP = """Raw and length-controlled win rates of judgments, as AlpacaEval reports them.

Reads solm's judgments (`pasta judge`) or AlpacaEval's annotation files (a JSON list or JSONL
with `instruction`, `output_1`, `output_2`, `generator_1`, `generator_2`, `preference`; 2 means
`output_2` is better, fractional values are soft). Prints one JSON object, percentages:

- `win_rate`: mean of `preference - 1` (soft, ties half), with `standard_error`;
  `discrete_win_rate` rounds each verdict first.
- `lc_win_rate` and `lc_method`: `alpaca_eval` when alpaca_eval's `df_gamed.csv` is available
  (`--gamed-csv`, `$SOLM_GAMED_CSV`, or the Hugging Face hub cache); computed exactly as the
  `alpaca_eval` package does. Otherwise `fallback_no_difficulty`: the same length GLM without
  the per-instruction difficulty term, not comparable with the leaderboard. `lc_note` says
  when the baseline or judge differ from those the difficulty terms were fitted for.
"""


@app.command(help=WINRATE_HELP)
@handle_errors
def winrate(
    annotations: Path = typer.Option(..., "--annotations", "-a", help="Judgments: solm JSONL "
                                     "or AlpacaEval annotations (JSON list or JSONL)."),
    gamed_csv: Optional[Path] = typer.Option(None, help="alpaca_eval's df_gamed.csv "
                                             "(instruction difficulties, gamed baselines)."),
    judge: Optional[str] = typer.Option(None, help="The judge's name, for the LC note (default: "
                                        "the `judge` field of solm judgments)."),
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    from solm.eval.length_control import find_gamed_csv, length_controlled
    from solm.eval.winrate import read_judgments, recorded_judge

    judgments = read_judgments(annotations)
    if judge is None:
        judge = recorded_judge(judgments)
    result = length_controlled(judgments, find_gamed_csv(gamed_csv), judge)
    result = {"win_rate": _pct(result.pop("win_rate")),
              "lc_win_rate": _pct(result.pop("lc_win_rate")), **result}
    result["standard_error"] = _pct(result["standard_error"])
    result["discrete_win_rate"] = _pct(result["discrete_win_rate"])
    result["generator_2"] = sorted({j.generator_2 for j in judgments})
    result["generator_1"] = sorted({j.generator_1 for j in judgments})
    result["judge"] = judge
    out_console.print_json(json.dumps(result))


AGREEMENT_HELP = """How far a judge agrees with a published annotator, before its verdicts are used.

Judges the pairs of an AlpacaEval annotation file (JSON list or JSONL with `instruction`,
`output_1`, `output_2`, `preference`), each in both orders through the judge's verdict cache,
and compares the judge's winner with the published one. Writes OUT (JSON) and the judgments
beside it (OUT with `.judgments.jsonl`; rerun resumes) and prints:

- `agreement` on the pairs with a published winner, its Wilson 95% `interval`, and
  `chance_inside_interval` (50% inside: the judge cannot be told from coin flips here);
- `soft_agreement` (the judge's probability on the published winner), `position_bias` (its
  lean towards the output shown first, 0 = none) and `undecided_share` (verdicts within 0.05
  of 0.5); `reading`: what its win rates can and cannot show.

AlpacaEval's published annotator is GPT-4: this is agreement with GPT-4's preferences, not
people's. `pasta prefs --judge-agreement OUT` records it and warns when chance is inside.

Example (the annotations are `results/llama-2-7b-chat-hf/alpaca_eval_gpt4/annotations.json` of
github.com/tatsu-lab/alpaca_eval): `pasta eval agreement --annotations annotations.json --judge
hf:smollm2-135m --limit 100 -o runs/agreement.json`
"""


@app.command(help=AGREEMENT_HELP)
@model_command
def agreement(
    annotations: Path = typer.Option(..., "--annotations", "-a", help="AlpacaEval annotations "
                                     "(JSON list or JSONL)."),
    out: Path = out_option(..., help="The report (JSON)."),
    judge: str = typer.Option("hf:smollm2-135m", "--judge", "-j", callback=judge_spec,
                              help="Judge backend: gemini:MODEL[@URL], openai:MODEL[@URL] or "
                              "hf:MODEL."),
    limit: Optional[int] = typer.Option(None, min=1, help="Only the first N pairs."),
    concurrency: int = typer.Option(8, min=1, help="Requests in flight."),
    cache_dir: Optional[Path] = typer.Option(None, help="Verdict cache folder (default: "
                                             "$SOLM_CACHE/judge)."),
    restart: bool = typer.Option(False, "--restart", help="The judgments beside OUT were made "
                                 "by another judge or on another annotations file: move them "
                                 "into OUT.previous-TIME/ and judge again (without it such a "
                                 "rerun is refused)."),
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    from solm.cli.console import judge_progress
    from solm.core.errors import DataError
    from solm.core.jsonl import read_jsonl, read_rows_located
    from solm.core.llm import make_client
    from solm.core.models import cache_root
    from solm.eval.agreement import agreement_report, reading
    from solm.judge.cache import VerdictCache
    from solm.judge.job import JudgeConfig, Pair, run_judge_job

    from solm.core.provenance import (check_rerun_settings, file_sha256, manifest_path,
                                      write_manifest)

    judged = out.with_name(out.name.removesuffix(".json") + ".judgments.jsonl")
    rejects = judged.with_name(judged.name.replace(".judgments.jsonl", ".rejects.jsonl"))
    check_paths([annotations], [out, judged, rejects])
    # judgments are reused by pair id: they must be this judge's, on this file's pairs
    row_settings = {"judge": judge, "annotations": file_sha256(annotations)}
    if restart:
        _move_aside(out, [out, judged, rejects, manifest_path(judged)])
    check_rerun_settings(judged, row_settings, force=False,
                         hint="pass --restart to judge again (the old files are moved aside)")
    pairs, published = [], {}
    for i, (where, row) in enumerate(read_rows_located(annotations)):
        if limit is not None and len(pairs) >= limit:
            break
        if not isinstance(row, dict):
            raise DataError("expected an object", path=where)
        for name in ("instruction", "output_1", "output_2"):
            if not isinstance(row.get(name), str):
                raise DataError("expected a string", path=where, field=name)
        pid = f"ann-{i}-{_pair_digest(row)}"
        pairs.append(Pair(pid, row["instruction"], row["output_1"], row["output_2"],
                          str(row.get("generator_1", "output_1")),
                          str(row.get("generator_2", "output_2")), index=i))
        published[pid] = row.get("preference")
    if not pairs:
        raise SolmError(f"{annotations}: no pairs")
    client = make_client(judge, batch_size=concurrency)
    with progress(f"judging {len(pairs)} published pairs with {client.spec}",
                  len(pairs)) as advance:
        summary = run_judge_job(pairs, client, judged, rejects,
                                JudgeConfig(concurrency=concurrency),
                                VerdictCache(cache_dir or cache_root() / "judge"),
                                on_update=judge_progress(advance))
    wanted = {p.id for p in pairs}
    rows = [r for r in read_jsonl(judged, skip_partial_last_line=True) if r["id"] in wanted]
    report = {"annotations": str(annotations), "judge": client.spec, "limit": limit,
              **agreement_report(rows, published),
              "judge_rejected": sum(summary.rejected.values()),
              "annotator": "the file's `annotator` (AlpacaEval: GPT-4), not people"}
    report["reading"] = reading(report)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    write_manifest(judged, "pasta eval agreement", settings_from(locals()),
                   inputs=[annotations], row_settings=row_settings,
                   extra={"report": str(out)})
    out_console.print_json(json.dumps(report))


def _pair_digest(row: dict) -> str:
    """A pair's id carries its content, so a judgment is never reused for another pair."""
    import hashlib

    text = "\x1f".join(row[k] for k in ("instruction", "output_1", "output_2"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def _move_aside(out: Path, files: list[Path]) -> None:
    import time

    from solm.core.provenance import move_aside

    aside = move_aside(files, out.with_name(out.name + time.strftime(".previous-%Y%m%d-%H%M%S")))
    if aside is not None:
        info(f"--restart: the earlier files were moved into {aside}")


def _pct(value: float | None) -> float | None:
    return None if value is None else round(float(value), 2)


RUN_HELP = """Decode AlpacaEval's instructions with several methods side by side, judge each
against the baseline, and summarise speed and quality (resumable: rerun the same command).

**Methods** (`--method KIND=MODEL` or `KIND:LABEL=MODEL`, repeatable), all decoded by solm's
runtimes so their wall times compare on equal terms:

- `sequential=MODEL`: one token per step (the baseline; the thesis' is a Baseline-SFT model);
- `apar=MODEL`: a Pasta-Lang model trained on rule annotations (APAR's rules), decoded by the
  asynchronous runtime;
- `pasta=MODEL`: a Pasta-Lang model trained on LLM annotations or past preference training;
- `sot=MODEL`: Skeleton-of-Thought on any model; the points decode as threads of one pool;
- `pdiff=MODEL[,steps_ratio=R][,confidence_threshold=C|off][,length_scale=S][,order=entropy|confidence]`:
  Planned Diffusion (`pdiff decode`): the plan autoregressively, the chunks denoised in
  parallel. Its critical path is its forward passes; the report adds forward passes and
  wall time per content token against the baseline, and chunk health (pad-only chunks,
  repeated n-grams inside chunks, well-formed answers).

Per prompt, the realized speedup is the baseline's wall time over the method's, the
theoretical speedup the baseline's tokens over the method's critical path; both are
summarised as geometric and arithmetic means. Quality: `--judge` compares each method's
outputs with the baseline's (both orders), giving raw and length-controlled win rates; with
`--reference` (e.g. AlpacaEval's gpt4_1106_preview outputs) every method is also judged
against it.

The run folder keeps `run.json`, `outputs/LABEL.jsonl` (AlpacaEval's `instruction` /
`output` / `generator`, plus timings), `judgments/` and `summary.json`;
`pasta eval report RUN_DIR` draws the plots.

Example (CPU, 30 prompts):
`pasta eval run --prompts alpaca_eval.jsonl --limit 30 -o runs/eval-cpu --method sequential=baseline-sft-cpu --method sot=smollm2-135m --method apar=pasta-sft-cpu --judge hf:smollm2-135m`
"""


@app.command(help=RUN_HELP)
@handle_errors
@sampling_options
@loads_models
def run(
    out: Path = out_option(..., help="Run folder (created; a rerun resumes)."),
    method: list[str] = typer.Option(..., "--method", help="KIND=MODEL or KIND:LABEL=MODEL; "
                                     "KIND is sequential, pasta, apar, sot or pdiff (knobs after the "
                                     "model: pdiff=M,steps_ratio=0.5). Repeatable."),
    prompts: str = typer.Option("tatsu-lab/alpaca_eval", "--prompts", "-p", help="AlpacaEval "
                                "instructions: a JSONL / JSON file with `instruction`, or the "
                                "hub dataset."),
    limit: Optional[int] = typer.Option(None, min=1, help="Only the first N instructions."),
    skip: int = typer.Option(0, min=0, help="Leave out the first N instructions (before "
                             "--limit): e.g. prompts used while choosing a recipe."),
    baseline: Optional[str] = typer.Option(None, help="Label of the baseline method (default: "
                                           "the first sequential method)."),
    judge: str = typer.Option("hf:smollm2-135m", "--judge", "-j", callback=judge_spec,
                              help="Judge backend "
                              "(see `pasta judge --help`)."),
    no_judge: bool = typer.Option(False, "--no-judge", help="Decode only (judge later by "
                                  "rerunning without this flag)."),
    reference: Optional[Path] = typer.Option(None, help="Reference outputs to judge every "
                                             "method against (AlpacaEval model_outputs)."),
    judge_mode: str = typer.Option("auto", callback=one_of("auto", "token", "reply"),
                                   help="How verdicts are read (see `pasta judge`)."),
    concurrency: int = typer.Option(8, min=1, help="Judge requests in flight."),
    rpm: Optional[float] = typer.Option(None, callback=greater_than(0),
                                        help="Judge requests per minute."),
    max_tries: int = typer.Option(4, min=1, help="Tries per verdict."),
    timeout: float = typer.Option(120.0, callback=greater_than(0), help="Seconds per judge "
                                  "request."),
    base_url: Optional[str] = typer.Option(None, help="Judge server URL."),
    gamed_csv: Optional[Path] = typer.Option(None, help="alpaca_eval's df_gamed.csv for the "
                                             "exact LC (see `pasta eval winrate`)."),
    max_new_tokens: int = setting_option(PastaDecodeConfig, "max_new_tokens",
                                         help_suffix=" Every method's (sot: skeleton and "
                                         "points together; see --sot-skeleton-tokens)."),
    sot_skeleton_tokens: int = setting_option(SotConfig, "max_skeleton_tokens",
                                              flags=("--sot-skeleton-tokens",),
                                              help_suffix=" (sot)"),
    sot_point_tokens: int = setting_option(SotConfig, "max_point_tokens",
                                           flags=("--sot-point-tokens",), help_suffix=" (sot)"),
    batch_size: int = typer.Option(1, min=1, help="Decode each method's prompts together "
                                   "(continuous batching) for a quality run: rows are then "
                                   "untimed (a row's wall time would count its batch mates), "
                                   "so no realized speedup; 1 = one at a time, timed."),
    repeats: Optional[int] = typer.Option(None, min=1, help="Decodes per request, the last "
                                          "timed (default: 2 on CUDA, 1 on a CPU after a "
                                          "warm-up decode)."),
    pool_size: int = setting_option(PastaEngine, "pool_size"),
    engine: str = engine_option(also="Every method's; under auto each method picks its own, "
                                     "named in run.json (pasta/apar/pdiff methods need a model "
                                     "trained with --positions overlap for llama.cpp; "
                                     "sequential and sot run any model there)."),
    gguf_type: str = gguf_type_option(),
    shard: Optional[str] = ShardOption,
    dtype: str = DtypeOption,
    device: Optional[str] = DeviceOption,
    compile: Optional[bool] = CompileOption,
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
    **sampling,
) -> None:
    from solm.core.models import default_device
    from solm.core.sampling import SamplingConfig
    from solm.engines.torch.compiled import should_compile
    from solm.eval.methods import DecodeSettings, Method, default_repeats, load_runners
    from solm.eval.run import (alpaca_eval_records, decode_outputs, judge_outputs,
                               write_run_file)
    from solm.eval.summary import summarize

    methods = [Method.parse(spec) for spec in method]
    labels = [m.label for m in methods]
    if len(set(labels)) != len(labels):
        raise SolmError("two --method share a label; name them with KIND:LABEL=MODEL")
    if baseline is None:
        baseline = next((m.label for m in methods if m.kind == "sequential"), labels[0])
    if baseline not in labels:
        raise SolmError(f"--baseline {baseline}: no --method has that label "
                        f"({', '.join(labels)})")
    if reference is not None and not reference.exists():
        raise SolmError(f"--reference {reference}: file not found")
    check_run_inputs(out, [prompts, reference, gamed_csv])
    records = alpaca_eval_records(prompts, limit, skip)
    part, device = sharded(shard, device)
    if part is not None:
        out = part.folder(out)
        records = take_shard(part, records, out, folder=True)
        if not no_judge:
            info("--shard decodes only: judge by rerunning without --shard after `solm merge`")
            no_judge = True
        if not records:
            return
    device = device or default_device()
    repeats = repeats or default_repeats(device)
    from solm.core.generation import resolve_decode

    flags = decode_flags(**without_seed(sampling))
    seed = sampling["seed"]
    decoding = {m.label: resolve_decode(m.model, flags) for m in methods}
    for label, d in decoding.items():
        info(f"{label}: decoding with {d.describe()}")
    settings = {label: DecodeSettings(
        max_new_tokens=max_new_tokens, sampling=SamplingConfig(seed=seed, **d.values),
        sot_skeleton_tokens=sot_skeleton_tokens, sot_point_tokens=sot_point_tokens)
        for label, d in decoding.items()}
    compile_on = should_compile(compile, len(records) * len(methods)
                                * min(max_new_tokens, pool_size), device)
    decode_record = {"max_new_tokens": max_new_tokens, **flags, "seed": seed,
                     "sot_skeleton_tokens": sot_skeleton_tokens,
                     "sot_point_tokens": sot_point_tokens, "dtype": dtype,
                     "batch_size": batch_size,
                     "by_method": {label: {**d.values, "from": d.sources}
                                   for label, d in decoding.items()}}
    write_run_file(out, methods, baseline, {
        "prompts": prompts, "limit": limit, "skip": skip,
        "judge": None if no_judge else judge,
        "reference": None if reference is None else str(reference),
        "decode": decode_record, "repeats": repeats, "compile": compile_on,
        "machine": _machine(device)})
    runners = load_runners(methods, settings, dtype=dtype, device=device, pool_size=pool_size,
                           compile=compile_on, engine=engine, gguf_type=gguf_type)
    engines = {label: r.engine_name for label, r in runners.items()}
    if set(engines.values()) != {"torch"}:
        info("engines: " + ", ".join(f"{k} {v}" for k, v in engines.items()))
    write_run_file(out, methods, baseline, {
        "prompts": prompts, "limit": limit, "skip": skip,
        "judge": None if no_judge else judge,
        "reference": None if reference is None else str(reference),
        "decode": decode_record, "repeats": repeats, "compile": compile_on,
        "machine": _machine(device), "engines": engines, "gguf_type": gguf_type})
    with progress(f"decoding {len(records)} prompts x {len(methods)} methods",
                  len(records) * len(methods)) as advance:
        def on_row(label: str, row: dict | None) -> None:
            status = None if row is None else (
                f"{label}: {row['content_tokens']} tokens"
                + (f" in {row['wall_s']:.1f} s" if row.get("wall_s") else ""))
            advance(status=status)

        decode_outputs(runners, records, out, repeats, on_row, batch_size=batch_size)
    del runners
    if not no_judge:
        judge_options = {"concurrency": concurrency, "rpm": rpm, "max_tries": max_tries,
                         "mode": judge_mode, "timeout": timeout, "base_url": base_url}
        with progress(f"judging with {judge}", None) as advance:
            summaries = judge_outputs(out, labels, baseline, judge, judge_options, reference,
                                      on_update=lambda s: advance(0, status=(
                                          f"judged {s.judged} cached {s.cache_hits}")))
        for name, s in summaries.items():
            if s["rejected"]:
                info(f"{name}: {sum(s['rejected'].values())} pair(s) rejected "
                     f"({s['rejected']}); rerun to retry transient ones")
    summary = summarize(out, gamed_csv)
    finish_shard(part, out, folder=True)
    out_console.print_json(json.dumps({label: {
        "realized_speedup": m["speed"]["realized_speedup"]["geomean"],
        "theoretical_speedup": m["speed"]["theoretical_speedup"]["geomean"],
        "win_rate": (m.get("vs_baseline") or {}).get("win_rate"),
        "lc_win_rate": (m.get("vs_baseline") or {}).get("lc_win_rate"),
        "prompts": m["speed"]["prompts"]} for label, m in summary["methods"].items()}))


def _machine(device: str) -> dict:
    import platform

    import torch

    from solm.engines.bandwidth import cpu_description

    out = {"device": str(device), "cpu": cpu_description(), "torch": torch.__version__,
           "threads": torch.get_num_threads(), "python": platform.python_version()}
    if torch.device(device).type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return out


REPORT_HELP = """report.md and PNG plots for one or more run folders: win rate against
realized speedup, theoretical speedup and parallelism, one point per method, the baseline
starred, the Pareto frontier dashed. Summaries are recomputed from the run folders."""


@app.command(help=REPORT_HELP)
@handle_errors
def report(
    run_dirs: list[Path] = typer.Argument(..., help="Run folders of `pasta eval run`."),
    out: Optional[Path] = out_option(None, help="Report folder (default: "
                                       "the first run folder)."),
    gamed_csv: Optional[Path] = typer.Option(None, help="alpaca_eval's df_gamed.csv."),
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    from solm.eval.report import report_files, write_report

    check_paths([gamed_csv], report_files(run_dirs, out or run_dirs[0]))
    path = write_report(run_dirs, out or run_dirs[0], gamed_csv)
    out_console.print(str(path))

"""`decode_command`: a system's decode command generated from its registry entry, beside
`train_command`. Every decode command has the same shape: one prompt or a file of prompts,
`-o`, `--shard`, path and rerun checks, model loading, progress, manifest, plus the system's
decode settings (its config's fields), its sampling settings (a model's
generation_config.json over solm's defaults, a flag over both) and its engine settings."""

from __future__ import annotations

import dataclasses
import inspect
import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Optional

import typer

from solm.cli.checks import check_paths
from solm.cli.console import console, handle_errors, info, out_console, progress
from solm.cli.flags import (loads_models, ConfigOption, DebugOption, DedupeOption,
                            DeviceOption, DtypeOption, ForceOption, ModelOption, QuietOption,
                            ShardOption)
from solm.cli.job_helpers import (dedupe_list, finish_shard, report_duplicates, settings_from,
                                  sharded, take_shard)
from solm.cli.options import config_parameters, with_parameters
from solm.core.generation import MODEL_SETTINGS
from solm.core.sampling import SamplingConfig
from solm.core.settings import cli_name, is_setting
from solm.decode.registry import DecodeSystem, decode_system


def _values(cls: type, options: dict[str, Any], fixed: dict[str, Any]) -> dict[str, Any]:
    """Field name -> value for the settings of `cls`: parsed options, else `fixed`."""
    out = {}
    for f in dataclasses.fields(cls):
        if is_setting(f) and cli_name(f) in options:
            out[f.name] = options[cli_name(f)]
        elif is_setting(f) and f.name in fixed:
            out[f.name] = fixed[f.name]
    return out


def decode_parameters(system: DecodeSystem, defaults: dict[str, Any],
                      why: dict[str, str]) -> list[inspect.Parameter]:
    """The system's options: sampling, decode config and engine settings (by field)."""
    sampling = config_parameters(SamplingConfig, defaults, only=system.sampling,
                                 from_model=MODEL_SETTINGS, why=why)
    config = config_parameters(system.config_cls, defaults, why=why)
    engine = config_parameters(system.engine_cls, defaults, why=why)
    return [*config, *sampling, *engine]


def default_row_settings(system: DecodeSystem, defaults: dict[str, Any], model: str,
                         dtype: str) -> dict[str, Any]:
    """The row settings of this command at its defaults: what an output made before a
    setting existed was decoded with."""
    sampling = SamplingConfig(**_values(SamplingConfig, {}, defaults))
    config = system.config_cls(**_values(system.config_cls, {}, defaults), sampling=sampling)
    engine = system.engine_cls(**_values(system.engine_cls, {}, defaults))
    return system.row_settings(config, engine, model, dtype)


def run_decode(system: DecodeSystem, text: str | None, model: str, prompts: Path | None,
               out: Path, limit: int | None, shard: str | None, dedupe: bool, force: bool,
               dtype: str, device: str | None, quiet: bool, options: dict[str, Any],
               defaults: dict[str, Any], command: str) -> None:
    from solm.core.errors import SolmError
    from solm.core.generation import resolve_decode
    from solm.core.jsonl import is_stdio, read_jsonl
    from solm.core.paths import outputs_beside
    from solm.core.provenance import check_rerun_settings, write_manifest
    from solm.core.records import Record, load_records
    from solm.core.notices import held
    from solm.decode.jobs import (check_prompts_fit, check_refusals, decode_records,
                                  pending_jobs, undone)

    # notices of what was chosen (the engine) wait until the input is checked: a refused
    # command prints its one error line
    with ExitStack() as early:
        early.enter_context(held())
        if text is not None and prompts is not None:
            raise SolmError("give one prompt as an argument or --prompts FILE, not both")
        if text is not None and not text.strip():
            raise SolmError("the prompt argument is empty: give a question to answer")
        source = prompts or system.demo_prompts
        if text is None and source is None:
            raise SolmError("give a prompt as an argument, or --prompts FILE")
        flags = {k: options.get(k) for k in system.sampling if k in MODEL_SETTINGS}
        decoding = resolve_decode(model, flags, defaults)
        sampling_values = {**_values(SamplingConfig, options, defaults),
                           **{k: decoding.values[k] for k in flags}}
        sampling = SamplingConfig(**sampling_values)
        cfg = system.config_cls(**_values(system.config_cls, options, defaults), sampling=sampling)
        if hasattr(cfg, "check"):
            cfg.check()
        engine = system.engine_cls(**_values(system.engine_cls, options, defaults))
        system.prepare(cfg, engine, model)
        part, device = sharded(shard, device, text_mode=text is not None)
        if part is not None:
            if is_stdio(out):
                raise SolmError("--shard writes a shard file beside --out: give a file, not -")
            out = part.file(out)
        row_settings = system.row_settings(cfg, engine, model, dtype)
        records: list[Record] = []
        mixed = False
        if text is None:
            check_paths([source], outputs_beside(out))
            mixed = check_rerun_settings(out, row_settings, force,
                                         defaults=default_row_settings(system, defaults, model,
                                                                       dtype))
            duplicates = dedupe_list(dedupe)
            records = list(load_records(str(source), limit=limit, duplicates=duplicates))
            report_duplicates(duplicates, source)
            if not records:
                raise SolmError(f"{source}: no prompts; nothing was decoded")
            records = take_shard(part, records, out)
            if not records:
                return
            left = undone(records, out, system.samples(engine), system.per_sample)
            if not left:  # a finished output: said without loading the model
                info(f"{out}: every prompt is already decoded; nothing to do")
                out_console.print_json(json.dumps({"done": 0, "skipped": len(records) *
                                                   system.samples(engine)}))
                finish_shard(part, out)
                return
        # refused before any weights load or any engine export: a bad row, a prompt too long
        asked = records if text is None else [Record("cli", text)]
        for rec in asked:
            system.check_record(rec)
        check_prompts_fit(model, asked)
        early.close()  # the input holds: what was chosen for the run is said now
        info(f"decoding with {decoding.describe()}")
        info(f"loading {model} ...")
        m, tok = system.load(model, engine, dtype, device)
        base_model_hint(model, system.name)
        runner = system.runner(m, tok, cfg, engine, len(records), text is not None)
        if text is not None:
            (job,), _ = pending_jobs([Record("cli", text)], tok, set())
            answer, lines = system.answer_one(runner, job, engine)
            out_console.print(answer, markup=False, highlight=False, soft_wrap=True)
            for line in lines:
                console.print(line, markup=False, highlight=False)
            return
        to_stdout = is_stdio(out)  # records on stdout; texts, progress and the summary on stderr
        if not to_stdout:
            # the settings go beside the output before its first row (once the model loaded): an
            # interrupted run's rerun is checked against them, never mixed silently
            write_manifest(out, command, {"model": model, "prompts": str(source),
                                          "out": str(out), "dtype": dtype, **row_settings},
                           inputs=[source], model=model, row_settings=row_settings,
                           mixed=mixed, extra={"finished": False})
        written: list[dict] = []
        samples = system.samples(engine)
        with progress(system.display.describe(runner), len(records) * samples) as advance:
            def on_row(summary, row: dict) -> None:
                written.append(row)
                advance(status=system.display.status(summary, row))

            summary = decode_records(runner, records, out, tok, runner.row,
                                     system.summary_cls.start(cfg), samples, system.per_sample,
                                     on_row)
        rows = written if to_stdout else list(read_jsonl(out))
        from solm.engines.cost import record_tokens_per_pass

        record_tokens_per_pass(model, system.name, cfg, rows)  # what `--engine auto` weighs
        extra = system.display.report(rows, summary, runner, engine)
        settings = {"model": model, "prompts": str(source), "out": str(out), "limit": limit,
                    "shard": shard, "dtype": dtype, "device": device,
                    **settings_from(dataclasses.asdict(engine)), **row_settings}
        write_manifest(out, command, settings, inputs=[source], model=model,
                       extra={"summary": summary.to_dict(), **extra,
                              "refused_ids": sorted({r["id"] for r in summary.refused}),
                              "finished": True},
                       row_settings=row_settings, mixed=mixed)
        finish_shard(part, out)
        if not quiet and system.display.shown_rows:
            for row in rows[-min(len(records), system.display.shown_rows):]:
                info(shown_row(system, row))
        scope = "format (this run)" if to_stdout else "format (whole file)"
        printed = {**summary.to_dict(), **{(scope if k == "format" else k): v
                                           for k, v in extra.items()}}
        (console if to_stdout else out_console).print_json(json.dumps(printed))
        check_refusals(summary, str(out))


def shown_row(system: DecodeSystem, row: dict) -> str:
    """A written row as the console shows it: its id, its figures and its text, the model's
    words and the figures escaped (a `[killed by step 3]` is text, not markup)."""
    from rich.markup import escape

    return (f"[bold cyan]{escape(str(row['id']))}[/] "
            f"[dim]({escape(system.display.row_figures(row))})[/]\n"
            f"{escape(system.display.row_text(row))}")


KEPT_MODEL = {"pasta": "pasta-bonbon-cpu", "pdiff": "pdiff-cpu", "tip": "tip-sft-cpu"}


def base_model_hint(model: str, system: str) -> None:
    """A model trained for no system writes no control tags: its decode is a plain
    sequential one, which a user should hear before reading the figures."""
    from solm.core.models import model_system

    if system == "sot" or model_system(model) is not None:
        return
    kept = KEPT_MODEL.get(system)
    console.print(f"[yellow]note:[/] {model} was not trained for {system}: it writes no "
                  f"control tags, so this decode runs as plain sequential decoding"
                  + (f"; a trained model: -m {kept} (`solm models` lists the kept ones)"
                     if kept else "; train one first (see `" + system + " sft --help`)"),
                  highlight=False)


def decode_command(app: typer.Typer, system_name: str, help: str, name: str = "decode",
                   defaults: dict[str, tuple[Any, str]] | None = None,
                   prompts_help: str | None = None, command: str | None = None) -> None:
    """Register `name` on `app`: the decode command of the registered system `system_name`.
    `defaults`: this command's own defaults, by field name, each with its reason
    (`(value, why)`), over the configs' (the only place a command's default may differ from
    its config's; the reason shows in the option's help)."""
    system = decode_system(system_name)
    why = {**system.command_default_reasons, **{k: w for k, (_, w) in (defaults or {}).items()}}
    defaults = {**system.command_defaults, **{k: v for k, (v, _) in (defaults or {}).items()}}
    command = command or f"{system_name} {name}"
    demo = ("default: built-in demo prompts" if system.demo_prompts is not None else
            "or give one prompt as the argument")
    prompts_help = prompts_help or (f"JSONL of prompts (`prompt`, `instruction`/`input`, "
                                    f"`question`, `problem`, `conversations` or `messages` "
                                    f"rows), `-` for standard input ({demo}).")

    def decode(text: Optional[str] = typer.Argument(
                   None, help="One prompt to answer instead of --prompts: the answer goes to "
                              "standard output, its figures to standard error; nothing is "
                              "written to files."),
               model: str = ModelOption,
               prompts: Optional[Path] = typer.Option(None, "--prompts", "-p",
                                                      help=prompts_help),
               out: Path = typer.Option(Path(system.default_out), "--out", "-o",
                                        help="Rows are appended here (one per prompt"
                                             f"{' and sample' if system.per_sample else ''}); "
                                             "a rerun resumes. `-`: rows to standard output, "
                                             "everything else to standard error."),
               limit: Optional[int] = typer.Option(None, min=1, help="Only the first N "
                                                   "prompts."),
               shard: Optional[str] = ShardOption, dedupe: bool = DedupeOption,
               force: bool = ForceOption, dtype: str = DtypeOption,
               device: Optional[str] = DeviceOption,
               config: Optional[Path] = ConfigOption, quiet: bool = QuietOption,
               debug: bool = DebugOption, **options) -> None:
        run_decode(system, text, model, prompts, out, limit, shard, dedupe, force, dtype,
                   device, quiet, options, defaults, command)

    decode.__name__ = name.replace("-", "_")
    decode.__doc__ = help
    app.command(name=name, help=help)(handle_errors(loads_models(with_parameters(
        decode, decode_parameters(system, defaults, why)))))

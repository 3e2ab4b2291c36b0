"""Shared CLI plumbing: --config files, one-line errors, progress bars, quiet mode."""

from __future__ import annotations

import functools
import math
import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

from solm.core.errors import SolmError
from solm.core.models import DEFAULT_MODEL

console = Console(stderr=True, soft_wrap=True)
out_console = Console()
_STATE = {"quiet": False, "debug": bool(os.environ.get("SOLM_DEBUG"))}


def silence_library_bars() -> None:
    """--quiet: no progress bars from transformers, datasets or the hub either."""
    import warnings

    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    os.environ["TQDM_DISABLE"] = "1"
    # the libraries' deprecation notices are for solm's developers, not for its users
    warnings.filterwarnings("ignore", category=FutureWarning,
                            module=r"(transformers|peft|torch|torchao|accelerate|trl)(\..*)?$")
    if "huggingface_hub" in sys.modules:
        sys.modules["huggingface_hub"].utils.disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging
        hf_logging.disable_progress_bar()
    if "datasets" in sys.modules:
        sys.modules["datasets"].disable_progress_bars()


def set_global(quiet: bool | None = None, debug: bool | None = None) -> None:
    if quiet is not None:
        _STATE["quiet"] = quiet
        if quiet:
            silence_library_bars()
    if debug is not None:
        _STATE["debug"] = debug or _STATE["debug"]


def is_quiet() -> bool:
    return _STATE["quiet"]


def info(message: str) -> None:
    if not _STATE["quiet"]:
        console.print(message)


def _load_config(ctx: typer.Context, param, value: Path | None) -> Path | None:
    """Eager callback: the YAML file's keys become the command's defaults (flags override)."""
    if value is None:
        return None
    path = Path(value)
    if not path.exists():
        raise typer.BadParameter(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(e, "problem", None) or type(e).__name__
        raise typer.BadParameter(f"{where}: invalid YAML: {problem}")
    except (UnicodeDecodeError, OSError) as e:
        raise typer.BadParameter(f"{path}: cannot read it as text ({type(e).__name__})")
    if not isinstance(data, dict):
        raise typer.BadParameter(f"{path}: expected a mapping of option names to values")
    known = {p.name for p in ctx.command.params}
    defaults = {}
    for key, v in data.items():
        name = str(key).replace("-", "_")
        if name not in known:
            raise typer.BadParameter(f"{path}: unknown option '{key}' for this command "
                                     f"(known: {', '.join(sorted(known - {'config'}))})")
        defaults[name] = v
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    return path


ConfigOption = typer.Option(
    None, "--config", help="YAML file whose keys are this command's options; flags override it.",
    callback=_load_config, is_eager=True, exists=False)
QuietOption = typer.Option(False, "--quiet", "-q", help="No progress bars or chatter.")
ModelOption = typer.Option(DEFAULT_MODEL, "--model", "-m", help="Alias (`solm models`), Hugging "
                           "Face folder or hub id, or .gguf file.")
DebugOption = typer.Option(False, "--debug", help="Show full tracebacks on errors.")


def one_of(*allowed: str) -> Callable:
    """Option callback: the value must be one of `allowed` (checked before anything loads)."""

    def check(value: str | None) -> str | None:
        if value is not None and value not in allowed:
            raise typer.BadParameter(f"'{value}' is not one of {', '.join(allowed)}")
        return value

    return check


def judge_spec(value: str | None) -> str | None:
    """Option callback: a judge / annotator backend spec (gemini:M, openai:M, hf:M), checked
    before anything loads."""
    if value is None:
        return None
    from solm.core.llm.spec import parse_spec

    try:
        parse_spec(value)
    except SolmError as e:
        raise typer.BadParameter(str(e)) from None
    return value


def greater_than(bound: float) -> Callable:
    """Option callback: the value must be > bound (an open lower end, which min= cannot say)."""

    def check(value: float | None) -> float | None:
        if value is not None and not value > bound:
            raise typer.BadParameter(f"must be > {bound:g}, got {value:g}")
        return value

    return check


def finite_above(bound: float) -> Callable:
    """Option callback: a finite value > bound (inf and nan are refused)."""

    def check(value: float | None) -> float | None:
        if value is not None and not (math.isfinite(value) and value > bound):
            raise typer.BadParameter(f"must be a finite number > {bound:g}, got {value:g}")
        return value

    return check


def finite_at_least(bound: float) -> Callable:
    """Option callback: a finite value >= bound (inf and nan are refused)."""

    def check(value: float | None) -> float | None:
        if value is not None and not (math.isfinite(value) and value >= bound):
            raise typer.BadParameter(f"must be a finite number >= {bound:g}, got {value:g}")
        return value

    return check


MAX_NEW_TOKENS_CAP = 1 << 20  # far beyond any pool here; larger values are typos
from solm.core.sampling import MAX_SEED  # noqa: E402
TEMPERATURE_HELP = "0 = greedy (default: the model's generation_config.json, else 0)."
SeedOption = typer.Option(0, min=0, max=MAX_SEED, help="Sampling seed (ignored when greedy).")
def probability_mass(value: float | None) -> float | None:
    """Option callback for top-p: in (0, 1]."""
    if value is not None and not (math.isfinite(value) and 0 < value <= 1):
        raise typer.BadParameter(f"must be in (0, 1], got {value:g}")
    return value


# decode settings whose default is the model's generation_config.json (solm.core.generation)
TemperatureOption = typer.Option(None, callback=finite_at_least(0.0), help=TEMPERATURE_HELP)
TopPOption = typer.Option(None, callback=probability_mass, help="Nucleus sampling mass "
                          "(default: the model's, else 1).")
RepetitionPenaltyOption = typer.Option(
    None, callback=finite_above(0), help="Above 1 discourages tokens a thread already wrote "
    "(control tokens exempt); small models loop without it. Default: the model's "
    "generation_config.json, else 1.")
NoRepeatNgramOption = typer.Option(None, min=0, help="N > 0: a thread may not repeat an N-gram "
                                   "it already wrote (0 = off; default: the model's, else 0).")


def decode_flags(temperature: float | None, top_p: float | None,
                 repetition_penalty: float | None, no_repeat_ngram: int | None) -> dict:
    """The decode flags `solm.core.generation.resolve_decode` reads (None: not given)."""
    return {"temperature": temperature, "top_p": top_p,
            "repetition_penalty": repetition_penalty, "no_repeat_ngram": no_repeat_ngram}


def check_device(value: str | None) -> str | None:
    """Option callback: a device torch can use here (cpu, cuda, cuda:N, mps)."""
    if value is None:
        return None
    if not re.fullmatch(r"cpu|mps|cuda(:\d+)?", value):
        raise typer.BadParameter(f"'{value}' is not a device: use cpu, cuda, cuda:N or mps")
    if value.startswith("cuda"):
        import torch
        if not torch.cuda.is_available():
            raise typer.BadParameter(f"'{value}': this torch build sees no CUDA device")
        index = int(value.split(":")[1]) if ":" in value else 0
        if index >= torch.cuda.device_count():
            raise typer.BadParameter(f"'{value}': only {torch.cuda.device_count()} CUDA "
                                     f"device(s) here")
    if value == "mps":
        import torch
        if not torch.backends.mps.is_available():
            raise typer.BadParameter("'mps': not available on this machine")
    return value


ForceOption = typer.Option(False, "--force", help="Append to an output whose rows were made "
                           "with other settings (the manifest then says mixed_settings).")
ShardOption = typer.Option(
    None, "--shard", help="K/N: only the prompts at positions K, K+N, K+2N, ... (after "
    "--limit), written beside the output as NAME.shard-K-of-N.jsonl (a folder output: "
    "OUT/shard-K-of-N/); `auto` takes K and N from the RANK / WORLD_SIZE of accelerate launch "
    "or torchrun (and each process its own GPU). `solm merge` joins the shards by id.")


def sharded(spec: Optional[str], device: Optional[str], text_mode: bool = False):
    """(the Shard or None, the device this process decodes on) for a --shard value."""
    from solm.core.errors import SolmError
    from solm.core.shard import Shard

    shard = Shard.parse(spec)
    if shard is not None and text_mode:
        raise SolmError("--shard splits a prompts file; it does not apply to one prompt")
    return shard, (shard.device(device) if shard else device)


def take_shard(part, records: list, out: Path, folder: bool = False) -> list:
    """This process's prompts of a --shard; an empty shard still leaves its (empty) output,
    so `solm merge` finds every shard."""
    from solm.core.shard import mark_started

    if part is None:
        return records
    mine = part.take(records)
    info(f"{part.tag}: {len(mine)} of {len(records)} prompts -> {out}")
    # records, or (index, record) pairs (AlpacaEval's)
    mark_started(part, out, folder, [r.id if hasattr(r, "id") else r[1].id for r in mine])
    if not mine:
        if folder:
            Path(out).mkdir(parents=True, exist_ok=True)
        else:
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            Path(out).touch()
        finish_shard(part, out, folder)
    return mine


def finish_shard(part, out: Path, folder: bool = False) -> None:
    """A sharded command ended normally: its marker says so, and `solm merge` takes it."""
    from solm.core.shard import mark_finished

    mark_finished(part, out, folder)


DedupeOption = typer.Option(False, "--dedupe", help="Keep only the first row of each repeated "
                            "id (counted), instead of refusing the file.")

# the LLM annotators' settings, shared by `pasta annotate` and `tip annotate`
ConcurrencyOption = typer.Option(8, min=1, help="LLM: requests in flight.")
RpmOption = typer.Option(None, callback=greater_than(0),
                         help="LLM: requests per minute (token bucket).")
MaxTriesOption = typer.Option(4, min=1, help="LLM: tries per row (429/5xx/timeouts/bad "
                                            "replies).")
TimeoutOption = typer.Option(120.0, callback=greater_than(0), help="LLM: seconds per request.")
BaseUrlOption = typer.Option(None, help="LLM: server URL (overrides the spec's).")
LlmTemperatureOption = typer.Option(0.0, min=0.0, help="LLM: sampling temperature.")
MaxOutputTokensOption = typer.Option(4096, min=1, help="LLM: cap on each reply's length.")
SplitOption = typer.Option("train", help="Split, for hub datasets.")


def dedupe_list(dedupe: bool) -> list[str] | None:
    """The `duplicates` argument of `load_records` for a --dedupe flag."""
    return [] if dedupe else None


def annotation_records(input: str, split: str, limit: int | None, seed: int | None,
                       dedupe: bool) -> list:
    """The records an annotation job reads: the first N, or a seeded random N with --seed;
    refuses an input with none."""
    from solm.core.records import load_records, sample_records

    duplicates = dedupe_list(dedupe)
    if seed is not None and limit is not None:
        records = sample_records(load_records(input, split=split, duplicates=duplicates),
                                 limit, seed)
    else:
        records = list(load_records(input, split=split, limit=limit, duplicates=duplicates))
    report_duplicates(duplicates, input)
    if not records:
        raise SolmError(f"{input}: no rows to annotate; nothing was done")
    return records


def llm_annotation(records: list, annotator: str, output, rejects, count, cfg,
                   base_url: str | None, timeout: float, task=None):
    """Run the resumable LLM annotation job with a progress bar; returns its summary.
    `task` is what to ask (default: Pasta-Lang's)."""
    import asyncio

    from solm.annotate.llm_job import annotate_with_llm
    from solm.core.llm import make_client

    client = make_client(annotator, base_url=base_url, timeout=timeout,
                         batch_size=cfg.concurrency)
    with progress(f"annotating with {client.spec}", len(records)) as advance:
        counter = settled_counter(advance)

        def update(s):
            rejected = sum(s.rejected.values())
            counter(s.skipped_done + s.accepted + rejected,
                    f"accepted {s.accepted} rejected {rejected} retrying {s.retrying}")

        return asyncio.run(annotate_with_llm(records, client, output, rejects, count, cfg,
                                             on_update=update, task=task))


def report_duplicates(duplicates: list[str] | None, source: object) -> None:
    if duplicates:
        console.print(f"[yellow]warning:[/] --dedupe: {len(duplicates)} row(s) of {source} "
                      f"repeat an earlier id and were left out")


DtypeOption = typer.Option("auto", callback=one_of("auto", "fp32", "bf16", "fp16"),
                           help="auto (bf16 where the device computes it fast, else fp32), "
                                "fp32, bf16, fp16.")
CompileOption = typer.Option(
    None, "--compile/--no-compile", show_default=False,
    help="Run decode steps as graphs compiled per shape bucket (torch.compile; cached on "
         "disk). Default: on for CUDA, and on a CPU for jobs long enough to repay the "
         "compilation (see README \"Fast decode step\").")
QuantizeOption = typer.Option(None, callback=one_of("int8", "int4"),
                              help="Weight-only quantization for decoding (torchao): int8 "
                                   "(CPU, CUDA) or int4 (CUDA). Outputs agree with the "
                                   "full-precision model, they are not equal to it.")
DeviceOption = typer.Option(None, callback=check_device, help="cpu, cuda, cuda:N or mps "
                            "(default: cuda when available, else cpu).")


def _print_version(value: bool) -> None:
    if value:
        from solm import __version__
        out_console.print(f"solm {__version__}")
        raise typer.Exit()


VersionOption = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                             help="Print solm's version and exit.")


def handle_errors(fn: Callable) -> Callable:
    """Turn user errors into one red line and a non-zero exit (traceback only with --debug)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if "quiet" in kwargs or "debug" in kwargs:
            set_global(kwargs.get("quiet"), kwargs.get("debug"))
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, typer.BadParameter):
            raise
        except KeyboardInterrupt:
            console.print("[yellow]interrupted; rerun the same command to resume[/]")
            raise typer.Exit(130)
        except (SolmError, FileNotFoundError, ValueError) as e:
            if _STATE["debug"]:
                raise
            console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False)
            raise typer.Exit(1)
        except OSError as e:  # a folder where a file was expected, a read-only place, ...
            if _STATE["debug"]:
                raise
            where = f"{e.filename}: " if e.filename else ""
            console.print(f"[bold red]error:[/] {escape(where + str(e.strerror or e))}",
                          highlight=False)
            raise typer.Exit(1)

    return wrapper


@contextmanager
def progress(description: str, total: int | None) -> Iterator[Callable[..., None]]:
    """Yield `advance(n=1, **fields)`; a rich bar with counts and ETA unless --quiet."""
    if _STATE["quiet"]:
        yield lambda n=1, **kw: None
        return
    columns = [SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
               MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("eta"),
               TimeRemainingColumn(), TextColumn("{task.fields[status]}")]
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task(description, total=total, status="")

        def advance(n: int = 1, status: str | None = None) -> None:
            if status is not None:
                bar.update(task, advance=n, status=status)
            else:
                bar.update(task, advance=n)

        yield advance


def settled_counter(advance: Callable[..., None]) -> Callable[[int, str], None]:
    """`update(settled, status)` for jobs that report a running total: moves `advance`'s bar
    by the change since the last call."""
    done = [0]

    def update(settled: int, status: str) -> None:
        advance(settled - done[0], status=status)
        done[0] = settled

    return update


def judge_progress(advance: Callable[..., None]) -> Callable[[Any], None]:
    """An `on_update` for the judge job that moves a progress bar by settled pairs."""
    counter = settled_counter(advance)

    def update(s) -> None:
        rejected = sum(s.rejected.values())
        counter(s.skipped_done + s.judged + rejected,
                f"judged {s.judged} rejected {rejected} cached {s.cache_hits}")

    return update


def check_paths(inputs: Iterable[object], outputs: Iterable[object]) -> None:
    """Every command's one guard: no file it writes (output, manifest, summary, plot,
    rejects) is a file it reads, through links (`solm.core.paths.refuse_overlap`)."""
    from solm.core.paths import refuse_overlap, refuse_unwritable

    outputs = [None if o is None else str(o) for o in outputs]
    refuse_overlap([None if i is None else str(i) for i in inputs], outputs)
    refuse_unwritable(outputs)


def check_run_inputs(run_dir: Path, inputs: list) -> None:
    """A run writes everything under its folder (run.json, outputs/, judgments/,
    summary.json): no input may lie there."""
    folder = Path(run_dir).resolve()
    for source in inputs:
        if source is None or not Path(str(source)).exists():
            continue
        path = Path(str(source)).resolve()
        if path == folder or folder in path.parents:
            raise SolmError(f"{source}: lies in the run folder {run_dir}, which this command "
                            f"writes; choose another --out or move the file")
    check_paths([], [Path(run_dir) / "run.json"])  # the folder's place is writable


def settings_from(local_vars: dict[str, Any]) -> dict[str, Any]:
    """A command's settings for its manifest (paths as strings, no config/secret objects)."""
    simple = (str, int, float, bool, type(None), Path)
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in local_vars.items()
            if k not in ("config",) and not k.startswith("_") and isinstance(v, simple)}


def show_control_tokens(model: str, system: str, shown: list[str], num_registers: int = 16):
    """Add `system`'s control tokens to `model`'s tokenizer, print the `shown` ones with their
    ids, and return the tokenizer (the `tokens` command of every system app)."""
    from solm.core.vocabulary import add_control_tokens
    from solm.core.models import load_tokenizer

    tok = load_tokenizer(model)
    added = add_control_tokens(None, tok, system, num_registers=num_registers)
    out_console.print(f"{added} tokens added to {model}'s tokenizer ({len(tok)} total)")
    for t in shown:
        out_console.print(f"  {tok.convert_tokens_to_ids(t):>6}  {t}")
    return tok

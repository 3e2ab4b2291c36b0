"""`solm`: the umbrella app; `solm pasta ...` is the same as `pasta ...`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from solm.cli import bench_step, cache, data, export, pasta, pdiff, repro, tip
from solm.cli.console import handle_errors, out_console
from solm.cli.flags import (model_command, model_option, ConfigOption, DebugOption,
                            DEFAULT_MODEL, QuietOption, VersionOption)
from solm.cli.check_engines import CHECK_ENGINES_HELP, check_engines_command
from solm.cli.check_model import CHECK_MODEL_HELP, check_model_command
from solm.cli.errors import command_group
from solm.cli.judge import JUDGE_HELP, judge
from solm.cli.serve import SERVE_HELP, serve

app = command_group(
    "solm",
    "Self-orchestrating language models: PASTA, TIP (Thinking in Place), Planned Diffusion.")
app.add_typer(pasta.app, name="pasta")
app.add_typer(tip.app, name="tip")
app.add_typer(pdiff.app, name="pdiff")
app.add_typer(data.app, name="data")
app.add_typer(repro.app, name="repro")
app.add_typer(export.app, name="export")
app.add_typer(cache.app, name="cache")
app.add_typer(bench_step.app, name="bench")
app.command(name="serve", help=SERVE_HELP)(serve)
app.command(name="judge", help=JUDGE_HELP)(judge)
app.command(name="check-model", help=CHECK_MODEL_HELP)(handle_errors(check_model_command))
app.command(name="check-engines", help=CHECK_ENGINES_HELP)(check_engines_command)


@app.callback()
def main(version: bool = VersionOption) -> None:
    """Keeps the app a command group and gives it `--version`."""


@app.command()
@handle_errors
def models(config: Optional[Path] = ConfigOption, quiet: bool = QuietOption,
           debug: bool = DebugOption) -> None:
    """List model aliases and whether their converted copy is cached."""
    from solm.core.models import (ALIASES, ARTIFACTS, artifact_state, cache_root,
                                  is_complete_folder)

    for name, spec in ALIASES.items():
        folder = cache_root() / "models" / name
        state = f"cached at {folder}" if is_complete_folder(folder) else "not converted yet"
        out_console.print(f"[bold]{name}[/]: {spec.description} — {state}")
    for name, description in ARTIFACTS.items():
        out_console.print(f"[bold]{name}[/]: {description} — {artifact_state(name)}")


@app.command()
@model_command
def prepare(
    model: str = model_option(DEFAULT_MODEL, help="Alias or .gguf file."),
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    """Convert a GGUF model (alias or file) once into the safetensors cache."""
    from solm.core.errors import SolmError
    from solm.core.models import ALIASES, resolve_model_path

    if model not in ALIASES and not model.endswith(".gguf"):
        raise SolmError(f"--model {model}: prepare converts an alias ({', '.join(ALIASES)}) or "
                        f"a .gguf file; other models need no preparation")
    out_console.print(resolve_model_path(model))


@app.command()
@handle_errors
def merge(
    out: Path = typer.Argument(..., help="The unsharded output: a file (its shards are "
                               "NAME.shard-K-of-N.jsonl beside it) or a run folder (its "
                               "shards are OUT/shard-K-of-N/)."),
    prompts: Optional[str] = typer.Option(None, "--prompts", "-p", help="A file output: the "
                                          "prompts the shards split, to order the rows as "
                                          "they are and check every id is there once."),
    limit: Optional[int] = typer.Option(None, min=1, help="With --prompts: the --limit the "
                                        "sharded command was given."),
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    """Join the outputs of a command run with `--shard K/N` (or `--shard auto` under
    accelerate launch / torchrun) by prompt id. All N shards must be there; an id in two
    shards is refused. A run folder's JSONL files are merged file by file; then rerun the
    same command without --shard on the folder to finish it (judging, summary): it resumes
    and finds every prompt decoded."""
    import json

    from solm.core.records import load_records
    from solm.core.shard import merge_file, merge_folder
    from solm.cli.checks import check_paths

    if prompts:
        check_paths([prompts], [out])

    if out.is_dir() and any(out.glob("shard-*-of-*")):
        if prompts:
            raise typer.BadParameter("--prompts orders a file output; a folder's files hold "
                                     "several rows per prompt", param_hint="--prompts")
        result = merge_folder(out)
    else:
        ids = ([r.id for r in load_records(prompts, limit=limit)] if prompts else None)
        result = merge_file(out, ids)
    out_console.print_json(json.dumps(result))


if __name__ == "__main__":
    app()

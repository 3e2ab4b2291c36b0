"""Shared CLI plumbing: --config files, one-line errors, progress bars, quiet mode."""

from __future__ import annotations

import functools
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import typer
import yaml
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

from solm.core.errors import SolmError
from solm.core.models import DEFAULT_MODEL

console = Console(stderr=True, soft_wrap=True)
out_console = Console()
_STATE = {"quiet": False, "debug": bool(os.environ.get("SOLM_DEBUG"))}


def set_global(quiet: bool | None = None, debug: bool | None = None) -> None:
    if quiet is not None:
        _STATE["quiet"] = quiet
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
        raise typer.BadParameter(f"{path}: invalid YAML: {e}")
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
            console.print(f"[bold red]error:[/] {e}")
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


def settings_from(local_vars: dict[str, Any]) -> dict[str, Any]:
    """A command's settings for its manifest (paths as strings, no config/secret objects)."""
    simple = (str, int, float, bool, type(None), Path)
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in local_vars.items()
            if k not in ("config",) and not k.startswith("_") and isinstance(v, simple)}


def show_control_tokens(model: str, system: str, shown: list[str], num_registers: int = 16):
    """Add `system`'s control tokens to `model`'s tokenizer, print the `shown` ones with their
    ids, and return the tokenizer (the `tokens` command of every system app)."""
    from solm.core.control_tokens import add_control_tokens
    from solm.core.models import load_tokenizer

    tok = load_tokenizer(model)
    added = add_control_tokens(None, tok, system, num_registers=num_registers)
    out_console.print(f"{added} tokens added to {model}'s tokenizer ({len(tok)} total)")
    for t in shown:
        out_console.print(f"  {tok.convert_tokens_to_ids(t):>6}  {t}")
    return tok

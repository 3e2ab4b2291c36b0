"""Consoles, quiet and debug state, one-line errors, progress bars."""

from __future__ import annotations

import functools
import os
import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import typer
import typer.rich_utils
from rich.console import Console
from rich.table import Table as _RichTable
from rich.text import Text as _RichText
from rich.markup import escape
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

from solm.core.errors import SolmError


console = Console(stderr=True, soft_wrap=True)


out_console = Console()


_STATE = {"quiet": False, "debug": bool(os.environ.get("SOLM_DEBUG"))}


def silence_library_deprecations() -> None:
    """The libraries' deprecation notices (a transformers FutureWarning on every decode) are
    for solm's developers, not for its users: never shown by the CLI."""
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning,
                            module=r"(transformers|peft|torch|torchao|accelerate|trl)(\..*)?$")


silence_library_deprecations()


def silence_library_bars() -> None:
    """--quiet: no progress bars from transformers, datasets or the hub either."""
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    os.environ["TQDM_DISABLE"] = "1"
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


def _library_notice(message: str) -> None:
    from rich.markup import escape

    info(escape(message))  # a path or an option is not rich markup


def _listen_to_the_library() -> None:
    from solm.core.notices import listen

    listen(_library_notice)


_listen_to_the_library()


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


class _HelpTable(_RichTable):
    """typer's help tables with nothing cut: an option's names (long, short and negative)
    share one cell, one name a line (`--keep-promises` over `--no-keep-promises`), in a
    column at least as wide as its longest name, and the three columns typer would keep for
    the other names are dropped; the types and help wrap instead, never cut at the
    panel's edge."""

    def add_row(self, *renderables, **kwargs):
        cells = list(renderables)
        if len(cells) >= 6:  # an options panel: [required,] long, short, -long, -short, ...
            names = [c for c in cells[-6:-2] if str(getattr(c, "plain", c)).strip()]
            merged = _RichText("")
            for i, name in enumerate(names):
                if i:
                    merged.append("\n")
                merged.append_text(name if isinstance(name, _RichText) else _RichText(name))
            cells = [*cells[:-6], merged, *cells[-2:]]
        for k, cell in enumerate(cells):
            parts = getattr(cell, "renderables", None)  # typer's help: rich Columns of texts
            if parts:
                # Markdown help (one option's prose) as its text: a table cannot measure
                # Markdown, and sized it past the panel's edge, which cut it mid-word
                parts = [t if isinstance(t, _RichText) else
                         _RichText(" ".join(str(getattr(t, "markup", t)).replace("`", "")
                                            .split()))
                         for t in parts]
                cells[k] = _RichText("\n").join(parts)
            if isinstance(cells[k], _RichText):  # a long word folds, never ends in `…`
                cells[k].overflow = "fold"
        super().add_row(*cells, **kwargs)
        for column in self.columns:
            column.overflow = "fold"
        if len(renderables) >= 6:
            # whole names: rich then narrows the types and help columns to fit, and only
            # those (a minimum width on the names instead let the table outgrow the panel)
            self.columns[len(cells) - 3].no_wrap = True


typer.rich_utils.Table = _HelpTable

"""`solm data`: get the data sets the commands and Makefile targets read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from solm.cli.console import handle_errors, info, out_console, progress
from solm.cli.flags import ConfigOption, DebugOption, QuietOption
from solm.cli.errors import command_group

app = command_group(
    "data",
    "Data sets from the Hugging Face hub as solm JSONL, in one data folder "
    "(`--data-dir`, else $SOLM_DATA, else ~/.cache/solm/data).")

DataDirOption = typer.Option(None, "--data-dir", "-d", help="The data folder (default: "
                             "$SOLM_DATA, else ~/.cache/solm/data).")

GET_HELP = """Download data sets from the Hugging Face hub (raw files at a pinned revision)
and write each as solm JSONL into the data folder, with its source, files, revision and
row count in the folder's SOURCE.json. A set already there is kept (`--force` rebuilds it).

Names: see `solm data list`; `gsm8k` is both splits, `aime` both years.

Without the hub, `--from FILE` converts a local copy: the hub's own file (JSON list, JSONL
or Parquet), or JSONL holding the hub's rows (extra fields are ignored).

Examples:

- `solm data get alpaca_eval alpaca_eval_gpt4 dolly math500 gsm8k aime`
- `solm data get slimorca --limit 20000` (the first 20,000 rows of 518k)
- `solm data get math500 --from my_copies/math500.jsonl --data-dir data`
"""


@app.command(help=GET_HELP)
@handle_errors
def get(
    names: list[str] = typer.Argument(..., help="Data sets (`solm data list`)."),
    source: Optional[list[Path]] = typer.Option(None, "--from", help="Convert this local copy "
                                                "instead of downloading (one set; repeat for "
                                                "a set of several files)."),
    revision: Optional[str] = typer.Option(None, help="A hub commit, tag or branch instead of "
                                           "the pinned revision."),
    limit: Optional[int] = typer.Option(None, min=1, help="Keep only the first N rows."),
    force: bool = typer.Option(False, "--force", help="Rebuild a set already on disk."),
    data_dir: Optional[Path] = DataDirOption,
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    from solm.core.errors import SolmError
    from solm.data.get import data_root, get_set
    from solm.data.sets import resolve_names

    sets = resolve_names(names)
    if source and len(sets) != 1:
        raise SolmError("--from converts one set at a time: name one set")
    folder = data_root(data_dir)
    from solm.cli.checks import check_paths
    from solm.data.get import SOURCE_FILE

    check_paths(source or [], [*(folder / ds.filename for ds in sets), folder / SOURCE_FILE])
    results = []
    with progress("data sets", len(sets)) as advance:
        for ds in sets:
            built = get_set(ds, folder, local=source, revision=revision, limit=limit,
                            force=force)
            results.append({"name": built.name, "path": str(built.path), "rows": built.rows,
                            "already_there": built.skipped})
            if built.skipped:
                info(f"{ds.name}: already in {built.path} ({built.rows} rows; --force rebuilds)")
            advance(status=ds.name)
    out_console.print_json(json.dumps(results))


@app.command(name="list")
@handle_errors
def list_sets(
    data_dir: Optional[Path] = DataDirOption,
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    """The known data sets, their full sizes, and which are in the data folder."""
    from rich.table import Table

    from solm.data.get import data_root, listing

    folder = data_root(data_dir)
    rows = listing(folder)
    table = Table(title=f"solm data sets (data folder: {folder})")
    for name in ("set", "hub repository", "rows", "download", "on disk"):
        table.add_column(name, overflow="fold")
    for r in rows:
        source = r["from"][:12] if r["from"] and r["from"] != "local copy" else r["from"]
        here = f"{r['rows_on_disk']:,} rows ({source})" if r["on_disk"] else "no"
        table.add_row(r["name"], r["repo"], f"{r['rows']:,}", f"{r['download_mb']:g} MB", here)
    out_console.print(table)

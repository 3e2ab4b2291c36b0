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


def existing_output(out: Path, settings: dict) -> bool:
    """True when `out` already holds the rows these settings make (its manifest says so);
    False when there is nothing there yet. Anything else there is refused: replacing it
    silently would lose it (`--force` replaces)."""
    from solm.core.errors import SolmError
    from solm.core.provenance import manifest_path, read_manifest

    if not out.is_file() or out.stat().st_size == 0:
        return False
    manifest = manifest_path(out)
    recorded = read_manifest(manifest).get("row_settings") if manifest.exists() else None
    if recorded is None:
        raise SolmError(f"{out} exists and no manifest says what made it: choose another "
                        f"--out, or --force to replace it")
    if recorded != settings:
        what = ", ".join(f"{k}={recorded.get(k)!r} (now {v!r})" for k, v in settings.items()
                         if recorded.get(k) != v)
        raise SolmError(f"{out} holds problems made with {what}: choose another --out, or "
                        f"--force to replace it")
    return True


MAKE_HELP = """Generate a reasoning task's problems with their exact answers and the solver's
step-by-step solutions, as solm JSONL (`question`, `solution`, `answer`, `task`): what
`tip annotate -i` (whose output `tip sft --data` reads), `tip grpo --data` and `tip eval run
--data` read. No hub, no model: the same task, count and seed always give the same file, and
two seeds never share an id (train on one seed, evaluate on another). An existing output is
kept: made with the same settings, nothing is done; with others, the command refuses unless
`--force` replaces it.

Tasks:

- `tracking`: variables changed by a numbered list of operations (modulo 10), the final
  value of one asked; the solution writes one step per operation, each restating the whole
  state, so every older step stops mattering (TIP's registers drop them) while the prompt
  stays needed to the end.
- `recall`: tracking's operations plus `x = y from step k` (x takes the value y had right
  after step k): a recalled step's line must stay alive until its reader, however far, while
  the others die at the next step; which ones is decided by the problem. Rows carry `needs`
  (per line, the lines it reads), which `tip annotate --rule needs` reads.

Examples:

- `solm data make tracking -o runs/tip/tracking_train.jsonl --n 2000 --seed 1`
- `solm data make tracking -o runs/tip/tracking_test.jsonl --n 200 --seed 2`
- `solm data make recall -o runs/tip/recall_train.jsonl --n 2000 --seed 1`
"""

TASKS = ("tracking", "recall")
# each task's fewest and most operations when the command does not say
OPERATIONS = {"tracking": (6, 30), "recall": (12, 36)}


@app.command(help=MAKE_HELP)
@handle_errors
def make(
    task: str = typer.Argument(..., help=f"The task ({', '.join(TASKS)})."),
    out: Path = typer.Option(..., "--out", "-o", help="The JSONL file to write (an existing "
                             "one made with other settings is refused; see --force)."),
    n: int = typer.Option(1000, "--n", min=1, help="How many problems."),
    seed: int = typer.Option(0, help="Problems differ by seed; ids name it."),
    variables: int = typer.Option(3, min=2, max=8, help="Variables per problem."),
    min_ops: Optional[int] = typer.Option(None, min=1, help="Fewest operations (tracking: 6, "
                                          "recall: 12)."),
    max_ops: Optional[int] = typer.Option(None, min=1, help="Most operations (tracking: 30, "
                                          "recall: 36; counts are log-uniform in between: "
                                          "most short, a long tail)."),
    recall_share: float = typer.Option(0.3, min=0.0, max=1.0, help="recall: the share of "
                                       "operations that recall an earlier step."),
    max_open: int = typer.Option(6, min=1, max=15, help="recall: at most this many earlier "
                                 "steps wait for a reader at once (live steps a trace needs "
                                 "beside the last: keep it under the registers)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing output made "
                               "with other settings (or with no manifest beside it)."),
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    from solm.cli.checks import check_paths
    from solm.core.errors import SolmError
    from solm.core.jsonl import write_jsonl
    from solm.core.provenance import write_manifest

    if task not in TASKS:
        raise SolmError(f"unknown task {task!r}: expected one of {', '.join(TASKS)}")
    min_ops = OPERATIONS[task][0] if min_ops is None else min_ops
    max_ops = OPERATIONS[task][1] if max_ops is None else max_ops
    if min_ops > max_ops:
        raise SolmError(f"--min-ops {min_ops} is above --max-ops {max_ops}")
    from solm.cli.errors import current_context, given_explicitly

    ctx = current_context()
    for name in ("recall_share", "max_open"):
        if task != "recall" and ctx is not None and given_explicitly(ctx, name):
            raise SolmError(f"--{name.replace('_', '-')} applies to the recall task only")
    check_paths([], [out])
    settings = {"task": task, "n": n, "seed": seed, "variables": variables,
                "min_ops": min_ops, "max_ops": max_ops}
    if task == "recall":
        settings.update(recall_share=recall_share, max_open=max_open)
    if not force and existing_output(out, settings):
        info(f"{out}: already made with these settings; nothing to do")
        out_console.print_json(json.dumps({"out": str(out), "rows": 0, "skipped": True,
                                           **settings}))
        return
    if task == "recall":
        from solm.data.recall import make_rows as recall_rows

        rows = recall_rows(n, seed, variables, min_ops, max_ops, recall_share, max_open)
    else:
        from solm.data.tracking import make_rows

        rows = make_rows(n, seed, variables, min_ops, max_ops)
    write_jsonl(out, rows)
    write_manifest(out, "solm data make", settings, inputs=[], row_settings=settings)
    info(f"{out}: {len(rows)} {task} problems (seed {seed})")
    out_console.print_json(json.dumps({"out": str(out), "rows": len(rows), **settings}))

"""`solm repro`: the per-system reports of `make repro-cpu-*` and the README's table."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from solm.cli.console import handle_errors, info, out_console
from solm.cli.flags import ConfigOption, DebugOption, QuietOption
from solm.cli.errors import command_group

app = command_group(
    "repro",
    "Reports of the reproduction runs (`make repro-cpu-<system>`).")


@app.command()
@handle_errors
def report(
    system: str = typer.Argument(..., help="pasta, pdiff or tip."),
    run: Path = typer.Argument(..., help="The system's folder of the run "
                               "(e.g. runs/repro-cpu/pasta)."),
    common: Optional[Path] = typer.Option(None, help="pasta, pdiff: the folder with the shared "
                                          "SFT rows and Baseline-SFT (runs/repro-cpu/common)."),
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    """Write RUN/REPORT.md and RUN/summary.json from the run's own files: its steps and their
    times (stamps), the data slices, training curves and losses, the preference or GRPO
    figures, and the evaluation's table and plots. Run by the last step of each
    `make repro-cpu-<system>`; rerun it any time."""
    from solm.eval.repro_report import write_report

    path = write_report(system, run, common)
    info(f"wrote {path} and {path.with_name('summary.json')}")


@app.command()
@handle_errors
def table(
    repro: Path = typer.Argument(Path("runs/repro-cpu"), help="The run folder of "
                                 "`make repro-cpu` (REPRO=)."),
    readme: Optional[Path] = typer.Option(None, help="Also write the table into this Markdown file "
                                          "(a README, a results file), between its repro-table "
                                          "markers."),
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    """The per-system summary table (markdown) from each system's summary.json."""
    from solm.eval.repro_report import repro_table, update_readme

    text = repro_table(repro)
    out_console.print(text, markup=False, highlight=False, soft_wrap=True)
    if readme:
        update_readme(readme, text)
        info(f"updated {readme}")

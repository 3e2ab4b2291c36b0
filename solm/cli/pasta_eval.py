"""`pasta eval`: win rates from judgments; evaluation runs and their reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from solm.cli.common import DebugOption, handle_errors, out_console
from solm.cli.errors import SolmGroup

app = typer.Typer(cls=SolmGroup, name="eval", no_args_is_help=True,
                  rich_markup_mode="markdown",
                  help="Quality and speed: win rates (raw and length-controlled), evaluation "
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
    debug: bool = DebugOption,
) -> None:
    from solm.eval.length_control import find_gamed_csv, length_controlled
    from solm.eval.winrate import read_judgments

    judgments = read_judgments(annotations)
    if judge is None:
        judge = _recorded_judge(annotations)
    result = length_controlled(judgments, find_gamed_csv(gamed_csv), judge)
    result = {"win_rate": _pct(result.pop("win_rate")),
              "lc_win_rate": _pct(result.pop("lc_win_rate")), **result}
    result["standard_error"] = _pct(result["standard_error"])
    result["discrete_win_rate"] = _pct(result["discrete_win_rate"])
    result["generator_2"] = sorted({j.generator_2 for j in judgments})
    result["generator_1"] = sorted({j.generator_1 for j in judgments})
    result["judge"] = judge
    out_console.print_json(json.dumps(result))


def _pct(value: float | None) -> float | None:
    return None if value is None else round(float(value), 2)


def _recorded_judge(path: Path) -> str | None:
    """The `judge` field of solm judgments (None for AlpacaEval files, which have none)."""
    from solm.eval.winrate import read_judgment_field

    return read_judgment_field(path, "judge")

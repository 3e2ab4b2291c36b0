"""`--help` at 80 columns (a narrow terminal, or piped) shows every option name whole."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cli_walk import commands
from solm.cli.main import app

COMMANDS = sorted(commands(), key=lambda pc: pc[0])


@pytest.mark.parametrize("path,cmd", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_help_at_80_columns_cuts_no_option_name(path, cmd):
    r = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80", "TERMINAL_WIDTH": "80"})
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    cells = {cell.strip() for line in lines for cell in line.strip("│ ").split("  ")}
    for param in cmd.params:
        for name in [*param.opts, *param.secondary_opts]:
            if name.startswith("--"):  # whole, in a cell of its own: never `--repetition-p…`
                assert name in cells, name

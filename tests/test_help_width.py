"""`--help` at 80 columns (a narrow terminal, or piped) shows every option name whole, and
every word of every option's help."""

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


def _help_words(text: str) -> list[str]:
    """The words of an option's help as a reader sees them (rich markup and Markdown
    backticks aside), each long enough that a cut one would not match by chance."""
    import re

    plain = re.sub(r"\[/?[a-z ]*\]", "", text.replace("\\\\", "\\"))
    return [w for w in re.findall(r"[A-Za-z]{6,}", plain)]


@pytest.mark.parametrize("path,cmd", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_help_at_80_columns_cuts_no_help_word(path, cmd):
    """Each option's help, read back from the rendered panel (box and name columns dropped,
    lines joined), holds every word of the help text whole: a help column that outgrows the
    panel is cut at its edge ("Peak learning r")."""
    import re

    r = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80", "TERMINAL_WIDTH": "80"})
    assert r.exit_code == 0, r.output
    rendered = set(re.findall(r"[A-Za-z]{6,}", r.output))
    # a word too long for its column folds onto the next line: the page with the box and
    # every space removed joins it back ("unreadab" + "le")
    squashed = re.sub(r"[\s│]", "", r.output)
    for param in cmd.params:
        for word in _help_words(getattr(param, "help", None) or ""):
            assert word in rendered or word in squashed, (param.name, word)

"""Every leaf command of the solm app with its path (`("pasta", "decode")`), walked from the
app itself so a new command is covered the day it lands."""

from typer.main import get_command

from solm.cli.main import app


def commands(cmd=None, path=()):
    cmd = cmd or get_command(app)
    if hasattr(cmd, "commands"):
        for name, sub in cmd.commands.items():
            yield from commands(sub, path + (name,))
    else:
        yield path, cmd

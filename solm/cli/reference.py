"""The command reference, generated from the typer app: every command with its usage, its
description and each option's flags, type, default and help, as Markdown (the docs site's
"Commands" page is this text; `tests/test_docs.py` checks it covers every command)."""

from __future__ import annotations

import html
import inspect
from typing import Iterator


def _root():
    import typer

    from solm.cli.main import app

    return typer.main.get_command(app)


def command_paths(root=None, path: tuple[str, ...] = ("solm",)) -> Iterator[tuple]:
    """(path, command) for the root and every command and group under it, depth first in
    the order `--help` lists them."""
    import click

    root = root if root is not None else _root()
    yield path, root
    subs = getattr(root, "commands", None)
    if subs is None:
        return
    ctx = click.Context(root, info_name=path[-1])
    for name in root.list_commands(ctx):
        yield from command_paths(subs[name], path + (name,))


def _escape(text: str) -> str:
    """Plain text for Markdown: tags such as `<sync/>` shown, not read as HTML."""
    return html.escape(text, quote=False)


def _param_line(param, ctx) -> str | None:
    """The option as `--help` shows it: its flags and metavar, then its help with the
    default, range and choices typer adds."""
    record = param.get_help_record(ctx)
    if record is None:  # hidden, or an argument without help
        if param.param_type_name != "argument":
            return None
        record = (param.name.upper(), "")
    flags, help_text = record
    help_text = " ".join(help_text.split())
    line = f"- `{flags}`" + (" (argument)" if param.param_type_name == "argument" else "")
    return line + (f": {_escape(help_text)}" if help_text else "")


def _usage(cmd, path: tuple[str, ...]) -> str:
    import click

    ctx = click.Context(cmd, info_name=" ".join(path))
    pieces = cmd.collect_usage_pieces(ctx)
    return " ".join((" ".join(path), *pieces))


def command_markdown(path: tuple[str, ...], cmd) -> str:
    """One command's section."""
    level = "#" * min(2 + len(path) - 1, 6)
    out = [f"{level} `{' '.join(path)}`", ""]
    description = inspect.cleandoc(cmd.help or "").replace("\b\n", "").strip()
    if description:
        out += ["```text", description, "```", ""]
    out += ["Usage:", "", "```text", _usage(cmd, path), "```", ""]
    import click

    ctx = click.Context(cmd, info_name=" ".join(path))
    lines = [x for x in (_param_line(p, ctx) for p in cmd.params) if x]
    if lines:
        out += ["Options:", "", *lines, ""]
    subs = getattr(cmd, "commands", None)
    if subs:
        out += ["Commands: " + ", ".join(f"`{' '.join(path)} {name}`" for name in subs), ""]
    return "\n".join(out)


def command_reference() -> str:
    """The whole reference: every command of `solm` (and so of `pasta`, `tip`, `pdiff`,
    which are `solm pasta`, `solm tip`, `solm pdiff`)."""
    return "\n".join(command_markdown(path, cmd) for path, cmd in command_paths())

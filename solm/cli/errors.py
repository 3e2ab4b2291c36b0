"""Command-line errors as one line: usage errors (a bad option value, a missing option, an
unknown command) print `error: ... (see 'CMD --help')` on stderr and exit 2, instead of
click's multi-line usage box. Every solm app is built on `SolmGroup`, which also makes every
float option of every command refuse NaN and infinities (click's own check reads NaN as a
range error, and accepts inf wherever no bound is set)."""

from __future__ import annotations

import typer

import sys

from typer.core import TyperGroup
from typer.exceptions import Abort

import math

try:  # typer >= 0.23 vendors click
    from typer._click.core import ParameterSource
    from typer._click.exceptions import BadParameter, ClickException, NoArgsIsHelpError
except ImportError:  # pragma: no cover
    from click.core import ParameterSource
    from click.exceptions import BadParameter, ClickException, NoArgsIsHelpError


def current_context():
    """The click context of the command running now (typer's vendored click, or click)."""
    try:
        from typer._click.globals import get_current_context
    except ImportError:  # a typer that uses click itself
        from click import get_current_context
    return get_current_context(silent=True)


def given_explicitly(ctx, name: str) -> bool:
    """Whether option `name` came from the command line or a --config file (not a default)."""
    return ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE,
                                              ParameterSource.DEFAULT_MAP)


def _is_float_option(param) -> bool:
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None:
        return False
    annotation = descriptor.annotation
    if annotation is float:
        return True
    args = getattr(annotation, "__args__", ())
    return bool(args) and all(a in (float, type(None)) for a in args) and float in args


class _FiniteCoercion:
    """Wraps a float option's coercion: NaN and +-inf are refused before any other check."""

    def __init__(self, inner):
        self.inner = inner

    def coerce(self, value, param, ctx):
        number = value
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                number = None  # not a number at all: typer's own message says so
        if isinstance(number, float) and not math.isfinite(number):
            raise BadParameter(f"must be a finite number, got {value!r}", ctx=ctx, param=param)
        return self.inner.coerce(value, param=param, ctx=ctx)


def finite_float_options(command) -> None:
    """Give every float option of `command` (and of its subcommands) the finite check."""
    for param in getattr(command, "params", []):
        if _is_float_option(param):
            runtime = param.get_runtime_param()
            if not isinstance(runtime, _FiniteCoercion):
                param._runtime_param = _FiniteCoercion(runtime)
    for sub in getattr(command, "commands", {}).values():
        finite_float_options(sub)


class SolmGroup(TyperGroup):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        finite_float_options(self)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True,
             **extra):
        if not standalone_mode:
            return super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                                standalone_mode=False, **extra)
        try:
            rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                              standalone_mode=False, **extra)
        except NoArgsIsHelpError:  # a bare group: show its help, as click does
            return super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                                standalone_mode=True, **extra)
        except ClickException as e:
            ctx = getattr(e, "ctx", None)
            where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            print(f"error: {e.format_message()}{where}", file=sys.stderr)
            sys.exit(e.exit_code)
        except Abort:
            print("aborted", file=sys.stderr)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


def command_group(name: str, help: str) -> typer.Typer:
    """A typer app of commands as every solm group is made: its own error handling
    (`SolmGroup`), help when called bare, markdown in help texts."""
    return typer.Typer(cls=SolmGroup, name=name, no_args_is_help=True,
                       rich_markup_mode="markdown", help=help)

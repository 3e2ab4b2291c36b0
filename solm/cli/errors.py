"""Command-line errors as one line: usage errors (a bad option value, a missing option, an
unknown command) print `error: ... (see 'CMD --help')` on stderr and exit 2, instead of
click's multi-line usage box. Every solm app is built on `SolmGroup`."""

from __future__ import annotations

import sys

from typer.core import TyperGroup
from typer.exceptions import Abort

try:  # typer >= 0.23 vendors click
    from typer._click.exceptions import ClickException, NoArgsIsHelpError
except ImportError:  # pragma: no cover
    from click.exceptions import ClickException, NoArgsIsHelpError


class SolmGroup(TyperGroup):
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

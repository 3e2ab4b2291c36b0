"""User-facing errors: the CLI prints their message in one line, without a traceback."""

from __future__ import annotations


class SolmError(Exception):
    """An error the user can fix (bad input, missing file, offline hub...)."""


class DataError(SolmError):
    """Bad input data, located by file, line and field."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None,
                 field: str | None = None):
        self.path, self.line, self.field = path, line, field
        where = ""
        if path is not None:
            where = f"{path}"
            if line is not None:
                where += f":{line}"
        if field is not None:
            where += f" [field '{field}']" if where else f"field '{field}'"
        super().__init__(f"{where}: {message}" if where else message)


def look_up(table: dict, name: str, kind: str):
    """`table[name]`, or a SolmError naming the `kind` and every name the table has."""
    try:
        return table[name]
    except KeyError:
        raise SolmError(f"unknown {kind} {name!r}: expected one of {', '.join(table)}") \
            from None

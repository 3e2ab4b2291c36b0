"""One-line notices from the library to whoever runs it (the CLI prints them to standard
error): what was chosen for the user and why, what was written to the cache. A library user
who registers nothing sees nothing."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable

_LISTENERS: list[Callable[[str], None]] = []


def listen(fn: Callable[[str], None]) -> None:
    """Call `fn(message)` for every notice from now on."""
    if fn not in _LISTENERS:
        _LISTENERS.append(fn)


def notice(message: str) -> None:
    if _HELD:
        _HELD[-1].append(message)
        return
    for fn in list(_LISTENERS):
        fn(message)


_HELD: list[list[str]] = []


@contextmanager
def held():
    """Notices said inside the block wait and are said when it ends without an error; an
    error drops them, so a refused command prints its one error line and nothing chosen for
    a run that never started."""
    _HELD.append([])
    try:
        yield
    except BaseException:
        _HELD.pop()
        raise
    kept = _HELD.pop()
    for message in kept:
        notice(message)

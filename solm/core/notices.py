"""One-line notices from the library to whoever runs it (the CLI prints them to standard
error): what was chosen for the user and why, what was written to the cache. A library user
who registers nothing sees nothing."""

from __future__ import annotations

from typing import Callable

_LISTENERS: list[Callable[[str], None]] = []


def listen(fn: Callable[[str], None]) -> None:
    """Call `fn(message)` for every notice from now on."""
    if fn not in _LISTENERS:
        _LISTENERS.append(fn)


def notice(message: str) -> None:
    for fn in list(_LISTENERS):
        fn(message)

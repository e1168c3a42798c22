"""Signals held back in their handler, for steps that must not stop half-way.

A signal mask holds a signal back from one thread only: the kernel gives it to another thread of
the process (a progress bar's, a process pool's), and Python runs the handler in the main thread
all the same. So the handler itself holds it: the CLI's handler (pagesim.interrupts) asks
`is_held` and, while a `held` block is open, notes the signal (`note`) and returns; when the
outermost block ends, the first signal noted is raised again, and the handler, no longer held,
does what it does. Where no handler asks (a library caller's defaults), nothing is held.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

_open: list[None] = []  # one entry per `held` block open
_noted: list[int] = []  # signals that arrived within one


def is_held() -> bool:
    return bool(_open)


def note(signum: int) -> None:
    """A signal arrived while held: raised again when the outermost block ends."""
    _noted.append(signum)


def forget() -> None:
    """Drop signals noted earlier (a new command's handlers start clean)."""
    _noted.clear()


@contextmanager
def held() -> Iterator[None]:
    """Within the block, a handler that asks holds its signals; the first arrives again (raised
    in this thread) when the outermost block ends."""
    _open.append(None)
    try:
        yield
    finally:
        _open.pop()
        if not _open and _noted:
            signum = _noted[0]
            _noted.clear()
            signal.raise_signal(signum)  # its handler runs before this returns to the caller

"""Ctrl-C and SIGTERM: stop where the program is, clean up as for any error, say what was kept.

Both signals raise `Interrupted` (a BaseException, so no `except Exception` swallows it, and not
a KeyboardInterrupt, which typer would turn into a silent exit 130 before `pagesim.cli.main`
sees it). Every `finally` and context manager on the way out runs: the staging folder of an
output is removed (reports.output_folder), busy sweep workers are stopped
(simulator.studies.executors). A command says beforehand what an interruption would leave
(`note`), and `main` prints that as one line; the exit status is 128 + the signal's number.

A signal's exception cannot leave a finalizer or a weakref callback (Python reports it as
"Exception ignored" and goes on): a signal that lands there, e.g. in an import's module-lock
callback, would be lost. The `sys.unraisablehook` set here sends such a signal again to the
main thread from a timer thread `REDELIVER_AFTER_S` later, once the hook has returned (a signal
raised in the hook itself would be swallowed too), so it reaches the program where it runs
then. A real signal (`pthread_kill`), not `_thread.interrupt_main`: it waits, as the first did,
while the main thread holds signals back (reports/output_folder.py `signals_held`, around the
steps that must not stop half-way).

The handler also holds a signal back inside a `held_signals.held` block (simulator/core/
held_signals.py): a signal mask covers one thread only, and where other threads run (a process
pool's, a progress bar's) the kernel may give them the signal, whose handler Python runs in the
main thread all the same.
"""

from __future__ import annotations

import _thread
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from pagesim.simulator.core import held_signals

_CAUGHT = (signal.SIGINT, signal.SIGTERM)
REDELIVER_AFTER_S = 0.01
_notes: list[Callable[[], str]] = []


class Interrupted(BaseException):
    """SIGINT (Ctrl-C) or SIGTERM arrived; `signum` says which (its only argument: SimPy
    re-raises an exception from a process as `type(e)(*e.args)`, which must rebuild it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    def __str__(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _raise(signum: int, _frame: FrameType | None) -> None:
    if held_signals.is_held():
        held_signals.note(signum)  # raised again when the held block ends
        return
    raise Interrupted(signum)


def _send_to_main_thread(signum: int) -> None:
    if signal.getsignal(signum) is not _raise:
        return  # the block has ended meanwhile: the default action would kill the process
    main = threading.main_thread().ident
    if hasattr(signal, "pthread_kill") and main is not None:
        signal.pthread_kill(main, signum)
    else:  # no POSIX threads' signals (Windows): the handler runs, held or not
        _thread.interrupt_main(signal.Signals(signum))


@contextmanager
def raising_on_signals() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise `Interrupted`; the old handlers come back
    after it (tests call the CLI in-process)."""
    previous = {s: signal.getsignal(s) for s in _CAUGHT}
    previous_hook = sys.unraisablehook

    def redeliver(unraisable: Any) -> None:
        """A signal's `Interrupted` was swallowed (raised in a finalizer): raise it again."""
        if isinstance(unraisable.exc_value, Interrupted):
            signum = unraisable.exc_value.signum
            timer = threading.Timer(REDELIVER_AFTER_S, _send_to_main_thread, (signum,))
            timer.daemon = True
            timer.start()
            return
        previous_hook(unraisable)

    for s in _CAUGHT:
        signal.signal(s, _raise)
    sys.unraisablehook = redeliver
    _notes.clear()
    held_signals.forget()
    try:
        yield
    finally:
        sys.unraisablehook = previous_hook
        for s, handler in previous.items():
            signal.signal(s, handler)


def note(describe: Callable[[], str]) -> None:
    """What an interruption from now on leaves behind, computed when it happens."""
    _notes.append(describe)


def message(exc: Interrupted) -> str:
    """The one line `main` prints."""
    kept = "; ".join(text for text in (describe() for describe in _notes) if text)
    return f"interrupted by {exc}: " + (kept or "nothing was written")

"""A signal whose exception lands in a finalizer (Python swallows exceptions there: "Exception
ignored in ...") is delivered again, not lost: the kill tests (test_signals.py) once saw a
SIGTERM land in an import's module-lock callback and the run go on to the end, exit 0."""

from __future__ import annotations

import signal
import sys
import time
from typing import Any

import pytest

from pagesim.interrupts import Interrupted, raising_on_signals


class _RaisesWhenCollected:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __del__(self) -> None:  # stands for the callback the signal's handler interrupted
        raise self.exc


def test_a_signal_swallowed_by_a_finalizer_is_raised_again() -> None:
    with pytest.raises(Interrupted) as caught, raising_on_signals():
        _RaisesWhenCollected(Interrupted(signal.SIGTERM))  # collected at once: swallowed
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the program goes on: the signal comes back
            time.sleep(0.001)
    assert caught.value.signum == signal.SIGTERM


def test_other_swallowed_exceptions_still_reach_the_previous_hook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    with raising_on_signals():
        _RaisesWhenCollected(ValueError("not a signal"))
    assert [type(u.exc_value) for u in seen] == [ValueError]
    assert sys.unraisablehook == seen.append  # given back


def test_a_signal_raised_inside_a_simpy_process_reaches_the_caller() -> None:
    """SimPy re-raises a process's exception as `type(e)(*e.args)` (the kill test once got a
    ValueError and exit 1 that way): Interrupted must survive being rebuilt."""
    import simpy

    def process(env: simpy.Environment) -> Any:
        yield env.timeout(1)
        raise Interrupted(signal.SIGINT)  # as the handler does, wherever the signal lands

    env = simpy.Environment()
    env.process(process(env))
    with pytest.raises(Interrupted) as caught:
        env.run()
    assert caught.value.signum == signal.SIGINT and str(caught.value) == "SIGINT"


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signal masks")
def test_a_signal_sent_again_waits_while_signals_are_held() -> None:
    """The second delivery is a real signal: it respects a held section (output_folder's
    commit and abandon), arriving when it ends, not in its middle."""
    from pagesim.reports.output_folder import signals_held

    steps: list[str] = []
    with pytest.raises(Interrupted), raising_on_signals():
        with signals_held():
            _RaisesWhenCollected(Interrupted(signal.SIGTERM))  # swallowed: sent again
            time.sleep(0.2)  # well past the re-send: held back meanwhile
            steps.append("held section done")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            time.sleep(0.001)
    assert steps == ["held section done"]


def test_nothing_is_sent_again_once_the_block_has_ended() -> None:
    """A re-send that comes after the handlers were given back would meet the default action
    (SIGTERM: the process killed): it is dropped instead."""
    from pagesim import interrupts

    with raising_on_signals():
        pass
    interrupts._send_to_main_thread(signal.SIGTERM)  # this test process survives it
    assert signal.getsignal(signal.SIGTERM) is not interrupts._raise


def test_a_signal_within_a_held_block_is_raised_when_the_block_ends() -> None:
    """`held` holds a signal back in the handler, so it also holds one the kernel gives to
    another thread (a pool's or a progress bar's), which a signal mask in this one would not."""
    import os
    import threading

    from pagesim.simulator.core.held_signals import held

    steps: list[str] = []
    with pytest.raises(Interrupted) as caught, raising_on_signals():
        with held():
            os.kill(os.getpid(), signal.SIGTERM)
            sender = threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGINT))
            sender.start()
            sender.join()
            with held():  # nested: only the outermost block's end raises
                time.sleep(0.01)
            steps.append("block done")
        steps.append("after the block")
    assert steps == ["block done"] and caught.value.signum == signal.SIGTERM

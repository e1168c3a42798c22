"""Worker processes end with their driver (reproducer 18: SIGKILL of a sweep left its workers,
fork server and resource tracker running), and a signal while a pool starts its workers waits
until the pool has recorded them (reproducer 22: an unrecorded worker printed a traceback)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any, cast

import pytest

from pagesim.interrupts import Interrupted, raising_on_signals
from pagesim.simulator.studies.executors import ProcessExecutor
from pagesim.simulator.studies.points import Evaluate, PointTask
from pagesim.simulator.studies.worker_watch import EXIT_CODE, is_alive, wait_for_exit

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes and signals")
TIMEOUT_S = 60

# A worker as the pool starts one: watch_driver as its initializer, then a long wait. With
# "poll", the pidfd is unavailable, as on macOS or an old kernel.
WORKER = """
import os, sys, time
if sys.argv[2] == "poll":
    del os.pidfd_open
import pagesim.simulator.studies.worker_watch as w
w.POLL_S = 0.05
w.watch_driver(int(sys.argv[1]))
time.sleep(600)
"""


@pytest.mark.parametrize("how", ["pidfd", "poll"])
def test_a_watched_worker_exits_when_its_driver_is_killed(how: str) -> None:
    if how == "pidfd" and not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfd_open here")
    driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    worker = subprocess.Popen([sys.executable, "-c", WORKER, str(driver.pid), how])
    try:
        time.sleep(0.2)  # not an assertion: the worker should still be waiting after it
        assert worker.poll() is None, "the worker left while its driver lived"
        driver.kill()
        driver.wait(TIMEOUT_S)
        assert worker.wait(TIMEOUT_S) == EXIT_CODE
    finally:
        for proc in (driver, worker):
            if proc.poll() is None:
                proc.kill()
                proc.wait(TIMEOUT_S)


def test_waiting_for_a_process_that_is_gone_returns_at_once() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(TIMEOUT_S)
    assert not is_alive(proc.pid)
    wait_for_exit(proc.pid)  # returns: the test would hang otherwise
    assert is_alive(os.getpid())


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


def test_a_signal_while_workers_start_waits_until_the_pool_has_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SIGTERM lands in the middle of submitting (where a submit starts a worker): it is raised
    once every submit is done, so the pool knows each worker and `close` stops them all."""
    executor = ProcessExecutor(2)
    pool: Any = executor._pool
    real_submit = pool.submit
    submitted: list[object] = []

    def submit(*args: Any) -> Any:
        future = real_submit(*args)
        submitted.append(future)
        if len(submitted) == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, mid-loop
        return future

    monkeypatch.setattr(pool, "submit", submit)
    tasks = cast(list[PointTask], [600.0] * 4)
    with pytest.raises(Interrupted), raising_on_signals():
        for _ in executor.run(tasks, cast(Evaluate, _sleep)):
            pass
    assert len(submitted) == len(tasks)
    workers = list(pool._processes.values())
    assert workers
    executor.close()
    assert not any(w.is_alive() for w in workers)

"""Worker processes that end with the program that started them, however it ends.

A pool's idle worker waits on its task queue forever, and every worker holds the write ends of
that queue, of the fork server's liveness pipe and of the resource tracker's pipe: when the
driver is killed outright (SIGKILL, the OOM killer), none of them ever sees end-of-file, and the
worker, the fork server and the tracker stay behind for good. Nothing in the driver can run then,
so each worker watches the driver itself (`watch_driver`, a pool's initializer): a daemon thread
that waits for the driver's exit and ends the worker at once. Once the workers are gone, the
fork server and the tracker see their pipes close and exit on their own.

PR_SET_PDEATHSIG would not do: it fires when the *parent* dies, and a forkserver worker's parent
is the fork server, which outlives the driver for as long as its workers do.
"""

from __future__ import annotations

import os
import select
import sys
import threading
import time

POLL_S = 0.5  # where no pidfd can be waited on: how often the driver's pid is checked
EXIT_CODE = 1


def watch_driver(driver_pid: int) -> None:
    """Pool initializer: end this worker at once when the process `driver_pid` exits."""
    if sys.platform == "win32" or driver_pid == os.getpid():
        return  # Windows: no pid check without opening a handle; a pool is its own driver
    threading.Thread(
        target=_exit_when_gone, args=(driver_pid,), name="pagesim-driver-watch", daemon=True
    ).start()


def _exit_when_gone(driver_pid: int) -> None:
    wait_for_exit(driver_pid)
    os._exit(EXIT_CODE)  # no cleanup to run: the driver, which owns every file, is gone


def wait_for_exit(pid: int) -> None:
    """Return once process `pid` has exited: a pidfd (Linux >= 5.3) turns readable then;
    elsewhere the pid is checked every POLL_S."""
    try:
        fd = os.pidfd_open(pid)  # type: ignore[attr-defined, unused-ignore]
    except ProcessLookupError:
        return  # gone already
    except (AttributeError, OSError):  # not Linux, an old kernel, or a seccomp filter
        while is_alive(pid):
            time.sleep(POLL_S)
        return
    try:
        while not select.select([fd], [], [])[0]:
            pass
    finally:
        os.close(fd)


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True

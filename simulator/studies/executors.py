"""Where sweep points run: in this process, on a pool of worker processes, or on a Ray cluster.

Only the driver touches the point cache; workers receive a point and return its outcome (see
`points.evaluate_point`), so a remote Ray cluster needs no shared disk, only the same pagesim
install and the scenario's input files at the same paths.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from enum import Enum
from multiprocessing.context import BaseContext
from typing import Any, Protocol

from pagesim.simulator.core import held_signals
from pagesim.simulator.core.errors import InputError, PagesimError, choices_text
from pagesim.simulator.studies.points import Evaluate, PointOutcome, PointTask
from pagesim.simulator.studies.worker_watch import watch_driver

MAX_JOBS = 1024  # worker processes: beyond any one machine, and below the OS's limits


class ExecutorKind(Enum):
    LOCAL = "local"  # a process pool on this machine (in-process with one job)
    RAY = "ray"  # tasks on a Ray cluster: a local one started here, or --address


class SweepError(PagesimError):
    """A sweep could not finish: a worker died or a point failed for a reason not the input's."""


class PointExecutor(Protocol):
    def run(self, tasks: Sequence[PointTask], evaluate: Evaluate) -> Iterator[PointOutcome]:
        """Outcomes in completion order; raises SweepError when a worker dies."""
        ...

    def close(self) -> None: ...


class SerialExecutor:
    """In this process, one point after another (`--jobs 1`)."""

    def run(self, tasks: Sequence[PointTask], evaluate: Evaluate) -> Iterator[PointOutcome]:
        for task in tasks:
            yield evaluate(task)

    def close(self) -> None:
        pass


class ProcessExecutor:
    """A pool of `jobs` worker processes, forked from a clean fork server (not from a driver that
    may hold threads), kept for the executor's life so a search's rounds reuse warm workers."""

    def __init__(self, jobs: int) -> None:
        import multiprocessing

        context: BaseContext
        if "forkserver" in multiprocessing.get_all_start_methods():
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(
                ["pagesim.simulator.studies.points", "pagesim.simulator.engine"]
            )
            _start_fork_server()
        else:  # Windows
            context = multiprocessing.get_context("spawn")
        # Each worker ends when this process does, even killed outright (worker_watch).
        self._pool = ProcessPoolExecutor(
            max_workers=jobs,
            mp_context=context,
            initializer=watch_driver,
            initargs=(os.getpid(),),
        )
        self._is_stopped_early = False

    def run(self, tasks: Sequence[PointTask], evaluate: Evaluate) -> Iterator[PointOutcome]:
        pending: set[Future[PointOutcome]] = set()
        try:
            # A submit may start a worker; a signal between its start and the pool recording it
            # would leave a worker nobody stops, which then finds the driver's queues gone and
            # prints a traceback after the "interrupted" line (reproducer 22). Signals wait.
            with held_signals.held():
                for task in tasks:
                    pending.add(self._pool.submit(evaluate, task))
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    try:
                        yield future.result()
                    except BrokenProcessPool:
                        raise SweepError(
                            "a worker process died (killed, out of memory or crashed) while "
                            f"simulating one of {len(done) + len(pending)} unfinished points"
                        ) from None
        finally:
            for future in pending:
                future.cancel()
            # Left early (Ctrl-C, SIGTERM, a failed point): workers may be mid-simulation.
            self._is_stopped_early |= bool(pending)

    def close(self) -> None:
        """Shut the pool down: wait for idle workers to exit; after a run left early, stop the
        busy ones at once (a point may take minutes, and nobody waits for its result)."""
        if not self._is_stopped_early:
            self._pool.shutdown(wait=True, cancel_futures=True)
            return
        # The workers by pid: ProcessPoolExecutor has no public way to stop busy ones before
        # Python 3.14's terminate_workers().
        workers = list(getattr(self._pool, "_processes", {}).values())
        self._pool.shutdown(wait=False, cancel_futures=True)
        for worker in workers:
            if worker.is_alive():
                worker.terminate()
        for worker in workers:
            worker.join(timeout=10)


def _start_fork_server() -> None:
    """Start the fork server with a safe sys.path, if it is not running yet.

    The server is `python -c ...`, which puts the current folder first on sys.path, and it imports
    the preloaded modules before it learns the driver's path: started from the folder holding a
    clone named `pagesim` (a namespace package there) or from a folder with its own `pagesim/`,
    it would import that in place of the installed package, and every worker would inherit it.
    PYTHONSAFEPATH (Python 3.11's -P), in the environment the server inherits, leaves the folder
    out; workers then take the driver's sys.path as usual.
    """
    from multiprocessing import forkserver

    saved = os.environ.get("PYTHONSAFEPATH")
    os.environ["PYTHONSAFEPATH"] = "1"
    try:
        forkserver.ensure_running()
    finally:
        if saved is None:
            del os.environ["PYTHONSAFEPATH"]
        else:
            os.environ["PYTHONSAFEPATH"] = saved


class RayExecutor:
    """Ray tasks: on the cluster at `address`, or on a local Ray started here with `jobs` CPUs
    (and shut down by `close`). Each task is tried once: a crash is reported, not retried."""

    def __init__(self, jobs: int | None, address: str | None) -> None:
        try:
            import ray
        except ImportError:
            raise InputError(
                "--executor ray: the ray package is not installed; "
                "pip install 'pagesim[ray]' (or pip install ray)"
            ) from None
        self._ray = ray
        self._owns = not ray.is_initialized()
        if self._owns:
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address is None:
                kwargs["num_cpus"] = jobs or os.cpu_count() or 1
            try:
                ray.init(address=address, **kwargs)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                raise InputError(
                    f"--address {address!r}: cannot join a Ray cluster: {exc}"
                ) from None
        self._pending: list[Any] = []

    def run(self, tasks: Sequence[PointTask], evaluate: Evaluate) -> Iterator[PointOutcome]:
        ray = self._ray
        remote = ray.remote(max_retries=0, num_cpus=1)(evaluate)
        refs = {remote.remote(task): task for task in tasks}
        self._pending = list(refs)
        while self._pending:
            done, self._pending = ray.wait(self._pending, num_returns=1)
            for ref in done:
                try:
                    yield ray.get(ref)
                except ray.exceptions.RayError as exc:
                    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc)
                    raise SweepError(
                        f"a Ray worker failed while simulating {refs[ref].system.name!r} "
                        f"(key {refs[ref].key[:12]}): {first}"
                    ) from None

    def close(self) -> None:
        for ref in self._pending:
            self._ray.cancel(ref, force=True)
        self._pending = []
        if self._owns:
            self._ray.shutdown()


def check_executor(
    kind: str | ExecutorKind = ExecutorKind.LOCAL,
    jobs: int | None = None,
    address: str | None = None,
) -> ExecutorKind:
    """`--executor`, `--jobs` and `--address` checked (InputError on bad values), before any
    work starts; returns the kind."""
    if isinstance(kind, str):
        try:
            kind = ExecutorKind(kind)
        except ValueError:
            valid = choices_text(k.value for k in ExecutorKind)
            raise InputError(f"--executor: unknown executor {kind!r}; valid: {valid}") from None
    if jobs is not None and not 1 <= jobs <= MAX_JOBS:
        raise InputError(f"--jobs: must be from 1 to {MAX_JOBS}, got {jobs}")
    if address is not None and kind is not ExecutorKind.RAY:
        raise InputError("--address: only with --executor ray")
    return kind


def make_executor(
    kind: str | ExecutorKind = ExecutorKind.LOCAL,
    jobs: int | None = None,
    address: str | None = None,
) -> PointExecutor:
    """`--executor`, `--jobs` and `--address` as an executor; InputError on bad values."""
    kind = check_executor(kind, jobs, address)
    if kind is ExecutorKind.RAY:
        return RayExecutor(jobs, address)
    jobs = jobs or os.cpu_count() or 1
    return SerialExecutor() if jobs == 1 else ProcessExecutor(jobs)

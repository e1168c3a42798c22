"""Drawing a report's plots (reports/plot_jobs.py chooses them): here, one after another, or
in parallel when asked.

The plots are independent: with `num_workers` above one, `draw_all` deals them into shares of
about equal cost, draws one here and the others in worker processes forked from this one
(which hold the results already, so nothing is copied or pickled but the indices of the
plots). By default it draws them all here: a report's budget is CPU time (a third of
its run's, or 1 s: docs/reports.md), and workers cost CPU time of their own (their start, the
pages they copy, their collections): about 0.1-0.2 s more than drawing serially for textbook's 6 or
disaggregated_vs_colocated's 11 plots (7 December 2026), for wall time they only save on an
idle machine with a core to spare.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from pagesim.reports.plot_jobs import PlotJob
from pagesim.simulator.core.collector import collector_paused
from pagesim.simulator.studies.worker_watch import watch_driver

_pending: list[tuple[PlotJob, Path]] = []  # what forked workers draw, by index


def _draw(index: int) -> Path:
    job, path = _pending[index]
    with collector_paused():  # a figure's thousands of artists are no work for the collector
        done = job.draw(path)
    gc.collect()  # but a closed figure is a web of cycles: freed now, one figure at a time
    return done


def _draw_share(indices: Sequence[int]) -> None:
    for index in indices:
        _draw(index)


def shares(costs: Sequence[float], num_shares: int) -> list[list[int]]:
    """The indices of `costs` dealt into `num_shares` lists of about equal total cost: the
    most expensive first, each to the lightest share so far (each share in that order)."""
    dealt: list[list[int]] = [[] for _ in range(num_shares)]
    totals = [0.0] * num_shares
    for index in sorted(range(len(costs)), key=lambda i: -costs[i]):
        lightest = totals.index(min(totals))
        dealt[lightest].append(index)
        totals[lightest] += costs[index]
    return dealt


@contextmanager
def _heap_frozen() -> Iterator[None]:
    """Every object there is now out of the collector's sight until the block ends: so that
    collecting after each figure looks at that figure's objects only, not at the results'
    frames and everything imported, and forked workers, which inherit this, never write to
    the pages of those objects (a collection writes to each object it visits)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def draw_all(jobs: Sequence[PlotJob], plot_dir: Path, num_workers: int | None = None) -> None:
    """Draw every job's PNG into `plot_dir`, in `num_workers` processes: this one and workers
    forked from it (at most one per plot), each a share of about equal cost; serially with
    one worker (the default: see the module docstring) or where fork is unavailable."""
    plot_dir.mkdir(parents=True, exist_ok=True)
    work = [(job, plot_dir / f"{job.stem}.png") for job in jobs]
    num_workers = 1 if num_workers is None else num_workers
    num_workers = min(num_workers, len(work))
    _pending[:] = work
    try:
        with _heap_frozen():
            if num_workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
                _draw_share(range(len(work)))
            else:
                _draw_in_parallel(shares([job.cost for job in jobs], num_workers))
    finally:
        _pending.clear()


def _start_worker(driver_pid: int) -> None:
    """A forked plot worker: it leaves when its driver does (a driver killed outright leaves no
    worker behind), and its signals are the defaults, not the driver's handlers it inherited by
    the fork (pagesim/interrupts.py raises on SIGTERM): the driver stops a worker with SIGTERM,
    which must end it quietly, and a Ctrl-C at the terminal, which the whole process group gets,
    is the driver's to handle."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch_driver(driver_pid)


def _draw_in_parallel(dealt: list[list[int]]) -> None:
    """The first share drawn here, the others by workers forked from this process."""
    pool = ProcessPoolExecutor(
        max_workers=len(dealt) - 1,
        mp_context=multiprocessing.get_context("fork"),
        initializer=_start_worker,
        initargs=(os.getpid(),),
    )
    try:
        futures = [pool.submit(_draw_share, share) for share in dealt[1:]]
        _draw_share(dealt[0])
        for future in futures:
            future.result()
    except BaseException:  # a failed plot, Ctrl-C, SIGTERM: stop the other workers at once
        workers = list(getattr(pool, "_processes", {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.join(timeout=10)
        raise
    else:
        pool.shutdown(wait=True)

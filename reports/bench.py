"""`pagesim bench report`: what a run's report costs beside its simulation (issue 14 item 10:
drawing the PNGs used to cost more than simulating).

Times, in one process, the simulation of every system of a scenario, then its report written
into a scratch folder with the plots drawn in parallel (as `pagesim run` draws them) and, for
comparison, one process drawing them all. CPU time is the measure (on a busy machine wall time
swings with the load): the report's counts the plot workers' too, since they are reaped before
it is read; wall times are kept as the range of `repeat` reports.
"""

from __future__ import annotations

import os
import resource
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pagesim.reports.folders import write_run
from pagesim.simulator.studies.bench_spread import Spread, load_average
from pagesim.simulator.studies.runs import load_run, simulate_run


@dataclass(frozen=True)
class Cost:
    """One piece of work timed `len(wall.values_s)` times: its CPU seconds (this process and
    its reaped children) and wall seconds, run by run."""

    cpu: Spread
    wall: Spread


@dataclass(frozen=True)
class ReportTiming:
    scenario: str
    num_requests: int  # simulated, over every system
    simulate: Cost  # one run
    report: Cost  # plots drawn by `num_workers` processes, `repeat` times
    serial_report: Cost  # plots drawn by one process
    num_workers: int
    num_plots: int
    load_averages: tuple[float, ...] = ()  # the machine's, before simulating and at the end

    @property
    def cpu_ratio(self) -> float:
        """The report's CPU time (best of its runs) over the simulation's."""
        simulate_s = self.simulate.cpu.best_s
        return self.report.cpu.best_s / simulate_s if simulate_s > 0 else float("inf")


def cpu_seconds() -> float:
    """CPU seconds of this process and its reaped children, user and system."""
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(work: Callable[[], object], repeat: int = 1) -> Cost:
    """`work` run `repeat` times, each run's CPU and wall seconds."""
    cpu, wall = [], []
    for _ in range(max(1, repeat)):
        start_cpu, start = cpu_seconds(), time.perf_counter()
        work()
        wall.append(time.perf_counter() - start)
        cpu.append(cpu_seconds() - start_cpu)
    return Cost(Spread(tuple(cpu)), Spread(tuple(wall)))


def bench_report(name: str, overrides: Sequence[str] = (), repeat: int = 1) -> ReportTiming:
    loaded = load_run(name, overrides)
    loads = [load_average()]
    runs = []
    simulate = timed(lambda: runs.append(simulate_run(loaded)))
    (run,) = runs
    workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    num_plots = []

    def write(num_workers: int) -> None:
        with tempfile.TemporaryDirectory(prefix="pagesim-bench-") as scratch:
            write_run(run, Path(scratch), num_workers=num_workers)
            num_plots.append(len(list((Path(scratch) / "plots").glob("*.png"))))

    report = timed(lambda: write(workers), repeat)
    serial_report = timed(lambda: write(1), repeat)
    loads.append(load_average())
    return ReportTiming(
        loaded.scenario.name,
        sum(int(r.summary.get("num_requests") or 0) for r in run.results),
        simulate,
        report,
        serial_report,
        workers,
        num_plots[0],
        tuple(x for x in loads if x is not None),
    )

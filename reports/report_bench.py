"""`pagesim bench report`: what a run's report costs beside its simulation (issue 14 item 10:
drawing the PNGs used to cost more than simulating).

Times, in one process, the simulation of every system of a scenario, then its report written
into a scratch folder with the plots drawn in parallel (as `pagesim run` draws them) and, for
comparison, one process drawing them all. Wall-clock seconds, best of `repeat` for each report.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pagesim.reports.folders import write_run
from pagesim.simulator.studies.runs import load_run, simulate_run


@dataclass(frozen=True)
class ReportTiming:
    scenario: str
    num_requests: int  # simulated, over every system
    simulate_s: float
    report_s: float  # plots drawn by `num_workers` processes
    serial_report_s: float  # plots drawn by one process
    num_workers: int
    num_plots: int

    @property
    def ratio(self) -> float:
        """The report's wall time over the simulation's."""
        return self.report_s / self.simulate_s if self.simulate_s > 0 else float("inf")


def bench_report(name: str, overrides: Sequence[str] = (), repeat: int = 1) -> ReportTiming:
    loaded = load_run(name, overrides)
    start = time.perf_counter()
    run = simulate_run(loaded)
    simulate_s = time.perf_counter() - start
    workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1

    def report_s(num_workers: int) -> tuple[float, int]:
        best, num_plots = float("inf"), 0
        for _ in range(max(1, repeat)):
            with tempfile.TemporaryDirectory(prefix="pagesim-bench-") as scratch:
                start = time.perf_counter()
                write_run(run, Path(scratch), num_workers=num_workers)
                best = min(best, time.perf_counter() - start)
                num_plots = len(list((Path(scratch) / "plots").glob("*.png")))
        return best, num_plots

    parallel, num_plots = report_s(workers)
    serial, _ = report_s(1)
    return ReportTiming(
        loaded.scenario.name,
        sum(int(r.summary.get("num_requests") or 0) for r in run.results),
        simulate_s,
        parallel,
        serial,
        workers,
        num_plots,
    )

"""One case of `pagesim bench report`, timed in a fresh interpreter: a scenario's run (or its
sweep), then its report.

Run by path, `python -S bench_child.py TREE SCENARIO KIND '<overrides as JSON>'`, with TREE
first on sys.path (reports.report_bench starts it; with `--against`, TREE is another git revision's
checkout), it prints one JSON line. So it imports only the standard library at the top, and
from TREE only what every revision since the report moved into reports.folders has:
`studies.runs` (load_run, simulate_run, sweep_scenario) and `reports.folders` (write_run,
write_sweep).

What it measures, as process CPU time (user + system; `os.times`), which a busy machine
disturbs less than wall time:
  startup   the interpreter, its imports and this script's, up to loading the scenario
  simulate  loading the scenario and simulating it: every system of a run, or every point
            of a sweep one after another in this process (no cache, no workers)
  data      for a run, what `pagesim run --no-report` writes beyond that (scenario.toml, each
            system's CSV/JSON), with the imports it needs: part of the run, since a run
            without a report writes it too
  report    what writing the report adds: for a run, `pagesim run`'s folder (report and data,
            with the imports only the report needs: matplotlib and the drawing code) less
            the data files, timed again on their own beside it; for a sweep, the whole of
            `pagesim sweep`'s report folder. The CPU time of any worker process the report
            forks is counted (they are waited for)
The run's CPU time is startup + simulate + data; the report's budget is a share of it.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def cpu_s() -> float:
    """CPU seconds of this process and of its children waited for, since it started."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def measure(tree: str, scenario: str, kind: str, overrides: list[str]) -> dict[str, Any]:
    """Time `kind` ("run" or "sweep") of `scenario` with the code of `tree`, then its report."""
    start_wall = time.perf_counter()
    load_1min = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    import pagesim

    if tree not in pagesim.__path__:  # the tree's top-level folders are pagesim's subpackages
        pagesim.__path__.append(tree)
    from pagesim.simulator.studies.runs import load_run, simulate_run, sweep_scenario

    startup = cpu_s()
    with tempfile.TemporaryDirectory(prefix="pagesim-bench-report-") as folder:
        scratch = Path(folder)
        if kind == "run":
            done: Any = simulate_run(load_run(scenario, overrides))
        elif kind == "sweep":
            done = sweep_scenario(scenario, scratch / "sweep", overrides, jobs=1, use_cache=False)
        else:
            raise SystemExit(f"bench_child.py: unknown kind {kind!r}; valid: run, sweep")
        simulated, simulated_wall = cpu_s(), time.perf_counter()
        from pagesim.reports.folders import write_run, write_sweep

        data_s = data_wall_s = 0.0
        if kind == "run":  # as `pagesim run --no-report`: its imports, then its files
            write_run(done, scratch / "data", report=False)
            data_s, data_wall_s = cpu_s() - simulated, time.perf_counter() - simulated_wall
        report = scratch / "report"
        begun, begun_wall = cpu_s(), time.perf_counter()
        if kind == "run":
            write_run(done, report)
        else:
            write_sweep(done, report, overrides)
        reported, reported_wall = cpu_s() - begun, time.perf_counter() - begun_wall
        num_plots = len(list((report / "plots").glob("*.png")))
        if kind == "run":  # the data files again, warm, as the report folder wrote them
            again, again_wall = cpu_s(), time.perf_counter()
            write_run(done, scratch / "data_again", report=False)
            reported -= cpu_s() - again
            reported_wall -= time.perf_counter() - again_wall
    return {
        "scenario": scenario,
        "kind": kind,
        "startup_cpu_s": startup,
        "simulate_cpu_s": simulated - startup,
        "run_wall_s": simulated_wall - start_wall + data_wall_s,
        "report_cpu_s": max(reported, 0.0),
        "report_wall_s": max(reported_wall, 0.0),
        "data_cpu_s": data_s,
        "num_plots": num_plots,
        "load_1min": load_1min,
    }


if __name__ == "__main__":
    if len(sys.argv) != 5:
        raise SystemExit("usage: bench_child.py TREE SCENARIO KIND OVERRIDES_JSON")
    tree, name, what, given = sys.argv[1:5]
    print(json.dumps(measure(tree, name, what, json.loads(given))))

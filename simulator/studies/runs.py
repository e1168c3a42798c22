"""What `pagesim run`, `validate` and `sweep` compute: one call each, one typed result.

The CLI parses options, calls one of these and prints; `reports.folders` writes the result's
folder. Progress goes through a `Progress` the caller gives (the CLI's draws a bar on stderr):
called once with the number of steps and a label, it returns a context manager that yields
`advance(num_steps_done)`. Executors are made here from `--executor`, `--jobs` and `--address`
and closed however the study ends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from pagesim.simulator.core.config import Scenario, SystemConfig
from pagesim.simulator.kv.capacity import Capacity, kv_capacity
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.scenario.load import load_scenario, resolve_scenario
from pagesim.simulator.studies.sweep import SweepRun, make_executor, plan_sweep, run_sweep

Advance = Callable[[int], None]
Progress = Callable[[int, str], AbstractContextManager[Advance]]


@contextmanager
def no_progress(total: int, label: str) -> Iterator[Advance]:
    """A `Progress` that shows nothing."""
    yield lambda _: None


@dataclass(frozen=True)
class ScenarioRun:
    """Every system of one scenario, simulated side by side."""

    path: Path  # the scenario file
    scenario: Scenario
    overrides: list[str]  # as given, --seed last
    results: list[RunResult]  # one per system, in the file's order


def run_scenario(
    name: str | Path, overrides: Sequence[str] = (), progress: Progress = no_progress
) -> ScenarioRun:
    """Load a scenario (a file or a built-in name) with `overrides` and simulate every system."""
    from pagesim.simulator.engine import simulate

    path = resolve_scenario(name)
    scenario = load_scenario(path, list(overrides))
    results = []
    with progress(len(scenario.systems), f"simulating {scenario.name}") as advance:
        for system in scenario.systems:
            results.append(simulate(scenario, system))
            advance(1)
    return ScenarioRun(path, scenario, list(overrides), results)


@dataclass(frozen=True)
class CheckedScenario:
    """A scenario that loads, with the KV capacity each system gets."""

    path: Path
    scenario: Scenario
    capacities: list[tuple[SystemConfig, Capacity]]


def check_scenario(name: str | Path, overrides: Sequence[str] = ()) -> CheckedScenario:
    """Load and check a scenario without running it (InputError saying what is wrong)."""
    path = resolve_scenario(name)
    scenario = load_scenario(path, list(overrides))
    capacities = [(system, kv_capacity(scenario, system)) for system in scenario.systems]
    return CheckedScenario(path, scenario, capacities)


def sweep_scenario(
    name: str | Path,
    out: Path,
    overrides: Sequence[str] = (),
    params: Sequence[str] = (),
    *,
    executor: str = "local",
    jobs: int | None = None,
    address: str | None = None,
    use_cache: bool = True,
    progress: Progress = no_progress,
) -> SweepRun:
    """Plan a sweep (the file's [sweep] unless `params` are given) and run it on `executor`,
    cached under `out/cache`; the executor is closed however the sweep ends."""
    points = plan_sweep(resolve_scenario(name), list(overrides), list(params))
    pool = make_executor(executor, jobs, address)
    try:
        with progress(len(points), f"sweeping {points[0].scenario.name}") as advance:
            return run_sweep(points, out, pool, use_cache=use_cache, on_record=lambda _: advance(1))
    finally:
        pool.close()

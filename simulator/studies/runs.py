"""What `pagesim run`, `validate`, `sweep` and `capacity` compute: one call each, one typed result.

The CLI parses options, calls one of these and prints; `reports.folders` writes the result's
folder. Progress goes through a `Progress` the caller gives (the CLI's draws a bar on stderr):
called once with the number of steps and a label, it returns a context manager that yields
`advance(num_steps_done)`. Executors are made here from `--executor`, `--jobs` and `--address`
and closed however the study ends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from pagesim.simulator.core.config import Scenario
from pagesim.simulator.deploy.commands import Deployment, deployment
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.scenario.load import load_scenario, resolve_scenario
from pagesim.simulator.studies.capacity_search import (
    CapacityRun,
    Config,
    Criteria,
    configurations,
    search_capacity,
)
from pagesim.simulator.studies.executors import check_executor, make_executor
from pagesim.simulator.studies.objective import check_objective, order_by
from pagesim.simulator.studies.point_cache import CACHE_DIR, PointCache
from pagesim.simulator.studies.points import Point
from pagesim.simulator.studies.sweep import (
    SweepRun,
    plan_sweep,
    run_points,
    run_sweep,
    select_detail,
)

if TYPE_CHECKING:  # imported by the runs that record one only
    from pagesim.simulator.metrics.block_map import BlockMap
    from pagesim.simulator.metrics.block_map_window import BlockMapWindow

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
    block_maps: list[BlockMap] = field(default_factory=list)  # one per system, if asked for


@dataclass(frozen=True)
class LoadedScenario:
    """A scenario file read, overridden and validated: ready to simulate."""

    path: Path
    scenario: Scenario
    overrides: list[str]


def load_run(name: str | Path, overrides: Sequence[str] = ()) -> LoadedScenario:
    """Resolve and validate a scenario (a file or a built-in name) with `overrides`."""
    path = resolve_scenario(name)
    return LoadedScenario(path, load_scenario(path, list(overrides)), list(overrides))


def simulate_run(
    loaded: LoadedScenario,
    progress: Progress = no_progress,
    block_map: BlockMapWindow | None = None,
) -> ScenarioRun:
    """Simulate every system of a loaded scenario, in the file's order; with `block_map`, record
    that window of each one's blocks (simulator/metrics/block_map.py)."""
    from pagesim.simulator.engine import simulate
    from pagesim.simulator.metrics.block_map import BlockMapRecorder
    from pagesim.simulator.metrics.block_map_window import check_mappable

    scenario = loaded.scenario
    if block_map is not None:
        check_mappable(scenario)  # before any system runs
    results, maps = [], []
    with progress(len(scenario.systems), f"simulating {scenario.name}") as advance:
        for system in scenario.systems:
            recorder = None if block_map is None else BlockMapRecorder(block_map)
            results.append(simulate(scenario, system, block_map=recorder))
            if recorder is not None:
                maps.append(recorder.block_map())
            advance(1)
    return ScenarioRun(loaded.path, scenario, loaded.overrides, results, maps)


def run_scenario(
    name: str | Path, overrides: Sequence[str] = (), progress: Progress = no_progress
) -> ScenarioRun:
    """Load a scenario (a file or a built-in name) with `overrides` and simulate every system."""
    return simulate_run(load_run(name, overrides), progress)


def sweep_scenario(
    name: str | Path | Sequence[Point],
    out: Path,
    overrides: Sequence[str] = (),
    params: Sequence[str] = (),
    *,
    executor: str = "local",
    jobs: int | None = None,
    address: str | None = None,
    use_cache: bool = True,
    progress: Progress = no_progress,
    detail: str | None = None,
) -> SweepRun:
    """Plan a sweep (the file's [sweep] unless `params` are given; or take the points
    `plan_sweep` made) and run it on `executor`, cached under `out/cache`, keeping the frames
    of the point `detail` names (`sweep.select_detail`); the executor is closed however the
    sweep ends."""
    if isinstance(name, str | Path):
        points = plan_sweep(resolve_scenario(name), list(overrides), list(params))
    else:
        points = list(name)
    chosen = select_detail(points, detail)
    check_executor(executor, jobs, address)
    PointCache(out / CACHE_DIR).prepare()
    pool = make_executor(executor, jobs, address)
    try:
        with progress(len(points), f"sweeping {points[0].scenario.name}") as advance:
            return run_sweep(
                points,
                out,
                pool,
                use_cache=use_cache,
                on_record=lambda _: advance(1),
                detail=chosen,
            )
    finally:
        pool.close()


REPORTED_CONFIGS = 4  # the best ones get their per-request and per-step frames for the report


@dataclass(frozen=True)
class CapacityStudy:
    """A finished capacity search, with the frames of the best configurations at their max."""

    configs: list[Config]
    search: CapacityRun
    criteria: Criteria
    window_s: float
    ranking: pd.DataFrame  # one row per configuration, best first by the objective
    evaluations: pd.DataFrame  # every simulated (configuration, rate)
    best: list[RunResult]  # up to REPORTED_CONFIGS, ranked, each named by its config label
    # the vLLM command lines of those configurations at their rate (simulator/deploy/)
    deployments: tuple[Deployment, ...] = ()


def study_capacity(
    name: str | Path | Sequence[Config],
    out: Path,
    overrides: Sequence[str] = (),
    params: Sequence[str] = (),
    *,
    slo_share: float = 0.9,
    max_queue_delay_s: float = 5.0,
    rel_tol: float = 0.02,
    window_s: float = 60.0,
    min_rate: float = 0.01,
    max_rate: float = 1e4,
    executor: str = "local",
    jobs: int | None = None,
    address: str | None = None,
    use_cache: bool = True,
    on_round: Callable[[int, int], None] | None = None,
    objective: str | None = None,
) -> CapacityStudy:
    """Search every configuration's highest sustainable rate (cached under `out/cache`), then
    rerun the best ones at that rate for their frames; see `capacity_search`. `objective`
    orders the ranking (studies/objective.py; default: goodput per GPU)."""
    objective = check_objective(objective, fleet=False)
    if isinstance(name, str | Path):
        configs = configurations(resolve_scenario(name), list(overrides), list(params))
    else:
        configs = list(name)
    check_executor(executor, jobs, address)
    criteria = Criteria(slo_share, max_queue_delay_s)
    cache = PointCache(out / CACHE_DIR)
    cache.prepare()
    pool = make_executor(executor, jobs, address)
    try:
        search = search_capacity(
            configs,
            pool,
            criteria=criteria,
            cache=cache,
            use_cache=use_cache,
            min_rate=min_rate,
            max_rate=max_rate,
            rel_tol=rel_tol,
            window_s=window_s,
            on_round=on_round,
        )
        ranking = order_by(search.ranking(), objective, fleet=False)
        best = search.best(REPORTED_CONFIGS, ranking)
        points = [config.at_rate(rate, window_s) for config, rate in best]
        framed = run_points(points, pool, cache=cache, frames_for=[p.key for p in points])
    finally:
        pool.close()
    results = [
        replace(framed.frames[p.key], system=config.label)
        for p, (config, _) in zip(points, best, strict=True)
    ]
    return CapacityStudy(
        configs,
        search,
        criteria,
        window_s,
        ranking,
        search.evaluation_table(criteria),
        results,
        tuple(
            replace(deployment(p.scenario, config.system), system=config.label)
            for p, (config, _) in zip(points, best, strict=True)
        ),
    )

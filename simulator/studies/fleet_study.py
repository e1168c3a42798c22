"""What `pagesim capacity` computes for a scenario with [capacity]: the cheapest-fleet search,
then the frames of the best fleets for the report (simulator.studies.fleet_search says how).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from pagesim.simulator.core.capacity import CapacityConfig
from pagesim.simulator.core.config import Scenario
from pagesim.simulator.deploy.commands import Deployment, deployment
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.scenario.load import resolve_scenario
from pagesim.simulator.studies.capacity_search import Criteria
from pagesim.simulator.studies.disagg_ranking import (
    disagg_answer_lines,
    disagg_evaluations,
    disagg_ranking,
)
from pagesim.simulator.studies.disagg_search import (
    DECODE,
    PREFILL,
    DisaggPlan,
    DisaggSearchRun,
    DisaggShape,
    search_disagg,
)
from pagesim.simulator.studies.executors import check_executor, make_executor
from pagesim.simulator.studies.fleet_ranking import answer_lines, fleet_evaluations, fleet_ranking
from pagesim.simulator.studies.fleet_search import (
    FleetPlan,
    FleetSearchRun,
    FleetShape,
    plan_fleets,
    search_fleets,
)
from pagesim.simulator.studies.objective import (
    check_objective,
    energy_answer,
    order_by,
    with_energy_rank,
)
from pagesim.simulator.studies.point_cache import CACHE_DIR, PointCache
from pagesim.simulator.studies.search_frontier import disagg_frontier, fleet_frontier
from pagesim.simulator.studies.sweep import run_points

REPORTED_FLEETS = 4  # the best ones get their per-request and per-step frames for the report


@dataclass(frozen=True)
class FleetStudy:
    """A finished fleet search, with the frames of the best fleets at their size."""

    scenario: Scenario  # as loaded, [capacity] included
    shapes: Sequence[FleetShape | DisaggShape]
    search: FleetSearchRun | DisaggSearchRun
    criteria: Criteria
    settings: CapacityConfig
    ranking: pd.DataFrame  # one row per shape, best first by the objective (fewest GPUs)
    evaluations: pd.DataFrame  # every simulated (shape, replicas)
    answer: list[str]  # the answer in words (fleet_ranking.answer_lines)
    best: list[RunResult]  # up to REPORTED_FLEETS, ranked, each named by its shape's label
    # every fleet that met the SLO, with its Pareto flags (simulator/studies/frontier.py)
    frontier: pd.DataFrame = field(default_factory=pd.DataFrame)
    # the vLLM command lines of the best fleets (simulator/deploy/), named as `best` is
    deployments: tuple[Deployment, ...] = ()


def study_fleets(
    name: str | Path | FleetPlan | DisaggPlan,
    out: Path,
    overrides: Sequence[str] = (),
    params: Sequence[str] = (),
    *,
    slo_share: float = 0.9,
    max_queue_delay_s: float = 5.0,
    executor: str = "local",
    jobs: int | None = None,
    address: str | None = None,
    use_cache: bool = True,
    on_round: Callable[[int, int], None] | None = None,
    objective: str | None = None,
) -> FleetStudy:
    """Search every shape's fewest replicas (cached under `out/cache`), then rerun the best
    fleets for their frames; see `fleet_search`. `objective` orders the ranking and picks the
    fleets reported (studies/objective.py; default: fewest GPUs)."""
    objective = check_objective(objective, fleet=True)
    if isinstance(name, str | Path):
        plan = plan_fleets(resolve_scenario(name), list(overrides), list(params))
    else:
        plan = name
    check_executor(executor, jobs, address)
    criteria = Criteria(slo_share, max_queue_delay_s)
    cache = PointCache(out / CACHE_DIR)
    cache.prepare()
    if isinstance(plan, DisaggPlan):
        where = (executor, jobs, address)
        return _study_disagg(plan, criteria, cache, where, use_cache, on_round, objective)
    shapes, settings = plan.shapes, plan.settings
    pool = make_executor(executor, jobs, address)
    try:
        search = search_fleets(
            shapes,
            settings,
            pool,
            criteria=criteria,
            cache=cache,
            use_cache=use_cache,
            on_round=on_round,
        )
        by_gpus = with_energy_rank(fleet_ranking(search, criteria))
        answer = answer_lines(by_gpus, settings.currency) + energy_answer(by_gpus)
        ranking = order_by(by_gpus, objective, fleet=True)
        best = _best(search, ranking)
        points = [shape.with_replicas(size) for shape, size in best]
        framed = run_points(points, pool, cache=cache, frames_for=[p.key for p in points])
    finally:
        pool.close()
    results = [
        replace(framed.frames[p.key], system=shape.label)
        for p, (shape, _) in zip(points, best, strict=True)
    ]
    return FleetStudy(
        plan.scenario,
        shapes,
        search,
        criteria,
        settings,
        ranking,
        fleet_evaluations(search, criteria),
        answer,
        results,
        fleet_frontier(search),
        tuple(
            replace(deployment(p.scenario, shape.system), system=shape.label)
            for p, (shape, _) in zip(points, best, strict=True)
        ),
    )


def _best(search: FleetSearchRun, ranking: pd.DataFrame) -> list[tuple[FleetShape, int]]:
    by_label = {shape.label: shape for shape in search.shapes}
    met = ranking[ranking["replicas"].notna()].head(REPORTED_FLEETS)
    return [
        (by_label[str(label)], int(size))
        for label, size in zip(met["config"], met["replicas"], strict=True)
    ]


def _study_disagg(
    plan: DisaggPlan,
    criteria: Criteria,
    cache: PointCache,
    where: tuple[str, int | None, str | None],
    use_cache: bool,
    on_round: Callable[[int, int], None] | None,
    objective: str,
) -> FleetStudy:
    """study_fleets for a disaggregated scenario (simulator/studies/disagg_search.py)."""
    pool = make_executor(*where)
    try:
        search = search_disagg(
            plan.shapes,
            plan.settings,
            pool,
            criteria=criteria,
            cache=cache,
            use_cache=use_cache,
            on_round=on_round,
        )
        by_gpus = with_energy_rank(disagg_ranking(search, criteria))
        answer = disagg_answer_lines(by_gpus, plan.settings.currency) + energy_answer(by_gpus)
        ranking = order_by(by_gpus, objective, fleet=True)
        by_label = {shape.label: shape for shape in plan.shapes}
        met = ranking[ranking["num_gpus"].notna()].head(REPORTED_FLEETS)
        best = [
            (by_label[str(label)], int(p), int(d))
            for label, p, d in zip(met["config"], met[PREFILL], met[DECODE], strict=True)
        ]
        points = [shape.with_sizes(p, d) for shape, p, d in best]
        framed = run_points(points, pool, cache=cache, frames_for=[p.key for p in points])
    finally:
        pool.close()
    results = [
        replace(framed.frames[p.key], system=f"{shape.label} {pp}P{d}D")
        for p, (shape, pp, d) in zip(points, best, strict=True)
    ]
    return FleetStudy(
        plan.scenario,
        plan.shapes,
        search,
        criteria,
        plan.settings,
        ranking,
        disagg_evaluations(search, criteria),
        answer,
        results,
        disagg_frontier(search),
        tuple(
            replace(deployment(p.scenario, shape.system), system=f"{shape.label} {pp}P{d}D")
            for p, (shape, pp, d) in zip(points, best, strict=True)
        ),
    )

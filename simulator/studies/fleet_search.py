"""The cheapest fleet: for fixed traffic and an SLO, the fewest GPUs that meet it.

A scenario's [capacity] section (simulator/core/capacity.py) lists what may vary: the GPU, the
tensor-parallel degree and the router, and a range of pool sizes. A *fleet shape* is one system
of the scenario on one GPU at one degree behind one router; for each, the search finds the
fewest replicas of one pool that meet the SLO. The traffic never changes: a trace replays at its
own times (what a rate search cannot vary), a rated workload at the scenario's rate.

Meeting the SLO is capacity_search.Criteria, unchanged, over the requests that arrive after
warm-up: at least `min_slo_share` of them finish meeting the scenario's [slo] (rejected and
unfinished ones count as misses), and the p99 wait from arrival to first admission is at most
`max_queue_delay_s` (a queue that keeps growing fails it even when the SLO bounds TPOT only).

The search assumes that meeting the SLO is monotone in the number of replicas: a fleet that
meets it still does with one replica more (the same requests spread over more capacity; a
router's choices can make this fail by a hair, which the ranking then flags as non-monotone).
Per shape it starts at as many GPUs as the scenario's own pool (clamped to the range: a
scenario that already holds the answer confirms it in two runs), doubles or halves until one
size meets the SLO and a smaller one does not, then bisects to adjacent sizes (the studies' one
bisection: simulator/studies/bisection.py, `ReplicaSearch`). Shapes search in
lockstep rounds of points on the sweep executors (process pool or Ray), and every point lands
in the sweep cache (simulator.studies.point_cache): a rerun, or a wider range, resumes. A shape
whose replica cannot run the model at all (the weights do not fit at that degree) is reported,
not simulated.

Ranked by GPUs (replicas x degree), ties by cost per hour; a second rank orders by cost. Cost per
hour = GPUs x the scenario's price per GPU-hour of that GPU. Cost per million tokens = what the
fleet costs for the run's duration (first arrival to last finish) / the tokens it served (prompt
+ output tokens of the finished requests: input and output, as API prices count them) x 10^6.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from pagesim.simulator.core.capacity import CapacityConfig
from pagesim.simulator.core.catalog import GPUSpec
from pagesim.simulator.core.cluster import ClusterConfig, PoolConfig, RouterConfig, RouterKind
from pagesim.simulator.core.config import Scenario, SystemConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.scenario.load import expand_sweep, load_scenario, parse_param
from pagesim.simulator.studies.bisection import ReplicaSearch, search_in_rounds
from pagesim.simulator.studies.capacity_search import Criteria
from pagesim.simulator.studies.disagg_search import DisaggPlan, disagg_shapes
from pagesim.simulator.studies.executors import PointExecutor
from pagesim.simulator.studies.fleet_fit import unfit_reason
from pagesim.simulator.studies.point_cache import PointCache
from pagesim.simulator.studies.points import Point, point_key
from pagesim.simulator.studies.sweep import PointRecord

REPLICAS = "replicas"  # the axis the search sets, in each point's axes
# What a --param may not vary: the search sets these itself, from [capacity].
_SET_BY_SEARCH = ("cluster", "capacity", "gpu", "model.tensor_parallel")


@dataclass(frozen=True)
class FleetShape:
    """`system` of `scenario` (a variant, [capacity] removed) on replicas of `gpu` at degree
    `tensor_parallel` behind `router`: everything of a fleet but its size."""

    axes: dict[str, object]  # the --param variant's values
    scenario: Scenario
    system: SystemConfig
    gpu: GPUSpec
    tensor_parallel: int
    router: RouterKind
    pool: str = "pool"
    unfit: str | None = None  # why one replica cannot run (then nothing is simulated)

    @property
    def label(self) -> str:
        values = " ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in self.axes.items())
        shape = f"{self.system.name} {self.gpu.name} TP{self.tensor_parallel} {self.router.value}"
        return f"{shape} {values}".strip()

    def with_replicas(self, count: int) -> Point:
        """The point that runs this shape with `count` replicas."""
        base = self.scenario.cluster
        router = base.router if base is not None else RouterConfig()
        pool = PoolConfig(self.pool, count, self.gpu, self.tensor_parallel)
        cluster = ClusterConfig((pool,), replace(router, kind=self.router))
        scenario = replace(
            self.scenario, gpu=self.gpu, tensor_parallel=self.tensor_parallel, cluster=cluster
        )
        axes = self.axes | {
            "gpu": self.gpu.name,
            "tensor_parallel": self.tensor_parallel,
            "router": self.router.value,
            REPLICAS: count,
        }
        return Point(axes, scenario, self.system, point_key(scenario, self.system))


@dataclass(frozen=True)
class FleetPlan:
    """What a fleet search will try: the scenario's [capacity], and every shape it lists."""

    settings: CapacityConfig
    shapes: list[FleetShape]
    scenario: Scenario  # the first variant as loaded, [capacity] included


def plan_fleets(
    scenario: str | Path, overrides: Sequence[str] = (), params: Sequence[str] = ()
) -> FleetPlan | DisaggPlan:
    """Every shape [capacity] lists, for every system of every variant (`params` as for a sweep;
    none: the scenario's systems), checked for what the search needs; for a disaggregated
    scenario, its prefill x decode shapes (simulator/studies/disagg_search.py)."""
    for text in params:
        path = parse_param(text).path
        if any(path == p or path.startswith(p + ".") for p in _SET_BY_SEARCH):
            raise InputError(
                f"--param {path}: a fleet search sets the GPU, tensor-parallel degree, router "
                "and pool size itself; list them in [capacity] (gpus, tensor_parallel, routers, "
                "min_replicas, max_replicas), or --set capacity.gpus=[...]"
            )
    if params:
        variants = expand_sweep(scenario, overrides, params=params)
    else:
        variants = [({}, load_scenario(scenario, overrides))]
    base = variants[0][1]
    where = base.source or base.name
    if base.capacity is None:
        raise InputError(f"{where}: capacity: a fleet search needs a [capacity] section")
    if base.slo.ttft_s is None and base.slo.tpot_s is None:
        raise InputError(
            f"{where}: slo: a fleet search needs an SLO; add [slo] ttft_s and/or tpot_s, "
            "e.g. --set slo.ttft_s=2 --set slo.tpot_s=0.1"
        )
    if base.cluster is not None and base.cluster.is_disaggregated:
        return DisaggPlan(base.capacity, disagg_shapes(variants, base.capacity), base)
    shapes = []
    for axes, variant in variants:
        search = variant.capacity
        assert search is not None, "every variant has the base's [capacity]"
        cluster = variant.cluster
        pool = cluster.pools[0] if cluster is not None else None
        gpus = search.gpus or (pool.gpu if pool else variant.gpu,)
        degrees = search.tensor_parallel or (
            pool.tensor_parallel if pool else variant.tensor_parallel,
        )
        alone = replace(variant, capacity=None)
        for system in variant.systems:
            own = cluster.router_for(system.name).kind if cluster else RouterKind.ROUND_ROBIN
            for gpu in gpus:
                for tp in degrees:
                    unfit = unfit_reason(replace(alone, gpu=gpu, tensor_parallel=tp), system)
                    for router in search.routers or (own,):
                        name = pool.name if pool else "pool"
                        shapes.append(FleetShape(axes, alone, system, gpu, tp, router, name, unfit))
    if all(s.unfit for s in shapes):
        reasons = "; ".join(
            dict.fromkeys(f"{s.gpu.name} TP{s.tensor_parallel}: {s.unfit}" for s in shapes)
        )
        raise InputError(f"{where}: capacity: no fleet shape can run the model: {reasons}")
    return FleetPlan(base.capacity, shapes, base)


@dataclass
class FleetSearchRun:
    """Per shape: the bracket found, and every evaluation made."""

    shapes: list[FleetShape]
    searches: list[ReplicaSearch]
    settings: CapacityConfig
    evaluations: list[tuple[FleetShape, PointRecord, bool]] = field(default_factory=list)
    num_cached: int = 0
    num_computed: int = 0

    def at(self, shape: FleetShape, size: int | None) -> PointRecord | None:
        """The evaluation of `shape` with `size` replicas (None if it was not simulated)."""
        return next(
            (r for s, r, _ in self.evaluations if s is shape and r.point.axes[REPLICAS] == size),
            None,
        )


def start_size(shape: FleetShape) -> int:
    """Where a shape's search starts: as many GPUs as the scenario's own pool has (its replicas x
    its degree; one replica without [cluster]), in replicas of this shape's degree, rounded up."""
    cluster = shape.scenario.cluster
    if cluster is None:
        return 1
    pool = cluster.pools[0]
    return max(1, -(-pool.count * pool.tensor_parallel // shape.tensor_parallel))


def search_fleets(
    shapes: Sequence[FleetShape],
    settings: CapacityConfig,
    executor: PointExecutor,
    *,
    criteria: Criteria | None = None,
    cache: PointCache | None = None,
    use_cache: bool = True,
    on_round: Callable[[int, int], None] | None = None,
) -> FleetSearchRun:
    """The fewest replicas of every shape that meet the SLO, in lockstep rounds of points (see
    the module docstring). `on_round(round, points)` is told each round's size as it starts."""
    criteria = criteria or Criteria()
    searches = [
        ReplicaSearch(start_size(shape), settings.min_replicas, settings.max_replicas)
        for shape in shapes
    ]
    done = search_in_rounds(
        [
            (shape, search)
            for shape, search in zip(shapes, searches, strict=True)
            if shape.unfit is None
        ],
        FleetShape.with_replicas,
        criteria.is_sustained,
        executor,
        cache=cache,
        use_cache=use_cache,
        on_round=on_round,
    )
    return FleetSearchRun(
        list(shapes), searches, settings, done.evaluations, done.num_cached, done.num_computed
    )

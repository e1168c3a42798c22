"""The cheapest fleet: for fixed traffic and an SLO, the fewest GPUs that meet it.

A scenario's [capacity] section (simulator/core/capacity.py) lists what may vary: the GPU, the
tensor-parallel, pipeline-parallel and data-parallel degrees, expert parallelism and the router,
and a range of pool sizes. A *fleet shape* is one system of the scenario on one GPU in one
replica layout (TP x PP x DP, EP on or off) behind one router; for each, the search finds the
fewest replicas of one pool that meet the SLO. A shape whose replica cannot run the model is
pruned before anything is simulated (simulator/studies/shape_pruning.py says by which rules). A
data_parallel > 1 replica is one DP attention group (cluster/dp_group.py), which runs alone: it
is searched at one group, and DP ranks, not replicas, are its way to grow. The traffic never
changes: a trace replays at its own times (what a rate search cannot vary), a rated workload at
the scenario's rate.

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

Ranked by GPUs (replicas x GPUs per replica: TP x PP x DP), ties by cost per hour; a second
rank orders by cost. Cost per hour = GPUs x the scenario's price per GPU-hour of that GPU. Cost
per million tokens = what the fleet costs for the run's duration (first arrival to last finish)
/ the tokens it served (prompt + output tokens of the finished requests: input and output, as
API prices count them) x 10^6.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from itertools import product
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
from pagesim.simulator.studies.point_cache import PointCache
from pagesim.simulator.studies.points import Point, point_key
from pagesim.simulator.studies.shape_pruning import Layout, prune
from pagesim.simulator.studies.sweep import PointRecord

REPLICAS = "replicas"  # the axis the search sets, in each point's axes
# What a --param may not vary: the search sets these itself, from [capacity].
_SET_BY_SEARCH = (
    "cluster",
    "capacity",
    "gpu",
    "model.tensor_parallel",
    "model.data_parallel",
    "model.expert_parallel",
)


@dataclass(frozen=True)
class FleetShape:
    """`system` of `scenario` (a variant, [capacity] removed) on replicas of `gpu` at degree
    `tensor_parallel` (x `pipeline_parallel` stages x `data_parallel` DP ranks, experts split
    or not) behind `router`: everything of a fleet but its size."""

    axes: dict[str, object]  # the --param variant's values
    scenario: Scenario
    system: SystemConfig
    gpu: GPUSpec
    tensor_parallel: int
    router: RouterKind
    pool: str = "pool"
    unfit: str | None = None  # why one replica cannot run (then nothing is simulated)
    pipeline_parallel: int = 1
    data_parallel: int = 1
    expert_parallel: bool = False
    pruned_by: str | None = None  # the pruning rule `unfit` breaks (shape_pruning.py)

    @property
    def layout(self) -> Layout:
        return Layout(
            self.tensor_parallel, self.pipeline_parallel, self.data_parallel, self.expert_parallel
        )

    @property
    def gpus_per_replica(self) -> int:
        return self.layout.num_gpus

    @property
    def is_dp_group(self) -> bool:
        """One DP attention group, which runs alone (no [cluster], no router of pagesim's)."""
        return self.data_parallel > 1

    @property
    def label(self) -> str:
        values = " ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in self.axes.items())
        router = "" if self.is_dp_group else f" {self.router.value}"
        shape = f"{self.system.name} {self.gpu.name} {self.layout.text.replace(' x ', 'x')}"
        return f"{shape}{router} {values}".strip()

    def with_replicas(self, count: int) -> Point:
        """The point that runs this shape with `count` replicas (a DP group: one)."""
        scenario, system = self.layout.apply(self.scenario, self.system, self.gpu)
        if self.is_dp_group:
            assert count == 1, "a DP group runs alone (cluster/dp_group.py)"
            scenario = replace(scenario, cluster=None)
        else:
            base = self.scenario.cluster
            router = base.router if base is not None else RouterConfig()
            pool = PoolConfig(self.pool, count, self.gpu, self.tensor_parallel)
            cluster = ClusterConfig((pool,), replace(router, kind=self.router))
            scenario = replace(scenario, cluster=cluster)
        axes = self.axes | {
            "gpu": self.gpu.name,
            "tensor_parallel": self.tensor_parallel,
            "pipeline_parallel": self.pipeline_parallel,
            "data_parallel": self.data_parallel,
            "expert_parallel": self.expert_parallel,
            "router": self.router.value,
            REPLICAS: count,
        }
        return Point(axes, scenario, system, point_key(scenario, system))


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
    shapes = [shape for axes, variant in variants for shape in _variant_shapes(axes, variant)]
    if all(s.unfit for s in shapes):
        reasons = "; ".join(
            dict.fromkeys(f"{s.gpu.name} {s.layout.text}: {s.unfit}" for s in shapes)
        )
        raise InputError(f"{where}: capacity: no fleet shape can run the model: {reasons}")
    return FleetPlan(base.capacity, shapes, base)


def _layouts(search: CapacityConfig, variant: Scenario, tp_default: int) -> list[Layout]:
    """Every TP x PP x DP x EP layout [capacity] lists (PP 0: each system's own; a DP > 1
    layout is always expert-parallel, so `expert_parallel` varies the DP 1 layouts only)."""
    out = []
    for tp, pp, dp in product(
        search.tensor_parallel or (tp_default,),
        search.pipeline_parallel or (0,),
        search.data_parallel or (variant.data_parallel,),
    ):
        flags = (True,) if dp > 1 else search.expert_parallel or (variant.expert_parallel,)
        out += [Layout(tp, pp, dp, ep) for ep in dict.fromkeys(flags)]
    return out


def _variant_shapes(axes: dict[str, object], variant: Scenario) -> list[FleetShape]:
    """One variant's shapes: every system x GPU x layout x router, each pruned or not."""
    search = variant.capacity
    assert search is not None, "every variant has the base's [capacity]"
    cluster = variant.cluster
    pool = cluster.pools[0] if cluster is not None else None
    gpus = search.gpus or (pool.gpu if pool else variant.gpu,)
    alone = replace(variant, capacity=None)
    name = pool.name if pool else "pool"
    shapes = []
    for system, gpu, listed in product(
        variant.systems,
        gpus,
        _layouts(search, variant, pool.tensor_parallel if pool else variant.tensor_parallel),
    ):
        layout = replace(
            listed, pipeline_parallel=listed.pipeline_parallel or system.pipeline_parallel
        )
        own = cluster.router_for(system.name).kind if cluster else RouterKind.ROUND_ROBIN
        routers = search.routers or (own,)
        on, runs = layout.apply(alone, system, gpu)
        pruned = prune(on, runs, layout, search.max_gpus, search.min_replicas)
        why, rule = (None, None) if pruned is None else (pruned.detail, pruned.rule)
        for router in routers[:1] if layout.data_parallel > 1 else routers:
            shapes.append(
                FleetShape(
                    axes,
                    alone,
                    system,
                    gpu,
                    layout.tensor_parallel,
                    router,
                    name,
                    why,
                    layout.pipeline_parallel,
                    layout.data_parallel,
                    layout.expert_parallel,
                    rule,
                )
            )
    return shapes


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
    its degree; one replica without [cluster]), in replicas of this shape's GPUs, rounded up."""
    cluster = shape.scenario.cluster
    if cluster is None:
        return 1
    pool = cluster.pools[0]
    return max(1, -(-pool.count * pool.tensor_parallel // shape.gpus_per_replica))


def replica_search(shape: FleetShape, settings: CapacityConfig) -> ReplicaSearch:
    """The bisection of `shape`'s replica count: min..max_replicas, no more than max_gpus allow;
    a DP group: one group."""
    if shape.is_dp_group:
        return ReplicaSearch(1, 1, 1)
    high = settings.max_replicas
    if settings.max_gpus is not None:
        high = max(settings.min_replicas, min(high, settings.max_gpus // shape.gpus_per_replica))
    return ReplicaSearch(start_size(shape), settings.min_replicas, high)


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
    searches = [replica_search(shape, settings) for shape in shapes]
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

"""The fewest GPUs for a disaggregated fleet: prefill count x decode count x prefill degree x
decode degree, for fixed traffic and an SLO.

A disaggregated scenario's [capacity] (simulator/scenario/capacity.py) bounds the search: each
pool's size in `min_replicas`..`max_replicas`, the degrees in `prefill_tensor_parallel` x
`decode_tensor_parallel` (default: the pools' own), and fleets of at most `max_gpus` GPUs. A
*shape* is one system of the scenario at one prefill degree and one decode degree; a
*candidate* is a shape with a prefill and a decode count. Every candidate within the bounds is
enumerated (`candidates`), and judged by capacity_search.Criteria, as the one-pool search judges
a fleet (simulator/studies/fleet_search.py).

Candidates run in rounds of equal GPU count, fewest first, each round a batch of points on the
sweep executors (process pool or Ray) through the sweep's point cache, so a rerun resumes. The
search assumes that adding a replica to either pool never breaks an SLO a fleet met: a candidate
with at least as many prefill and decode replicas as one of its shape that met is not
simulated ("dominated"). A colocated system of the scenario (`colocated_systems`) runs the same
pools, every replica doing both phases: the same GPUs, which is the comparison the issue asks
for; of its candidates that make the same fleet (the same replicas of each degree) one runs.

Ranked by GPUs, then goodput per GPU (higher first), then cost per hour; `rank_by_goodput` and
`rank_by_cost` order the shapes' answers by those alone (simulator/studies/disagg_ranking.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from pagesim.simulator.core.capacity import CapacityConfig
from pagesim.simulator.core.cluster import ClusterConfig, PoolRole
from pagesim.simulator.core.config import Scenario, SystemConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.studies.capacity_search import Criteria
from pagesim.simulator.studies.executors import PointExecutor
from pagesim.simulator.studies.fleet_fit import unfit_reason
from pagesim.simulator.studies.point_cache import PointCache
from pagesim.simulator.studies.points import Point, point_key
from pagesim.simulator.studies.sweep import PointRecord, run_points

PREFILL, DECODE = "prefill_replicas", "decode_replicas"  # the axes the search sets


@dataclass(frozen=True)
class DisaggShape:
    """`system` of `scenario` (a variant, [capacity] removed) with its prefill pool at degree
    `prefill_tp` and its decode pool at `decode_tp`: everything of a fleet but its sizes."""

    axes: dict[str, object]  # the --param variant's values
    scenario: Scenario
    system: SystemConfig
    prefill_tp: int
    decode_tp: int
    unfit: str | None = None  # why a replica of one pool cannot run (then nothing is simulated)

    @property
    def cluster(self) -> ClusterConfig:
        assert self.scenario.cluster is not None
        return self.scenario.cluster

    @property
    def is_colocated(self) -> bool:
        return self.system.name in self.cluster.colocated_systems

    @property
    def label(self) -> str:
        values = " ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in self.axes.items())
        kind = "colocated" if self.is_colocated else "P:D"
        shape = f"{self.system.name} {kind} TP{self.prefill_tp}:TP{self.decode_tp}"
        return f"{shape} {values}".strip()

    def num_gpus(self, prefill: int, decode: int) -> int:
        return prefill * self.prefill_tp + decode * self.decode_tp

    def fleet(self, prefill: int, decode: int) -> tuple[tuple[int, int], ...]:
        """The replicas of each degree (what a colocated fleet is, whichever pool they are in)."""
        counts = Counter({self.prefill_tp: 0, self.decode_tp: 0})
        counts[self.prefill_tp] += prefill
        counts[self.decode_tp] += decode
        return tuple(sorted(counts.items()))

    def with_sizes(self, prefill: int, decode: int) -> Point:
        """The point that runs this shape with `prefill` and `decode` replicas."""
        pools = tuple(
            replace(pool, count=prefill, tensor_parallel=self.prefill_tp)
            if pool.role is PoolRole.PREFILL
            else replace(pool, count=decode, tensor_parallel=self.decode_tp)
            for pool in self.cluster.pools
        )
        scenario = replace(self.scenario, cluster=replace(self.cluster, pools=pools))
        axes = self.axes | {
            "prefill_tensor_parallel": self.prefill_tp,
            "decode_tensor_parallel": self.decode_tp,
            PREFILL: prefill,
            DECODE: decode,
        }
        return Point(axes, scenario, self.system, point_key(scenario, self.system))


def candidates(shape: DisaggShape, settings: CapacityConfig) -> Iterator[tuple[int, int]]:
    """Every (prefill, decode) count of `shape` within [capacity]'s bounds, fewest GPUs first
    (then fewer prefill replicas first)."""
    low, high = settings.min_replicas, settings.max_replicas
    limit = settings.max_gpus
    assert limit is not None, "a disaggregated [capacity] always has max_gpus"
    sizes = [
        (p, d)
        for p in range(low, high + 1)
        for d in range(low, high + 1)
        if shape.num_gpus(p, d) <= limit
    ]
    return iter(sorted(sizes, key=lambda pd: (shape.num_gpus(*pd), pd)))


def disagg_shapes(
    variants: Sequence[tuple[dict[str, object], Scenario]], settings: CapacityConfig
) -> list[DisaggShape]:
    """Every shape of every variant: its systems x prefill degrees x decode degrees."""
    shapes = []
    for axes, variant in variants:
        cluster = variant.cluster
        assert cluster is not None and cluster.is_disaggregated
        prefill = next(p for p in cluster.pools if p.role is PoolRole.PREFILL)
        decode = next(p for p in cluster.pools if p.role is PoolRole.DECODE)
        alone = replace(variant, capacity=None)
        for system in variant.systems:
            for tp_p in settings.prefill_tensor_parallel or (prefill.tensor_parallel,):
                for tp_d in settings.decode_tensor_parallel or (decode.tensor_parallel,):
                    unfit = unfit_reason(
                        replace(alone, gpu=prefill.gpu, tensor_parallel=tp_p), system
                    ) or unfit_reason(replace(alone, gpu=decode.gpu, tensor_parallel=tp_d), system)
                    shapes.append(DisaggShape(axes, alone, system, tp_p, tp_d, unfit))
    if all(s.unfit for s in shapes):
        reasons = "; ".join(dict.fromkeys(str(s.unfit) for s in shapes))
        where = variants[0][1].source or variants[0][1].name
        raise InputError(
            f"{where}: capacity: no prefill x decode degree can run the model: {reasons}"
        )
    return shapes


@dataclass(frozen=True)
class DisaggPlan:
    """What a disaggregated fleet search will try: the scenario's [capacity], and every shape."""

    settings: CapacityConfig
    shapes: list[DisaggShape]
    scenario: Scenario  # the first variant as loaded, [capacity] included


@dataclass
class DisaggSearchRun:
    """Every candidate judged (simulated, or reused from an equal colocated fleet), per shape."""

    shapes: list[DisaggShape]
    settings: CapacityConfig
    evaluations: list[tuple[DisaggShape, PointRecord, bool]] = field(default_factory=list)
    num_dominated: list[int] = field(default_factory=list)  # per shape: skipped candidates
    num_cached: int = 0
    num_computed: int = 0

    def of(self, shape: DisaggShape) -> list[tuple[PointRecord, bool]]:
        return [(record, ok) for s, record, ok in self.evaluations if s is shape]


def _dominated(met: list[tuple[int, int]], prefill: int, decode: int) -> bool:
    return any(p <= prefill and d <= decode for p, d in met)


def search_disagg(
    shapes: Sequence[DisaggShape],
    settings: CapacityConfig,
    executor: PointExecutor,
    *,
    criteria: Criteria | None = None,
    cache: PointCache | None = None,
    use_cache: bool = True,
    on_round: Callable[[int, int], None] | None = None,
) -> DisaggSearchRun:
    """Judge every candidate of every shape, in rounds of equal GPU count (see the module
    docstring). `on_round(round, points)` is told each round's size as it starts."""
    criteria = criteria or Criteria()
    run = DisaggSearchRun(list(shapes), settings, num_dominated=[0] * len(shapes))
    todo = {
        i: list(candidates(shape, settings)) for i, shape in enumerate(shapes) if not shape.unfit
    }
    met: dict[int, list[tuple[int, int]]] = {i: [] for i in todo}
    seen: dict[tuple[str, tuple[tuple[int, int], ...]], tuple[PointRecord, bool]] = {}
    gpu_counts = sorted({shapes[i].num_gpus(*pd) for i, sizes in todo.items() for pd in sizes})
    for round_number, gpus in enumerate(gpu_counts, start=1):
        batch: list[tuple[int, int, int]] = []
        for i, sizes in todo.items():
            shape = shapes[i]
            for p, d in sizes:
                if shape.num_gpus(p, d) != gpus:
                    continue
                if _dominated(met[i], p, d):
                    run.num_dominated[i] += 1
                    continue
                batch.append((i, p, d))
        fresh, first = [], {}  # simulated: one candidate per colocated fleet
        for i, p, d in batch:
            key = _twin_key(shapes[i], p, d)
            if key in seen or (key[0] and key in first):
                continue
            first[key] = (i, p, d)
            fresh.append((i, p, d))
        if on_round is not None and fresh:
            on_round(round_number, len(fresh))
        points = [shapes[i].with_sizes(p, d) for i, p, d in fresh]
        done = run_points(points, executor, cache=cache, use_cache=use_cache)
        run.num_cached += done.num_cached
        run.num_computed += done.num_computed
        judged = {
            (i, p, d): (record, criteria.is_sustained(record.summary))
            for (i, p, d), record in zip(fresh, done.records, strict=True)
        }
        for key, ran in first.items():
            if key[0]:
                seen[key] = judged[ran]
        for i, p, d in batch:
            key = _twin_key(shapes[i], p, d)
            record, ok = judged[(i, p, d)] if (i, p, d) in judged else seen[key]
            if ok:
                met[i].append((p, d))
            run.evaluations.append((shapes[i], _as_sizes(record, shapes[i], p, d), ok))
    return run


def _twin_key(
    shape: DisaggShape, prefill: int, decode: int
) -> tuple[str, tuple[tuple[int, int], ...]]:
    """What makes two candidates the same fleet: for a colocated system, its name and the
    replicas of each degree; "" (never equal) for a disaggregated one."""
    if not shape.is_colocated:
        return ("", ())
    return (f"{shape.system.name} {shape.axes}", shape.fleet(prefill, decode))


def _as_sizes(record: PointRecord, shape: DisaggShape, prefill: int, decode: int) -> PointRecord:
    """A colocated twin's record reused for an equal fleet, relabelled with this candidate's."""
    axes = record.point.axes
    if axes.get(PREFILL) == prefill and axes.get(DECODE) == decode:
        return record
    point = shape.with_sizes(prefill, decode)
    return replace(record, point=replace(record.point, axes=point.axes))

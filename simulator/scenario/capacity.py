"""Reading a scenario's [capacity] section: the fleets `pagesim capacity` tries.

[capacity]  min_replicas (default 1), max_replicas (default 64): the pool sizes searched
            gpus = ["a100-80gb", ...]        GPU presets (default: the pool's GPU, or [gpu])
            tensor_parallel = [1, 2, ...]    degrees (default: the pool's, or [model]'s)
            routers = ["round-robin", ...]   router kinds (default: each system's own router)
            price_per_gpu_hour = { a100-80gb = 1.5, ... }  per GPU searched (or none at all)
            currency (default "USD"): the unit of the prices, as printed

A disaggregated scenario (one prefill pool, one decode pool) searches both pools' sizes (each in
min_replicas..max_replicas) and degrees instead of gpus / tensor_parallel / routers:
            prefill_tensor_parallel = [1, 2], decode_tensor_parallel = [1]  (default: the pool's)
            max_gpus = 8   fleets of at most this many GPUs (default: twice the scenario's fleet)
            price_per_gpu_hour: one per pool GPU

The same idea in other layers: the frozen settings are simulator/core/capacity.py; the rate
search's pages, reports/capacity.py.
"""

from __future__ import annotations

from dataclasses import replace
from enum import Enum
from typing import Any, TypeVar

from pagesim.simulator.cluster.host_memory import max_replicas_within, replica_blocks
from pagesim.simulator.core.capacity import CapacityConfig
from pagesim.simulator.core.catalog import GPUS, GPUSpec, get_gpu
from pagesim.simulator.core.cluster import ClusterConfig, PoolConfig, PoolRole, RouterKind
from pagesim.simulator.core.config import Scenario, SystemConfig
from pagesim.simulator.core.deployments import Deployment
from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.core.limits import MAX_FLEET_KV_BLOCKS
from pagesim.simulator.scenario.cluster import MAX_REPLICAS
from pagesim.simulator.scenario.hardware_fit import kv_dtype_problem, scale_up_problem
from pagesim.simulator.scenario.table import Table, described, show


def _array(t: Table, name: str) -> list[Any]:
    """A non-empty array without repeats, or [] when the key is absent."""
    if not t.has(name):
        return []
    values = t.data[name]
    if not isinstance(values, list) or not values:
        t.fail(name, f"expected a non-empty array, got {described(values)}")
    for i, value in enumerate(values):
        if value in values[:i]:
            t.fail(name, f"{show(value)} is listed twice")
    return values


def _gpus(t: Table, scenario: Scenario) -> tuple[GPUSpec, ...]:
    out = []
    for value in _array(t, "gpus"):
        if isinstance(value, str) and value == scenario.gpu.name:
            out.append(scenario.gpu)  # the scenario's own [gpu], preset or custom
            continue
        try:
            if not isinstance(value, str):
                raise InputError("")
            out.append(get_gpu(value))
        except InputError:
            t.fail("gpus", f"unknown GPU {show(value)}; valid: {choices_text(GPUS)}")
    return tuple(out)


def _tensor_parallel(
    t: Table, scenario: Scenario, name: str = "tensor_parallel"
) -> tuple[int, ...]:
    out = []
    heads = scenario.model.num_heads
    for value in _array(t, name):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1024:
            t.fail(name, f"expected integers in [1, 1024], got {show(value)}")
        if heads % value:
            t.fail(name, f"{value} does not divide {scenario.model.name}'s {heads} heads")
        out.append(value)
    return tuple(out)


def _routers(t: Table) -> tuple[RouterKind, ...]:
    return tuple(_choice(t, "routers", value, RouterKind) for value in _array(t, "routers"))


E = TypeVar("E", bound=Enum)


def _choice(t: Table, name: str, value: object, enum: type[E]) -> E:
    for member in enum:
        if isinstance(value, str) and member.value == value.lower():
            return member
    valid = choices_text(m.value for m in enum)
    t.fail(name, f"unknown {name.rstrip('s')} {show(value)}; valid: {valid}")


def _prices(t: Table, searched: list[str]) -> tuple[tuple[str, float], ...]:
    if not t.has("price_per_gpu_hour"):
        return ()
    table = t.data["price_per_gpu_hour"]
    if not isinstance(table, dict) or not table:
        t.fail(
            "price_per_gpu_hour",
            f"expected a table of GPU name = price per GPU-hour, e.g. "
            f"{{ {searched[0]} = 2.0 }}, got {described(table)}",
        )
    prices = Table(t.ctx, t.path("price_per_gpu_hour"), table, dict.fromkeys(searched))
    out = tuple((gpu, prices.number(gpu, lo=0.0, hi=1e6, lo_open=True)) for gpu in table)
    missing = [gpu for gpu in searched if gpu not in table]
    if missing:
        t.fail(
            "price_per_gpu_hour",
            f"no price for {choices_text(missing)}; give one for every GPU searched "
            f"({choices_text(searched)}), or none to rank by GPUs only",
        )
    return out


def read_capacity(t: Table, scenario: Scenario, is_present: bool) -> CapacityConfig | None:
    """[capacity] checked against the rest of the scenario (read first): None when absent (an
    empty [capacity] is a fleet search with every default)."""
    if not is_present:
        return None
    cluster = scenario.cluster
    if cluster is not None and cluster.is_disaggregated:
        return _read_disaggregated(t, scenario, cluster)
    for name in _DISAGG_KEYS:
        if t.has(name):
            t.fail(
                name,
                "applies to a disaggregated scenario ([[cluster.pools]] with role = "
                '"prefill" and "decode"); this one searches one pool: use tensor_parallel',
            )
    if cluster is not None and len(cluster.pools) > 1:
        names = choices_text(p.name for p in cluster.pools)
        t.ctx.fail(
            t.key,
            f"a fleet search sizes one pool of identical replicas, but [cluster] has "
            f"{len(cluster.pools)} pools ({names}); keep one [[cluster.pools]]",
        )
    base = CapacityConfig()
    low = t.integer("min_replicas", base.min_replicas, hi=MAX_REPLICAS)
    high = t.integer("max_replicas", max(base.max_replicas, low), hi=MAX_REPLICAS)
    if high < low:
        t.fail("max_replicas", f"must be >= min_replicas ({low}), got {high}")
    gpus = _gpus(t, scenario)
    pool_gpu = cluster.pools[0].gpu if cluster is not None else scenario.gpu
    pool_tp = cluster.pools[0].tensor_parallel if cluster is not None else scenario.tensor_parallel
    searched = [g.name for g in gpus] or [pool_gpu.name]
    degrees = _tensor_parallel(t, scenario)
    for system in scenario.systems:
        for gpu in gpus or (pool_gpu,):
            for tp in degrees or (pool_tp,):
                problem = scale_up_problem(gpu, tp) or kv_dtype_problem(
                    gpu, scenario.model, scenario.kv_dtype, scenario.systems
                )
                if problem is not None:
                    t.fail("tensor_parallel" if tp > gpu.scale_up_gpus else "gpus", problem)
                blocks = _blocks(replace(scenario, gpu=gpu, tensor_parallel=tp), system)
                if high * blocks > MAX_FLEET_KV_BLOCKS:
                    t.fail(
                        "max_replicas",
                        f"{high:,} replicas of system {system.name!r} on {gpu.name} at "
                        f"tensor_parallel {tp} would hold {high * blocks:,} KV blocks "
                        f"({blocks:,} GPU and CPU blocks each), more than the simulator builds "
                        f"in one run ({MAX_FLEET_KV_BLOCKS:,}, about 80 bytes of host memory "
                        f"each): search at most {max_replicas_within(blocks):,} replicas",
                    )
    return CapacityConfig(
        min_replicas=low,
        max_replicas=high,
        gpus=gpus,
        tensor_parallel=degrees,
        routers=_routers(t),
        price_per_gpu_hour=_prices(t, searched),
        currency=t.text("currency", base.currency),
    )


def _blocks(scenario: Scenario, system: SystemConfig) -> int:
    """KV blocks one replica of `system` builds on `scenario`'s GPU and degree; 0 when it cannot
    run there at all (the search reports such a shape, and simulates nothing of it)."""
    try:
        return replica_blocks(Deployment(system, system, scenario))
    except InputError:
        return 0


_DISAGG_KEYS = ("max_gpus", "prefill_tensor_parallel", "decode_tensor_parallel")
_ONE_POOL_KEYS = {  # key -> what a disaggregated search uses instead
    "gpus": "each pool keeps its own GPU ([[cluster.pools]] gpu)",
    "tensor_parallel": "use prefill_tensor_parallel and decode_tensor_parallel",
    "routers": "the phase routers are the scenario's ([cluster.prefill_router], "
    "[cluster.decode_router])",
}


def _read_disaggregated(t: Table, scenario: Scenario, cluster: ClusterConfig) -> CapacityConfig:
    """[capacity] of a disaggregated scenario: pool sizes, degrees per phase, max_gpus."""
    roles = [pool.role for pool in cluster.pools]
    if sorted(r.value for r in roles) != ["decode", "prefill"]:
        t.ctx.fail(
            t.key,
            f"a disaggregated fleet search sizes one prefill pool and one decode pool, but "
            f"[cluster] has {len(roles)} pools ({choices_text(r.value for r in roles)}); keep "
            "one [[cluster.pools]] of each role",
        )
    for name, instead in _ONE_POOL_KEYS.items():
        if t.has(name):
            t.fail(name, f"not searched for a disaggregated scenario: {instead}")
    base = CapacityConfig()
    low = t.integer("min_replicas", base.min_replicas, hi=MAX_REPLICAS)
    high = t.integer("max_replicas", max(base.max_replicas, low), hi=MAX_REPLICAS)
    if high < low:
        t.fail("max_replicas", f"must be >= min_replicas ({low}), got {high}")
    prefill = next(p for p in cluster.pools if p.role is PoolRole.PREFILL)
    decode = next(p for p in cluster.pools if p.role is PoolRole.DECODE)
    prefill_tp = _tensor_parallel(t, scenario, "prefill_tensor_parallel")
    decode_tp = _tensor_parallel(t, scenario, "decode_tensor_parallel")
    own = sum(p.count * p.tensor_parallel for p in cluster.pools)
    smallest = low * min(prefill_tp or (prefill.tensor_parallel,)) + low * min(
        decode_tp or (decode.tensor_parallel,)
    )
    max_gpus = t.integer("max_gpus", max(2 * own, smallest), hi=MAX_REPLICAS * 1024)
    if max_gpus < smallest:
        t.fail(
            "max_gpus",
            f"the smallest fleet searched ({low} prefill + {low} decode replicas at the lowest "
            f"degrees) has {smallest} GPUs; raise max_gpus to at least {smallest}",
        )
    searched = list(dict.fromkeys(p.gpu.name for p in cluster.pools))
    for system in scenario.systems:
        for tp_p in prefill_tp or (prefill.tensor_parallel,):
            for tp_d in decode_tp or (decode.tensor_parallel,):
                on_p = replace(scenario, gpu=prefill.gpu, tensor_parallel=tp_p)
                on_d = replace(scenario, gpu=decode.gpu, tensor_parallel=tp_d)
                per = (_blocks(on_p, _runs(prefill, system, scenario)), tp_p)
                per_d = (_blocks(on_d, _runs(decode, system, scenario)), tp_d)
                most = _most_blocks(per, per_d, low, high, max_gpus)
                if most is not None and most[0] > MAX_FLEET_KV_BLOCKS:
                    total, p, d = most
                    t.fail(
                        "max_gpus",
                        f"the largest fleet searched, {p:,} prefill (TP {tp_p}) + {d:,} decode "
                        f"(TP {tp_d}) replicas of system {system.name!r}, would hold {total:,} "
                        f"KV blocks, more than the simulator builds in one run "
                        f"({MAX_FLEET_KV_BLOCKS:,}, about 80 bytes of host memory each): "
                        "lower max_gpus or max_replicas",
                    )
    return CapacityConfig(
        min_replicas=low,
        max_replicas=high,
        price_per_gpu_hour=_prices(t, searched),
        currency=t.text("currency", base.currency),
        max_gpus=max_gpus,
        prefill_tensor_parallel=prefill_tp,
        decode_tensor_parallel=decode_tp,
    )


def _runs(pool: PoolConfig, system: SystemConfig, scenario: Scenario) -> SystemConfig:
    """The system `pool` runs when `system` is searched: the pool's own, or `system`."""
    by_name = {s.name: s for s in scenario.systems}
    return system if pool.system is None else by_name[pool.system]


def _most_blocks(
    prefill: tuple[int, int], decode: tuple[int, int], low: int, high: int, max_gpus: int
) -> tuple[int, int, int] | None:
    """(blocks, prefill count, decode count) of the candidate with the most KV blocks among
    `low`..`high` replicas of each pool within `max_gpus` GPUs; `prefill` and `decode` are
    (blocks per replica, GPUs per replica). For each prefill count the most decode replicas
    that fit hold the most blocks."""
    (blocks_p, tp_p), (blocks_d, tp_d) = prefill, decode
    best = None
    for p in range(low, high + 1):
        d = min(high, (max_gpus - p * tp_p) // tp_d)
        if d < low:
            break
        total = p * blocks_p + d * blocks_d
        if best is None or total > best[0]:
            best = (total, p, d)
    return best

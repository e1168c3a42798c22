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
"""

from __future__ import annotations

from enum import Enum
from typing import Any, TypeVar

from pagesim.simulator.core.capacity import CapacityConfig
from pagesim.simulator.core.catalog import GPUS, GPUSpec, get_gpu
from pagesim.simulator.core.cluster import ClusterConfig, PoolRole, RouterKind
from pagesim.simulator.core.config import Scenario
from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.scenario.cluster import MAX_REPLICAS
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
    searched = [g.name for g in gpus] or [pool_gpu.name]
    return CapacityConfig(
        min_replicas=low,
        max_replicas=high,
        gpus=gpus,
        tensor_parallel=_tensor_parallel(t, scenario),
        routers=_routers(t),
        price_per_gpu_hour=_prices(t, searched),
        currency=t.text("currency", base.currency),
    )


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
    return CapacityConfig(
        min_replicas=low,
        max_replicas=high,
        price_per_gpu_hour=_prices(t, searched),
        currency=t.text("currency", base.currency),
        max_gpus=max_gpus,
        prefill_tensor_parallel=prefill_tp,
        decode_tensor_parallel=decode_tp,
    )

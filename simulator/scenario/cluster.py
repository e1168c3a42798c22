"""Reading a scenario's [cluster] section: pools of replicas and the router in front of them.

[cluster.router]   kind = round-robin | random | least-outstanding | least-kv |
                   power-of-two | session-affinity | prefix-aware;  report_interval_s,
                   cache_threshold, balance_abs_threshold, balance_rel_threshold,
                   prefix_block_tokens, ring_points
[[cluster.pools]]  name, count, system (a [[systems]] name; default: the system simulated),
                   gpu (a GPU preset; default: [gpu]), tensor_parallel (default: [model]'s),
                   role (both | prefill | decode)
Disaggregation's keys ([cluster.link], a router per phase, colocated_systems):
simulator/scenario/disagg.py.

The same idea in the core layer: simulator/core/cluster.py, the frozen configuration read here.
"""

from __future__ import annotations

from pagesim.simulator.core.catalog import GPUS, GPUSpec, ModelSpec, get_gpu
from pagesim.simulator.core.cluster import (
    ClusterConfig,
    PoolConfig,
    PoolRole,
    RouterConfig,
    RouterKind,
)
from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.scenario.disagg import check_roles, read_colocated, read_link, read_role
from pagesim.simulator.scenario.hardware_fit import scale_up_problem
from pagesim.simulator.scenario.schema import ROUTER_KEY_READERS, is_read, router_tables
from pagesim.simulator.scenario.table import Table

MAX_REPLICAS = 4096


def read_cluster(
    t: Table, gpu: GPUSpec, model: ModelSpec, tensor_parallel: int, system_names: list[str]
) -> ClusterConfig | None:
    if not t.data:
        return None
    router_t = t.table("router")
    router = _router(router_t, RouterConfig())
    by_system = _by_system(router_t, system_names)
    tables = t.tables("pools")
    if not tables:
        t.fail("pools", "required: at least one [[cluster.pools]] table (name, count, ...)")
    pools: list[PoolConfig] = []
    seen: set[str] = set()
    for i, p in enumerate(tables):
        name = p.text("name", f"pool{i}")
        if name in seen:
            p.fail("name", f"duplicate pool name {name!r}; names must be unique")
        seen.add(name)
        if p.has("count") and p.data["count"] == 0:
            p.fail("count", "a pool needs at least 1 replica (got 0); remove the pool or set 1")
        count = p.integer("count", hi=MAX_REPLICAS)
        system = p.text("system", None)
        if system is not None and system not in system_names:
            p.fail(
                "system",
                f"no [[systems]] named {system!r}; valid: {choices_text(system_names)}",
            )
        pool_gpu = gpu
        if p.has("gpu"):
            try:
                pool_gpu = get_gpu(p.text("gpu"))
            except InputError:
                p.fail("gpu", f"unknown GPU {p.data['gpu']!r}; valid: {choices_text(GPUS)}")
        tp = p.integer("tensor_parallel", tensor_parallel, hi=1024)
        if model.num_heads % tp:
            p.fail(
                "tensor_parallel", f"{tp} does not divide {model.name}'s {model.num_heads} heads"
            )
        problem = scale_up_problem(pool_gpu, tp)
        if problem is not None:
            p.fail("tensor_parallel", problem)
        pools.append(PoolConfig(name, count, pool_gpu, tp, system, read_role(p)))
    check_roles(t, pools)
    if all(pool.role is PoolRole.BOTH for pool in pools):
        for name in ("prefill_router", "decode_router"):
            if t.has(name):
                t.ctx.fail(
                    t.table(name).key,
                    'a router per phase needs prefill and decode pools (role = "prefill" / '
                    '"decode"); every pool here does both: set the router in [cluster.router]',
                )
    cluster = ClusterConfig(
        tuple(pools),
        router,
        by_system,
        link=read_link(t.table("link"), pools),
        prefill_router=_phase_router(t, "prefill_router", router),
        decode_router=_phase_router(t, "decode_router", router),
        colocated_systems=read_colocated(t, system_names, pools),
    )
    if cluster.num_replicas > MAX_REPLICAS:
        t.fail("pools", f"{cluster.num_replicas} replicas in all; at most {MAX_REPLICAS}")
    return cluster


def _router(t: Table, base: RouterConfig) -> RouterConfig:
    return RouterConfig(
        kind=t.choice("kind", RouterKind, base.kind),
        report_interval_s=t.number("report_interval_s", base.report_interval_s, hi=1e6),
        cache_threshold=t.fraction("cache_threshold", base.cache_threshold),
        balance_abs_threshold=t.integer("balance_abs_threshold", base.balance_abs_threshold, lo=0),
        balance_rel_threshold=t.number(
            "balance_rel_threshold", base.balance_rel_threshold, lo=1.0, hi=1e6
        ),
        prefix_block_tokens=t.integer("prefix_block_tokens", None, hi=1 << 20),
        ring_points=t.integer("ring_points", base.ring_points, hi=1 << 16),
    )


def _phase_router(t: Table, name: str, base: RouterConfig) -> RouterConfig | None:
    """[cluster.prefill_router] / [cluster.decode_router]: None when absent (the fleet's)."""
    return _router(t.table(name), base) if t.has(name) else None


def _by_system(t: Table, system_names: list[str]) -> tuple[tuple[str, RouterKind], ...]:
    if not t.has("by_system"):
        return ()
    table = t.data["by_system"]
    valid = choices_text(k.value for k in RouterKind)
    if not isinstance(table, dict) or not table:
        t.fail("by_system", f"expected a table of system name = router kind ({valid})")
    out = []
    for name, kind in table.items():
        if name not in system_names:
            t.fail(
                "by_system",
                f"no [[systems]] named {name!r}; valid: {choices_text(system_names)}",
            )
        kinds = {k.value: k for k in RouterKind}
        if not isinstance(kind, str) or kind.lower() not in kinds:
            t.fail("by_system", f"{name}: unknown kind {kind!r}; valid: {valid}")
        out.append((str(name), kinds[kind.lower()]))
    return tuple(out)


def check_router_keys(t: Table, cluster: ClusterConfig, searched: tuple[RouterKind, ...]) -> None:
    """Each router table's keys against the kinds that read them (`router_tables`)."""
    for name, _, kinds in router_tables(cluster, searched):
        table = t.table(name)
        for key in ROUTER_KEY_READERS:
            if table.has(key) and not is_read(key, kinds):
                readers = choices_text(k.value for k in ROUTER_KEY_READERS[key])
                here = choices_text(sorted(k.value for k in kinds))
                table.fail(key, f"only read by the {readers} router; the routers here: {here}")

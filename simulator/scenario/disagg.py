"""Reading a disaggregated fleet's keys of [cluster] (simulator/cluster/disagg.py):

[[cluster.pools]]        role = both | prefill | decode   (default both: colocated)
[cluster.link]           preset = nvlink4 | ib-ndr | ib-hdr | roce-400g | roce-200g | pcie4 |
                         pcie5, or bandwidth_gb_s (per GPU port, one direction); latency_s;
                         layerwise (send each layer's KV while later layers compute)
[cluster.prefill_router], [cluster.decode_router]   a router per phase, keys as
                         [cluster.router] (default: [cluster.router])
[cluster]                colocated_systems = [names of [[systems]] that run the same pools
                         colocated, role "both", behind [cluster.router]]
"""

from __future__ import annotations

from dataclasses import replace

from pagesim.simulator.cluster.disagg_checks import decode_memory_reason, workload_refusal
from pagesim.simulator.core.cluster import PoolConfig, PoolRole
from pagesim.simulator.core.config import PreemptionPolicy, Scenario, SystemConfig
from pagesim.simulator.core.defaults import knobs_of, resolve_system
from pagesim.simulator.core.draft import model_draft_key
from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.core.link import GB, LINK_PRESETS, LinkConfig, link_preset
from pagesim.simulator.core.model_spec import LayerKind
from pagesim.simulator.kv.block_budget import kv_capacity
from pagesim.simulator.scenario.table import Table

MAX_BANDWIDTH_GB_S = 1e6
MAX_LATENCY_S = 60.0


def read_role(p: Table) -> PoolRole:
    role: PoolRole = p.choice("role", PoolRole, PoolRole.BOTH)
    return role


def read_link(t: Table, pools: list[PoolConfig]) -> LinkConfig | None:
    is_disaggregated = any(pool.role is not PoolRole.BOTH for pool in pools)
    if not t.data:
        if is_disaggregated:
            t.ctx.fail(
                t.key,
                "required with prefill/decode pools: a [cluster.link] table with preset "
                f"({choices_text(LINK_PRESETS)}) or bandwidth_gb_s",
            )
        return None
    if not is_disaggregated:
        t.ctx.fail(t.key, 'a link needs prefill and decode pools (role = "prefill" / "decode")')
    if t.has("bandwidth_gb_s") and t.data["bandwidth_gb_s"] == 0:
        t.fail(
            "bandwidth_gb_s",
            "a link with zero bandwidth never delivers a byte; give GB/s per GPU port > 0 "
            f"or a preset ({choices_text(LINK_PRESETS)})",
        )
    latency = t.number("latency_s", None, hi=MAX_LATENCY_S)
    layerwise = t.flag("layerwise", False)
    if t.has("preset"):
        if t.has("bandwidth_gb_s"):
            t.fail("bandwidth_gb_s", "give either preset or bandwidth_gb_s, not both")
        try:
            return link_preset(t.text("preset"), latency_s=latency, layerwise=layerwise)
        except InputError as exc:
            t.fail("preset", str(exc))
    if not t.has("bandwidth_gb_s"):
        t.fail("preset", f"give a preset ({choices_text(LINK_PRESETS)}) or bandwidth_gb_s")
    bandwidth = t.number("bandwidth_gb_s", hi=MAX_BANDWIDTH_GB_S, lo_open=True)
    return LinkConfig(bandwidth * GB, latency or 0.0, layerwise)


def check_roles(t: Table, pools: list[PoolConfig]) -> None:
    roles = {pool.role for pool in pools}
    if roles == {PoolRole.BOTH}:
        return
    names = ", ".join(f"{p.name} ({p.role.value})" for p in pools)
    if PoolRole.BOTH in roles:
        t.fail(
            "pools",
            f'mixes colocated and disaggregated pools ({names}); set role = "prefill" or '
            '"decode" on every pool, or "both" on every pool',
        )
    for role in (PoolRole.PREFILL, PoolRole.DECODE):
        if role not in roles:
            t.fail("pools", f"a disaggregated fleet needs a {role.value} pool; got {names}")


def read_colocated(t: Table, system_names: list[str], pools: list[PoolConfig]) -> tuple[str, ...]:
    if not t.has("colocated_systems"):
        return ()
    names = t.data["colocated_systems"]
    valid = choices_text(system_names)
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        t.fail("colocated_systems", f"expected a list of [[systems]] names ({valid})")
    for name in names:
        if name not in system_names:
            t.fail("colocated_systems", f"no [[systems]] named {name!r}; valid: {valid}")
    if all(pool.role is PoolRole.BOTH for pool in pools):
        t.fail("colocated_systems", "only meaningful with prefill/decode pools")
    return tuple(names)


def _drafter_text(system: SystemConfig) -> str:
    key = model_draft_key(system.speculative)
    if key is None:
        return "no model draft"
    method, model = key
    return f"speculative method {method}" + (f" (draft_model {model!r})" if model else "")


def _pool_systems(
    pools: tuple[PoolConfig, ...], system: SystemConfig, by_name: dict[str, SystemConfig]
) -> list[tuple[PoolConfig, SystemConfig]]:
    """Each pool with the system it runs when `system` runs disaggregated: its own, or the one
    the pool names."""
    return [(p, by_name[p.system] if p.system is not None else system) for p in pools]


def _check_drafters_agree(
    t: Table, pools: tuple[PoolConfig, ...], system: SystemConfig, by_name: dict[str, SystemConfig]
) -> None:
    """Every pool that runs `system` disaggregated (its own, or the system a pool names) has the
    same model draft, or none: the draft's KV of the prompt is computed on the prefill replica
    and travels with the target's (cluster/link.py). vLLM's NIXL connector refuses the
    handshake between a prefill and a decode instance whose model-based speculative setups
    differ (vllm-project/vllm PR #49230, 2026-07: eagle, eagle3, mtp and draft models add a KV
    cache group; n-gram ones do not)."""
    (other_pool, other), *rest = _pool_systems(pools, system, by_name)
    for pool, runs in rest:
        if model_draft_key(runs.speculative) != model_draft_key(other.speculative):
            t.fail(
                "pools",
                f"pool {pool.name!r} runs system {runs.name!r} with {_drafter_text(runs)} but "
                f"pool {other_pool.name!r} runs {other.name!r} with {_drafter_text(other)}; the "
                "prefill and decode replicas of a disaggregated fleet must agree on a model "
                "draft (its KV travels with the prompt's, and vLLM's connector refuses the "
                "pair otherwise): give every pool systems with the same "
                "[systems.speculative] method and draft_model",
            )


def _check_hybrid_manager_off(
    t: Table,
    pools: tuple[PoolConfig, ...],
    system: SystemConfig,
    by_name: dict[str, SystemConfig],
    model: str,
) -> None:
    """A model with sliding-window layers runs disaggregated with the hybrid KV-cache manager
    off: every layer keeps, and the transfer sends, KV for every prompt token, as vLLM does
    with it off. Before PR #41847 (mid-2026) vLLM turned it off for any KV connector unless
    asked (vllm/config/vllm.py: "turn HMA off for connector unless specifically enabled");
    since then NIXL keeps it on and sends a window layer's blocks within the window only, a
    layout pagesim's transfers do not model yet."""
    for pool, runs in _pool_systems(pools, system, by_name):
        if runs.hybrid_kv_cache_manager:
            t.fail(
                "pools",
                f"pool {pool.name!r} runs system {runs.name!r} on model {model!r}, which has "
                "sliding-window layers, with the hybrid KV-cache manager on; pagesim's "
                "disaggregated fleets move every layer's KV of the whole prompt, as vLLM does "
                "with it off: set hybrid_kv_cache_manager = false on that system (vLLM's "
                '--disable-hybrid-kv-cache-manager) or run it colocated (role = "both")',
            )


def check_disaggregated(t: Table, scenario: Scenario) -> None:
    """What a disaggregated fleet cannot run (cluster/disagg_checks.py, the run's own reasons),
    for every system that runs it disaggregated: the workload; the model's layers, drafts and
    preemption; each decode pool's KV cache must hold one request of the model's maximum
    length (a pool without `system` runs each of them)."""
    cluster = scenario.cluster
    if cluster is None or not cluster.is_disaggregated:
        return
    max_len = scenario.model.max_seq_len
    by_name = {s.name: s for s in scenario.systems}
    runs = [s for s in scenario.systems if s.name not in cluster.colocated_systems]
    if not runs:
        return
    refusal = workload_refusal(scenario.workload)
    if refusal is not None:
        t.ctx.fail(f"workload.{refusal[0]}", refusal[1])
    kinds = set(scenario.model.kinds())
    if LayerKind.STATE in kinds or LayerKind.FULL not in kinds:
        # Neither is ever one block table of every layer (a model of one kind keeps its layout
        # with the hybrid manager off: kv/block_budget.py flattens).
        what = "state (linear-attention)" if LayerKind.STATE in kinds else "only sliding-window"
        t.fail(
            "pools",
            f"model {scenario.model.name!r} has {what} layers; pagesim's disaggregated fleets "
            "move one block table per sequence, every layer's KV of the whole prompt: run it "
            'colocated (role = "both")',
        )
    for system in runs:
        _check_drafters_agree(t, cluster.pools, system, by_name)
        if LayerKind.SLIDING in kinds:
            _check_hybrid_manager_off(t, cluster.pools, system, by_name, scenario.model.name)
        resolved = resolve_system(
            system, scenario.model, scenario.gpu, scenario.tensor_parallel
        ).system
        if knobs_of(resolved).preemption is PreemptionPolicy.SWAP:
            # A swapped-out request waits for blocks that landed prompts hold (they are admitted
            # only when nothing is swapped): a decode replica could stall for good. vLLM V1,
            # whose connector this models, preempts by recompute only.
            t.fail(
                "pools",
                f"system {system.name!r} preempts by swapping; pagesim's disaggregated fleets "
                'preempt by recompute only (as vLLM V1 does): set preemption = "recompute" or '
                'run it colocated (role = "both")',
            )
    for table, pool in zip(t.tables("pools"), cluster.pools, strict=True):
        if pool.role is not PoolRole.DECODE:
            continue
        pool_scenario = replace(scenario, gpu=pool.gpu, tensor_parallel=pool.tensor_parallel)
        for system in [by_name[pool.system]] if pool.system is not None else runs:
            # (no KV memory at all was refused per pool before: scenario/deployments.py)
            capacity = kv_capacity(pool_scenario, system)
            reason = decode_memory_reason(capacity, system, max_len)
            if reason is not None:
                table.fail("role", f"decode pool {pool.name!r} {reason}")

"""Reading a scenario's [defaults] and [[systems]] into `SystemConfig`s, and rejecting a system
whose knobs cannot work together, or with the scenario's workload, model and GPU.

A [[systems]] key that is not set takes its [defaults] value; a message about a defaulted key
names where it was set (`defaults.block_size`, not `systems[1].block_size`).
"""

from __future__ import annotations

from pagesim.simulator.catalog import GIB
from pagesim.simulator.config import Policy, PreemptionPolicy, Scenario, SystemConfig
from pagesim.simulator.errors import choices_text
from pagesim.simulator.scenario_schema import SYSTEM_READERS
from pagesim.simulator.scenario_table import Ctx, Table

_PAGED = (Policy.VLLM_V0, Policy.VLLM_V1)


def read_systems(top: Table, scenario: Scenario) -> tuple[SystemConfig, ...]:
    defaults_t = top.table("defaults")
    defaults = {k: (SYSTEM_READERS[k](defaults_t, k), defaults_t.path(k)) for k in defaults_t.data}
    tables = top.tables("systems")
    if not tables:
        top.fail("systems", "required: at least one [[systems]] table (name, policy, knobs)")
    systems: list[SystemConfig] = []
    seen: dict[str, str] = {}
    for t in tables:
        name = t.text("name")
        if name in seen:
            t.fail(
                "name", f"duplicate system name {name!r} (also {seen[name]}); names must be unique"
            )
        seen[name] = t.path("name")
        fields = dict(defaults)
        fields.update({k: (SYSTEM_READERS[k](t, k), t.path(k)) for k in t.data if k != "name"})
        if "policy" not in fields:
            valid = choices_text(p.value for p in Policy)
            t.fail("policy", f"required key is missing (here or in [defaults]); valid: {valid}")
        system = SystemConfig(name=name, **{k: v for k, (v, _) in fields.items()})
        _check_system(top.ctx, system, {k: p for k, (_, p) in fields.items()}, t.key, scenario)
        systems.append(system)
    return tuple(systems)


def _check_system(
    ctx: Ctx, s: SystemConfig, where: dict[str, str], key: str, scenario: Scenario
) -> None:
    """Combinations of knobs (with the workload, model and GPU) that cannot work."""

    def at(field: str) -> str:
        return where.get(field, f"{key}.{field}")

    if s.enable_prefix_cache and s.policy not in _PAGED:
        ctx.fail(
            at("enable_prefix_cache"),
            f"prefix caching needs a paged policy (vllm-v0, vllm-v1); the policy is "
            f"{s.policy.value!r}",
        )
    if s.policy is Policy.STATIC and s.static_batch_size > s.max_num_seqs:
        ctx.fail(
            at("static_batch_size"),
            f"{s.static_batch_size} exceeds max_num_seqs {s.max_num_seqs}",
        )
    workload = scenario.workload
    if workload.num_seqs > s.max_num_seqs:
        ctx.fail(
            at("max_num_seqs"),
            f"{s.max_num_seqs} is below workload.num_seqs {workload.num_seqs}: "
            "no request could ever run",
        )
    swaps = s.preemption is PreemptionPolicy.SWAP or (
        s.preemption is PreemptionPolicy.AUTO and workload.num_seqs > 1
    )
    if swaps and s.swap_space_gib == 0:
        ctx.fail(at("swap_space_gib"), f"must be > 0: preemption {s.preemption.value!r} swaps")
    if s.num_kv_blocks is None:  # the capacity rule of engine.kv_capacity, checked at the edge
        gpu, model, tp = scenario.gpu, scenario.model, scenario.tensor_parallel
        budget = gpu.memory_bytes * s.gpu_memory_utilization
        weights = model.weight_bytes(2, tp)
        available = budget - weights - s.activation_reserve_gib * GIB
        block_bytes = model.kv_bytes_per_token(scenario.kv_dtype, tp) * s.block_size
        if available < block_bytes:
            ctx.fail(
                at("gpu_memory_utilization"),
                f"no memory left for the KV cache: {model.name} weights take "
                f"{weights / GIB:.1f} GiB per GPU and {gpu.name} x {s.gpu_memory_utilization:g} "
                f"less {s.activation_reserve_gib:g} GiB of activations is {budget / GIB:.1f} GiB; "
                "use a bigger GPU, more tensor_parallel, or set num_kv_blocks",
            )

"""Reading a scenario's [defaults] and [[systems]] into `SystemConfig`s, and rejecting a system
whose knobs cannot work together, or with the scenario's workload, model and GPU.

A [[systems]] key that is not set takes its [defaults] value; a message about a defaulted key
names where it was set (`defaults.block_size`, not `systems[1].block_size`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from pagesim.simulator.core.catalog import GIB
from pagesim.simulator.core.config import (
    AdmissionOrder,
    ContiguousAllocator,
    DefaultsMode,
    ExecutionKind,
    Policy,
    PreemptionPolicy,
    Reservation,
    Scenario,
    SystemConfig,
    VictimPolicy,
)
from pagesim.simulator.core.defaults import (
    beam_search_reason,
    knobs_of,
    resolve_system,
    sample_lengths_reason,
    v0_token_cap_reason,
)
from pagesim.simulator.core.draft import draft_refusal
from pagesim.simulator.core.errors import choices_text
from pagesim.simulator.core.limits import MAX_KV_BLOCKS
from pagesim.simulator.kv.block_budget import hybrid_off_reason, kv_capacity, no_kv_memory_reason
from pagesim.simulator.policies.factory import hybrid_refusal
from pagesim.simulator.policies.offload import offload_refusal
from pagesim.simulator.scenario.engine_version import read_vllm_version
from pagesim.simulator.scenario.offload import read_kv_offload
from pagesim.simulator.scenario.pipeline import pipeline_refusal, read_layer_partition
from pagesim.simulator.scenario.schema import KNOB_READERS, PAGED_POLICIES, SYSTEM_KEYS
from pagesim.simulator.scenario.speculative import read_speculative
from pagesim.simulator.scenario.system_overrides import (
    heads_refusal,
    read_kv_dtype,
    read_tensor_parallel,
    read_weight_dtype,
)
from pagesim.simulator.scenario.table import Ctx, Table

# How to read each [[systems]] key (schema.SYSTEM_KEYS, in that order).
SYSTEM_READERS: dict[str, Callable[[Table, str], Any]] = {
    "policy": lambda t, k: t.choice(k, Policy),
    "block_size": lambda t, k: t.integer(k, hi=1 << 20),
    "max_num_seqs": lambda t, k: t.integer(k, hi=1 << 20),
    "max_num_batched_tokens": lambda t, k: t.integer(k),
    "max_prefill_chunk": lambda t, k: t.integer(k),
    "reservation": lambda t, k: t.choice(k, Reservation),
    "contiguous_allocator": lambda t, k: t.choice(k, ContiguousAllocator),
    "preemption": lambda t, k: t.choice(k, PreemptionPolicy),
    "victim": lambda t, k: t.choice(k, VictimPolicy),
    "admission": lambda t, k: t.choice(k, AdmissionOrder),
    "enable_prefix_cache": lambda t, k: t.flag(k),
    "watermark": lambda t, k: t.fraction(k, hi_open=True),
    "gpu_memory_utilization": lambda t, k: t.fraction(k, lo_open=True),
    "activation_reserve_gib": lambda t, k: t.number(k, hi=1e5),
    "swap_space_gib": lambda t, k: t.number(k, hi=1e5),
    "static_batch_size": lambda t, k: t.integer(k, hi=1 << 20),
    "static_batch_timeout_s": lambda t, k: t.number(k, hi=1e9),
    "num_kv_blocks": lambda t, k: t.integer(k, hi=MAX_KV_BLOCKS),
    "execution": lambda t, k: t.choice(k, ExecutionKind),
    "defaults": lambda t, k: t.choice(k, DefaultsMode),
    "speculative": read_speculative,
    "hybrid_kv_cache_manager": lambda t, k: t.flag(k),
    "vllm_version": read_vllm_version,
    "scheduler_reserve_full_isl": lambda t, k: t.flag(k),
    "kv_offload": read_kv_offload,
    "pipeline_parallel": lambda t, k: t.integer(k, hi=1 << 16),
    "pipeline_layer_partition": read_layer_partition,
    "tensor_parallel": read_tensor_parallel,  # scenario/system_overrides.py
    "weight_dtype": read_weight_dtype,
    "kv_dtype": read_kv_dtype,
}
assert tuple(SYSTEM_READERS) == SYSTEM_KEYS


# Where a system's keys were set: its [[systems]] table's key, and each field's dotted path
# (`defaults.block_size` for one it took from [defaults]).
SystemPlace = tuple[str, dict[str, str]]


def read_systems(
    top: Table, scenario: Scenario
) -> tuple[tuple[SystemConfig, ...], dict[str, SystemPlace]]:
    """The [[systems]], each checked on its own (knobs its policy does not read); the checks
    that need a GPU run per replica kind (`check_system`, from scenario/deployments.py)."""
    defaults_t = top.table("defaults")
    defaults = {k: (SYSTEM_READERS[k](defaults_t, k), defaults_t.path(k)) for k in defaults_t.data}
    tables = top.tables("systems")
    if not tables:
        top.fail("systems", "required: at least one [[systems]] table (name, policy, knobs)")
    systems: list[SystemConfig] = []
    places: dict[str, SystemPlace] = {}
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
        where = {k: p for k, (_, p) in fields.items()}
        _check_read(top.ctx, system, where, t.key)
        unsplit = (
            None
            if system.tensor_parallel is None
            else heads_refusal(scenario, system.tensor_parallel)
        )
        if unsplit is not None:
            top.ctx.fail(where["tensor_parallel"], unsplit)
        systems.append(system)
        places[name] = (t.key, where)
    for knob in defaults_t.data:
        policies, who = KNOB_READERS.get(knob, (tuple(Policy), ""))
        if not any(s.policy in policies for s in systems):
            used = choices_text(dict.fromkeys(s.policy.value for s in systems))
            defaults_t.fail(knob, f"no system reads it: only used by {who}; the systems are {used}")
    return tuple(systems), places


def _check_read(ctx: Ctx, s: SystemConfig, where: dict[str, str], key: str) -> None:
    """A knob set on the system's own table that its policy does not read (KNOB_READERS)."""
    for knob, (policies, who) in KNOB_READERS.items():
        own = f"{key}.{knob}"
        if where.get(knob) == own and s.policy not in policies:
            ctx.fail(own, f"only used by {who}; the policy is {s.policy.value!r}")


def check_system(
    ctx: Ctx, s: SystemConfig, place: SystemPlace, scenario: Scenario, on: str
) -> None:
    """Combinations of knobs (with the workload, model and GPU) that cannot work, for replicas
    on `scenario`'s GPU and degree; `on` ends each message (which replicas, when not [gpu]'s)."""
    key, where = place

    def at(field: str) -> str:
        return where.get(field, f"{key}.{field}")

    def fail(field: str, problem: str) -> NoReturn:
        ctx.fail(field, problem + on)

    s = resolve_system(s, scenario.model, scenario.gpu, scenario.tensor_parallel).system
    knobs = knobs_of(s)
    refusal = v0_token_cap_reason(s, scenario.model.max_seq_len)
    if refusal is not None:
        fail(at("max_num_batched_tokens"), refusal)
    refusal = beam_search_reason(s, scenario.workload.sampling) or sample_lengths_reason(
        s, scenario.workload.sample_lengths
    )
    if refusal is not None:
        fail(at("policy"), refusal)

    if s.speculative is not None and s.policy is not Policy.VLLM_V1:
        fail(
            at("speculative"),
            f"speculative decoding is modelled for vllm-v1 only (vLLM's V1 scheduler and KV "
            f"manager: lookahead slots, draft tokens in the token budget); the policy is "
            f"{s.policy.value!r}",
        )
    if s.speculative is not None:
        unfit = draft_refusal(s.speculative, scenario.model)
        if unfit is not None:
            fail(f"{at('speculative')}.{unfit[0]}", unfit[1])
    if knobs.enable_prefix_cache and s.policy not in PAGED_POLICIES:
        fail(
            at("enable_prefix_cache"),
            f"prefix caching needs a paged policy (vllm-v0, vllm-v1); the policy is "
            f"{s.policy.value!r}",
        )
    if s.policy is Policy.STATIC and s.static_batch_size > knobs.max_num_seqs:
        fail(
            at("static_batch_size"),
            f"{s.static_batch_size} exceeds max_num_seqs {knobs.max_num_seqs}",
        )
    workload = scenario.workload
    if workload.num_seqs > knobs.max_num_seqs:
        fail(
            at("max_num_seqs"),
            f"{knobs.max_num_seqs} is below workload.num_seqs {workload.num_seqs}: "
            "no request could ever run",
        )
    swaps = knobs.preemption is PreemptionPolicy.SWAP or (
        knobs.preemption is PreemptionPolicy.AUTO and workload.num_seqs > 1
    )
    if swaps and s.swap_space_gib == 0:
        fail(at("swap_space_gib"), f"must be > 0: preemption {knobs.preemption.value!r} swaps")
    reason = hybrid_off_reason(s, scenario.model)
    if reason is not None:
        fail(at("hybrid_kv_cache_manager"), reason)
    staged = pipeline_refusal(s, scenario)  # before the capacity, which splits the stages
    if staged is not None:
        fail(at(staged[0]), staged[1])
    reason = no_kv_memory_reason(scenario, s)
    if reason is not None:
        fail(at("gpu_memory_utilization"), reason)
    capacity = kv_capacity(scenario, s)
    hybrid = hybrid_refusal(s, capacity.layout)
    if hybrid is not None:
        fail(at(hybrid[0]), hybrid[1])
    unfit = offload_refusal(s, capacity, scenario.tensor_parallel)
    if unfit is not None:
        fail(f"{at('kv_offload')}.{unfit[0]}", unfit[1])
    if swaps and capacity.num_cpu_blocks == 0:
        # Every swap would silently turn into a recompute.
        need_gib = capacity.block_bytes / GIB
        fail(
            at("swap_space_gib"),
            f"{s.swap_space_gib:g} GiB holds no KV block of {capacity.block_size} tokens "
            f"({capacity.block_bytes:,} bytes), and preemption {knobs.preemption.value!r} swaps; "
            f"give at least {need_gib:.3g} GiB",
        )
    for pool, num_blocks, field in (
        ("GPU", capacity.num_gpu_blocks, "block_size"),
        ("CPU swap", capacity.num_cpu_blocks, "swap_space_gib"),
    ):
        if num_blocks > MAX_KV_BLOCKS:
            # Each block costs the simulator about 80 bytes of host memory: 10^8 blocks would
            # take gigabytes and minutes before the first step.
            fail(
                at(field),
                f"the {pool} pool would hold {num_blocks:,} KV blocks (block_size "
                f"{s.block_size}), more than the simulator's limit of {MAX_KV_BLOCKS:,}; use a "
                "larger block_size or less memory",
            )

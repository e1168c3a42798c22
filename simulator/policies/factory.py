"""One place that turns a system's policy Enum into its scheduler.

The same idea in the execution layer: simulator/execution/factory.py builds the execution
model.
"""

from __future__ import annotations

from pagesim.simulator.core.config import Policy, PreemptionPolicy, SystemConfig
from pagesim.simulator.core.defaults import knobs_of
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.scheduler import Scheduler
from pagesim.simulator.kv.block_budget import Capacity
from pagesim.simulator.kv.hybrid_layout import HybridLayout
from pagesim.simulator.policies.paged import PagedScheduler
from pagesim.simulator.policies.reserving import OrcaScheduler, StaticScheduler
from pagesim.simulator.policies.vllm_v0 import VllmV0
from pagesim.simulator.policies.vllm_v1 import VllmV1


def hybrid_refusal(system: SystemConfig, layout: HybridLayout | None) -> tuple[str, str] | None:
    """(the system's field at fault, why) `system` cannot serve a hybrid model (sliding-window
    or state layers), or None.

    Only vLLM V1 has a hybrid KV-cache manager (v1/core/kv_cache_coordinator.py). V0 allocated
    every layer for every token (core/block_manager.py knows one block table per sequence) and
    left the window to the attention kernel; the contiguous policies reserve per request. pagesim
    does not model those for hybrid models rather than model them wrong. (vLLM V1 with its
    hybrid manager off, `hybrid_kv_cache_manager = false`, gets no layout: one block table.)"""
    if layout is None:
        return None
    if system.policy is not Policy.VLLM_V1:
        return "policy", (
            f"policy {system.policy.value!r} cannot serve a model with sliding-window or state "
            "layers: only vllm_v1 has the hybrid KV-cache manager (vLLM V1's per-group block "
            "tables); use policy 'vllm_v1'"
        )
    if knobs_of(system).preemption is PreemptionPolicy.SWAP:
        return "preemption", (
            "preemption 'swap' with a model with sliding-window or state layers: vLLM V1 "
            "preempts by recompute only, and pagesim's swap extension keeps one block table per "
            "sequence; use preemption 'recompute'"
        )
    if system.speculative is not None:
        return "speculative", (
            "speculative decoding with a model with sliding-window or state layers: pagesim's "
            "lookahead slots are laid out for one block table per sequence, not per layer "
            "group; remove [systems.speculative], use a model with full attention only, or "
            "(sliding-window layers, no state layers) set hybrid_kv_cache_manager = false"
        )
    return None


def make_scheduler(
    system: SystemConfig, max_seq_len: int, capacity: Capacity, seed: int = 0, replica: int = 0
) -> Scheduler:
    """`seed`: the scenario's, for the policy's own draws (speculative acceptance); `replica`:
    the fleet replica it schedules for, whose draws are its own."""
    refusal = hybrid_refusal(system, capacity.layout)
    if refusal is not None:
        raise InputError(f"system {system.name!r}: {refusal[1]}")
    policy = system.policy
    if policy is Policy.STATIC:
        return StaticScheduler(system, max_seq_len, capacity.num_token_slots)
    if policy is Policy.ORCA:
        return OrcaScheduler(system, max_seq_len, capacity.num_token_slots)
    step = VllmV0() if policy is Policy.VLLM_V0 else VllmV1()
    return PagedScheduler(
        system,
        max_seq_len,
        capacity.num_gpu_blocks,
        capacity.num_cpu_blocks,
        step,
        capacity.layout,
        seed,
        replica,
    )

"""One place that turns a system's policy Enum into its scheduler."""

from __future__ import annotations

from pagesim.simulator.core.config import Policy, SystemConfig
from pagesim.simulator.core.scheduler import Scheduler
from pagesim.simulator.kv.capacity import Capacity
from pagesim.simulator.policies.paged import PagedScheduler
from pagesim.simulator.policies.reserving import OrcaScheduler, StaticScheduler
from pagesim.simulator.policies.vllm_v0 import VllmV0
from pagesim.simulator.policies.vllm_v1 import VllmV1


def make_scheduler(
    system: SystemConfig, max_seq_len: int, capacity: Capacity, seed: int = 0
) -> Scheduler:
    """`seed`: the scenario's, for the policy's own draws (speculative acceptance)."""
    policy = system.policy
    if policy is Policy.STATIC:
        return StaticScheduler(system, max_seq_len, capacity.num_token_slots)
    if policy is Policy.ORCA:
        return OrcaScheduler(system, max_seq_len, capacity.num_token_slots)
    step = VllmV0() if policy is Policy.VLLM_V0 else VllmV1()
    return PagedScheduler(
        system, max_seq_len, capacity.num_gpu_blocks, capacity.num_cpu_blocks, step, seed
    )

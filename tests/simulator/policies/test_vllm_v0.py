"""vLLM V0 as V0 was (vLLM 0.5-0.6, `vllm/core/`; FACTS.md), step by step with exact block ids.
Block size 4 throughout."""

from __future__ import annotations

from sim_helpers import explicit_workload, paged_scheduler, request, scenario, system

from pagesim.simulator.core.config import Policy
from pagesim.simulator.core.plan import StepPlan
from pagesim.simulator.core.request import SamplingKind
from pagesim.simulator.engine import simulate
from pagesim.simulator.policies.paged import PagedScheduler


def _step(sched: PagedScheduler, now_s: float) -> StepPlan:
    plan = sched.schedule(now_s)
    sched.complete(plan, now_s + 0.01)
    sched.check_invariants()
    return plan


def test_decoding_keeps_one_free_block_per_sequence() -> None:
    """core/scheduler.py _schedule_running with core/block_manager_v1.py can_append_slots: a
    group decodes only while one block per sequence is free, whether or not its token needs
    one; else the tail of the running queue is preempted. V1 asks only for the blocks needed."""
    preempted = {}
    for policy in (Policy.VLLM_V0, Policy.VLLM_V1):
        sched = paged_scheduler(policy, num_blocks=6)
        for rid in range(3):
            sched.add_request(request(rid, 6, 3), 0.0)  # 2 blocks each, 2 slots left in the 2nd
        first = _step(sched, 0.0)
        assert [item.request_id for item in first.work] == [0, 1, 2]
        assert sched.kv.num_free_blocks == 0
        second = _step(sched, 0.1)  # every decode token fits its last block
        preempted[policy] = [p.request_id for p in second.preemptions]
    assert preempted[Policy.VLLM_V0] == [2]
    assert preempted[Policy.VLLM_V1] == []


def test_admission_with_prefix_caching_counts_every_prompt_block() -> None:
    """core/block_manager_v1.py can_allocate counts all of a prompt's blocks, cached ones
    included, against the free blocks; V1 counts only the blocks it must allocate."""
    waiting = {}
    for policy in (Policy.VLLM_V0, Policy.VLLM_V1):
        sched = paged_scheduler(policy, num_blocks=5, enable_prefix_cache=True)
        sched.add_request(request(0, 8, 10, prefix_len=8), 0.0)
        _step(sched, 0.0)  # blocks 0, 1 (the shared prefix)
        _step(sched, 0.1)  # its first decode token: block 2
        assert sched.kv.num_free_blocks == 2
        # 3 prompt blocks: 2 cached (held by request 0), 1 to allocate.
        sched.add_request(request(1, 12, 2, prefix_len=8), 0.2)
        plan = _step(sched, 0.2)
        waiting[policy] = 1 not in {item.request_id for item in plan.work}
    assert waiting[Policy.VLLM_V0] is True
    assert waiting[Policy.VLLM_V1] is False


def test_a_group_that_cannot_decode_its_last_tokens_is_rejected_up_front() -> None:
    """Under V0's decode rule a request filling the cache exactly could never decode its last
    tokens there (it would stall): it is rejected with a reason when it arrives."""
    s = scenario(
        explicit_workload([(129, 9, 0.0)], sampling=SamplingKind.PARALLEL, num_seqs=4),
        system(Policy.VLLM_V0, num_kv_blocks=12, block_size=16),
    )
    requests = simulate(s, check_invariants=True).requests
    assert list(requests["status"]) == ["rejected"]
    assert "KV blocks" in requests["rejection_reason"].iloc[0]

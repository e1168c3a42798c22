"""A prompt's KV handed from a prefill scheduler to a decode scheduler, block by block."""

from __future__ import annotations

from pagesim.simulator.core.config import Policy
from pagesim.simulator.core.request import RequestStatus
from pagesim.simulator.policies.remote_kv import (
    can_receive,
    land_remote,
    release_held,
    reserve_remote,
)
from pagesim.simulator.policies.seq_group import StepBuilder
from tests.sim_helpers import paged_scheduler, request, step_and_check, work_of


def test_a_prefill_replica_holds_a_finished_prompts_blocks_until_released() -> None:
    # Block size 4: a 10-token prompt fills 3 blocks. As a request of one output token it
    # finishes with its prefill step; its blocks stay held (vLLM's delay_free_blocks).
    sched = paged_scheduler(Policy.VLLM_V1, 8, enable_prefix_cache=False)
    sched.state.keeps_finished_blocks = True
    sched.add_request(request(0, 10, 1), 0.0)
    plan = step_and_check(sched, 0.0)
    assert work_of(plan) == [(0, 0, 10, 10, True)]
    assert not sched.has_pending and sched.kv.num_used_blocks == 3
    assert sched.state.held == {0: 1}  # holder sequence 1 shares sequence 0's blocks
    assert sched.kv.num_tokens(1) == 10 and sched.memory_breakdown().reserved_slots == 0
    release_held(sched, 0)
    sched.check_invariants()
    assert sched.kv.num_used_blocks == 0 and sched.state.held == {}


def test_a_decode_replica_allocates_before_the_transfer_and_computes_the_last_token() -> None:
    sched = paged_scheduler(Policy.VLLM_V1, 5, enable_prefix_cache=False)
    first, second = request(0, 10, 3), request(1, 10, 3)
    assert reserve_remote(sched, first) == 10  # 3 blocks, all 10 tokens to receive
    assert sched.kv.num_used_blocks == 3 and sched.kv.num_computed_tokens(0) == 0
    assert sched.memory_breakdown().reserved_slots == 12  # slots 0..11, all still to fill
    assert reserve_remote(sched, second) is None  # 3 more blocks, 2 free: nothing changes
    assert sched.kv.num_used_blocks == 3 and sched.state.groups.keys() == {0}
    sched.check_invariants()
    assert step_and_check(sched, 0.0).is_empty  # still on the way: not schedulable
    land_remote(sched, 0)
    assert sched.kv.num_computed_tokens(0) == 9 and first.status is RequestStatus.WAITING
    plan = step_and_check(sched, 1.0)
    assert work_of(plan) == [(0, 0, 1, 10, True)]  # the last prompt token, no new block
    assert first.num_generated == 1 and first.first_token_s == 1.01
    assert sched.kv.num_used_blocks == 3
    assert work_of(step_and_check(sched, 2.0)) == [(0, 0, 1, 11, False)]
    assert work_of(step_and_check(sched, 3.0)) == [(0, 0, 1, 12, False)]
    assert first.status is RequestStatus.FINISHED and sched.kv.num_used_blocks == 0


def test_a_local_prefix_hit_shortens_the_transfer() -> None:
    # Prefix caching (V1's default): a second prompt sharing 8 leading tokens (2 full blocks)
    # with one the decode replica computed receives only the other 4.
    sched = paged_scheduler(Policy.VLLM_V1, 16)
    sched.add_request(request(0, 12, 2, prefix_len=8), 0.0)
    step_and_check(sched, 0.0)
    assert reserve_remote(sched, request(1, 12, 2, prefix_len=8)) == 4
    sched.check_invariants()


def test_remote_prompts_wait_behind_a_preempted_request() -> None:
    sched = paged_scheduler(Policy.VLLM_V1, 8, enable_prefix_cache=False)
    assert can_receive(sched)
    preempted = request(0, 4, 2)
    sched.add_request(preempted, 0.0)
    step_and_check(sched, 0.0)
    group = sched.state.groups[0]
    sched.state.running.remove(group)  # as a step policy does before preempting a victim
    sched.state.preempt(group, StepBuilder(), 0.02)
    sched.check_invariants()
    assert preempted.status is RequestStatus.PREEMPTED and not can_receive(sched)
    step_and_check(sched, 0.03)  # it comes back first
    assert can_receive(sched)

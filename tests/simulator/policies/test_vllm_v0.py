"""vLLM V0 as V0 was (vLLM 0.5-0.6, `vllm/core/`; docs/facts.md), step by step with exact block ids.
Block size 4 throughout."""

from __future__ import annotations

import pytest
from sim_helpers import explicit_workload, paged_scheduler, request, scenario, system
from sim_helpers import step_and_check as _step
from sim_helpers import tables_of as _tables
from sim_helpers import work_of as _work

from pagesim.simulator.core.config import Policy
from pagesim.simulator.core.request import SamplingKind
from pagesim.simulator.engine import simulate


def test_decoding_keeps_one_free_block_per_sequence() -> None:
    """Row 14. vLLM v0.5.4 core/scheduler.py _schedule_running with core/block_manager_v1.py
    can_append_slots (`num_seqs <= num_free_gpu_blocks`): request 0 finds no free block though
    its 7th token fits its last block, so the tail of the running queue (request 2) is
    preempted (recompute: one sequence) and its blocks 5, 4 freed; V0 then runs prefill-only,
    so request 2 comes back alone. V1 decodes all three."""
    tables = {}
    works = {}
    for policy in (Policy.VLLM_V0, Policy.VLLM_V1):
        sched = paged_scheduler(policy, num_blocks=6)
        for rid in range(3):
            sched.add_request(request(rid, 6, 3), 0.0)
        plans = [_step(sched, 0.1 * i) for i in range(3)]
        works[policy] = (
            [_work(p) for p in plans],
            [[x.request_id for x in p.preemptions] for p in plans],
        )
        tables[policy] = _tables(sched, 0, 1, 2)
    first = [(0, 0, 6, 6, True), (1, 1, 6, 6, True), (2, 2, 6, 6, True)]
    assert works[Policy.VLLM_V0] == (
        [first, [(0, 0, 1, 7, False), (1, 1, 1, 7, False)], [(2, 2, 7, 7, True)]],
        [[], [2], []],
    )
    assert tables[Policy.VLLM_V0] == {0: (0, 1), 1: (2, 3), 2: (5, 4)}
    assert works[Policy.VLLM_V1] == (
        [first, [(r, r, 1, 7, False) for r in range(3)], [(r, r, 1, 8, False) for r in range(3)]],
        [[], [], []],
    )


def test_admission_with_prefix_caching_counts_every_prompt_block() -> None:
    """Row 14. vLLM v0.5.4 core/block_manager_v1.py can_allocate: num_required_blocks is every
    block of the prompt, cached or not, against the free blocks less the watermark; V1's
    allocate_slots (v0.11.0 v1/core/kv_cache_manager.py) asks only for the blocks it must
    allocate. Request 1's 12-token prompt: 2 blocks cached (held by request 0), 1 to allocate,
    2 free."""
    steps = {}
    for policy in (Policy.VLLM_V0, Policy.VLLM_V1):
        sched = paged_scheduler(policy, num_blocks=5, enable_prefix_cache=True)
        sched.add_request(request(0, 8, 10, prefix_len=8), 0.0)
        _step(sched, 0.0)  # blocks 0, 1 (the shared prefix)
        _step(sched, 0.1)  # its 9th token: block 2
        sched.add_request(request(1, 12, 2, prefix_len=8), 0.2)
        plans = [_step(sched, t) for t in (0.2, 0.3)]
        steps[policy] = [_work(p) for p in plans], _tables(sched, 0, 1)
    assert steps[Policy.VLLM_V0] == (
        [[(0, 0, 1, 10, False)], [(0, 0, 1, 11, False)]],  # 3 blocks asked, 2 free: waits
        {0: (0, 1, 2)},
    )
    assert steps[Policy.VLLM_V1] == (
        [[(0, 0, 1, 10, False), (1, 1, 4, 12, True)], [(0, 0, 1, 11, False), (1, 1, 1, 13, False)]],
        {0: (0, 1, 2)},  # request 1 ran in blocks (0, 1, 3) and finished
    )


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


@pytest.mark.xfail(
    strict=True,
    reason="pagesim's V0 gives a same-step duplicate prefix fresh blocks (3, 4, 5); vLLM V0's "
    "CachedBlockAllocator.allocate maps it onto the blocks already allocated under that hash",
)
def test_same_step_duplicates_share_physical_blocks_but_both_compute() -> None:
    """Row 5's V0 side. vLLM v0.5.4 core/block_manager_v1.py BlockSpaceManagerV1.
    _allocate_sequence -> CachedBlockAllocator.allocate(block_hash): a hash already in
    cached_blocks returns that block (ref_count + 1), whether or not it is computed; its tokens
    are skipped only once mark_blocks_as_computed has run (end of Scheduler.schedule, after the
    batch's computed_block_nums were taken). So two 9-token prompts sharing 8 tokens, admitted
    in one step, both compute 9 tokens but hold blocks (0, 1, 2) and (0, 1, 3): 4 blocks, not
    6."""
    v0 = paged_scheduler(Policy.VLLM_V0, num_blocks=16, enable_prefix_cache=True)
    for rid in (0, 1):
        v0.add_request(request(rid, 9, 4, prefix_len=8), 0.0)
    plan = _step(v0, 0.0)
    assert _work(plan) == [(0, 0, 9, 9, True), (1, 1, 9, 9, True)]
    assert _tables(v0, 0, 1) == {0: (0, 1, 2), 1: (0, 1, 3)}
    assert v0.kv.num_free_blocks == 12

"""vLLM V1 as V1 is, step by step with exact block ids (reference v0.11.0; docs/facts.md).

Each story cites the vLLM file and function it mirrors. Block size 4 throughout; a request's
`prefix_len` tokens are shared with every other request that has them.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from sim_helpers import paged_scheduler, poisson_workload, request, scenario, system
from sim_helpers import step_and_check as _step
from sim_helpers import tables_of as _tables
from sim_helpers import work_of as _work

from pagesim.simulator.core.config import AdmissionOrder, Policy
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.request import RequestStatus, SamplingKind
from pagesim.simulator.engine import simulate
from pagesim.simulator.kv.block_pool import EvictionOrder
from pagesim.simulator.kv.paged_cache import PagedKVCache
from pagesim.simulator.policies.paged_state import CHILD_ID_BASE
from pagesim.simulator.policies.vllm_v1 import _preempter


def test_a_prompt_block_is_cached_when_allocated_so_the_same_step_can_hit_it() -> None:
    """Row 5. vLLM v0.11.0 v1/core/kv_cache_manager.py allocate_slots -> coordinator
    cache_blocks: the blocks a step will fill are cached when allocated, so a request admitted
    later in the same step hits them. V0 (v0.5.4 core/block_manager_v1.py
    mark_blocks_as_computed, after the step) caches a block once computed: its second request
    misses."""
    v1 = paged_scheduler(Policy.VLLM_V1, num_blocks=16)
    for rid in (0, 1):
        v1.add_request(request(rid, 9, 4, prefix_len=8), 0.0)
    plan = _step(v1, 0.0)
    assert _work(plan) == [(0, 0, 9, 9, True), (1, 1, 1, 9, True)]
    assert v1.kv.block_table(0) == (0, 1, 2) and v1.kv.block_table(1) == (0, 1, 3)
    assert v1.prefix_hit_rate() == 8 / 18

    v0 = paged_scheduler(Policy.VLLM_V0, num_blocks=16, enable_prefix_cache=True)
    for rid in (0, 1):
        v0.add_request(request(rid, 9, 4, prefix_len=8), 0.0)
    plan = _step(v0, 0.0)
    assert _work(plan) == [(0, 0, 9, 9, True), (1, 1, 9, 9, True)]  # both compute 9 tokens
    # (Which blocks V0 maps request 1 to: test_vllm_v0.py, a known divergence.)
    assert v0.prefix_hit_rate() == 0.0


def test_a_recomputed_last_block_is_cached_again_as_a_duplicate() -> None:
    """The hit is capped so the last prompt token is computed: a prompt of 2 full cached blocks
    hits 1 and recomputes the second into a new block, which V1 caches under the same hash as
    a duplicate (v0.11.0 v1/core/block_pool.py cache_full_blocks, BlockHashToBlockMap); a
    lookup still finds the older copy. V0 leaves the copy uncached."""
    sched = paged_scheduler(Policy.VLLM_V1, num_blocks=16)
    sched.add_request(request(0, 8, 1, prefix_len=8), 0.0)
    _step(sched, 0.0)  # 8 tokens in blocks 0, 1; its only output token: finished, freed
    sched.add_request(request(1, 8, 4, prefix_len=8), 1.0)
    plan = _step(sched, 1.0)
    assert _work(plan) == [(1, 1, 4, 8, True)]  # block 0 hit, block 1's tokens recomputed
    table = sched.kv.block_table(1)
    assert table[0] == 0 and table[1] != 1
    assert sched.kv.block_hash(table[1]) == sched.kv.block_hash(1) is not None
    assert sched.kv.num_cached_blocks == 3  # 0, 1 and the duplicate


def test_one_lru_queue_of_free_blocks_cached_or_not() -> None:
    """v1/core/block_pool.py FreeKVCacheBlockQueue: every free block, cached or not, in one
    queue, least recently freed first; taking a cached block drops its hash. V0's evictor
    reuses plain blocks before cached ones."""
    hashes = [11, 12]
    taken = {}
    for order in EvictionOrder:
        kv = PagedKVCache(4, 4, enable_prefix_cache=True, eviction=order)
        kv.add_seq(0, final_len=8)
        kv.allocate_slots([0], 8)
        kv.commit(0, 8, hashes)  # blocks 0, 1 cached
        kv.add_seq(1, final_len=3)
        kv.allocate_slots([1], 3)  # block 2, partly filled: never cached
        kv.commit(1, 3)
        kv.free(0)  # blocks 1, 0 to the free side, tail first
        kv.free(1)  # then block 2
        kv.add_seq(2, final_len=8)
        kv.allocate_slots([2], 8)
        taken[order] = kv.block_table(2)
        kv.check_invariants()
    assert taken[EvictionOrder.LRU] == (3, 1)  # 3 never used, then the least recently freed
    assert taken[EvictionOrder.PLAIN_FIRST] == (3, 2)  # plain blocks first: 0 and 1 stay cached


def test_the_victim_under_priority_scheduling_is_the_least_urgent() -> None:
    """Row 10. vLLM v0.11.0 v1/core/sched/scheduler.py schedule(): when allocate_slots fails
    under SchedulingPolicy.PRIORITY the victim is max(self.running, key=lambda r: (r.priority,
    r.arrival_time)); under FCFS, self.running.pop()."""
    sched = paged_scheduler(Policy.VLLM_V1, num_blocks=6, admission=AdmissionOrder.PRIORITY)
    for rid, priority in ((0, 0), (1, 2), (2, 1)):  # arrivals 0.0, 0.1, 0.2
        sched.add_request(request(rid, 4, 10, priority=priority, arrival_s=rid / 10), 0.3)
    plans = [_step(sched, 0.3 + 0.01 * i) for i in range(7)]
    # Waiting requests are taken in (priority, arrival) order: 0, 2, 1.
    assert _work(plans[0]) == [(0, 0, 4, 4, True), (2, 2, 4, 4, True), (1, 1, 4, 4, True)]
    assert [_work(p) for p in plans[1:5]] == [
        [(0, 0, 1, c, False), (2, 2, 1, c, False), (1, 1, 1, c, False)] for c in (5, 6, 7, 8)
    ]
    # Step 5: every running request needs its 3rd block and none is free. Request 1 (priority 2)
    # goes, though request 2 arrived last; its blocks 5, 2 (tail first) serve 0 and 2.
    assert _work(plans[5]) == [(0, 0, 1, 9, False), (2, 2, 1, 9, False)]
    assert [p.request_id for p in plans[5].preemptions] == [1]
    assert _tables(sched, 0, 1, 2) == {0: (0, 3, 5), 2: (1, 4, 2)}
    assert _work(plans[6]) == [(0, 0, 1, 10, False), (2, 2, 1, 10, False)]  # none admitted


def test_the_hit_rate_counts_first_admissions_only() -> None:
    """Row 8, over a whole run (the exact story: test_vllm_rows.py test_row8_*). No two
    requests share a token: the hit rate is 0, though recompute-preempted requests find their
    own blocks again on re-admission, reported apart as vLLM's v1/metrics/stats.py
    PrefixCacheStats.record counts a request with num_preemptions > 0 apart."""
    s = scenario(
        poisson_workload(40, 50.0, prompt_mean=200, output_mean=200),
        system(Policy.VLLM_V1, num_kv_blocks=120, block_size=16),
    )
    result = simulate(s)
    assert result.summary["num_preemptions"] > 0
    assert result.summary["prefix_hit_rate"] == 0.0
    assert result.summary["prefix_readmit_hit_rate"] > 0.5


def test_no_watermark() -> None:
    """Row 4. vLLM v0.11.0 v1/core/kv_cache_manager.py allocate_slots fails only when the blocks
    to allocate exceed block_pool.get_num_free_blocks(): no watermark (v0.24.0 adds an optional
    one, default 0). V0's core/block_manager_v1.py can_allocate (v0.5.4) keeps watermark_blocks
    = int(0.01 x num_gpu_blocks) free: 1 of 100 here."""
    tables = {}
    for policy in (Policy.VLLM_V1, Policy.VLLM_V0):
        sched = paged_scheduler(policy, num_blocks=100)
        sched.add_request(request(0, 4, 50), 0.0)
        sched.add_request(request(1, 396, 2), 0.0)  # 99 blocks: everything left
        plan = _step(sched, 0.0)
        tables[policy] = (_work(plan), _tables(sched, 0, 1), sched.kv.num_free_blocks)
    assert tables[Policy.VLLM_V1] == (
        [(0, 0, 4, 4, True), (1, 1, 396, 396, True)],
        {0: (0,), 1: tuple(range(1, 100))},
        0,
    )
    assert tables[Policy.VLLM_V0] == ([(0, 0, 4, 4, True)], {0: (0,)}, 99)


def test_n_samples_fan_out_into_child_requests_sharing_the_prompt_through_the_cache() -> None:
    """Row 9. vLLM v0.11.0 v1/engine/parallel_sampling.py ParentRequest: n > 1 becomes n
    child requests. Each computes the prompt's uncached tail itself (no copy-on-write),
    counts toward max_num_seqs and is preempted on its own; the parent finishes with its last
    child."""
    sched = paged_scheduler(Policy.VLLM_V1, num_blocks=16)
    parent = replace(request(0, 9, 3), sampling=SamplingKind.PARALLEL, num_seqs=2)
    sched.add_request(parent, 0.0)
    plan = _step(sched, 0.0)
    first, second = (CHILD_ID_BASE + 1, CHILD_ID_BASE + 2)
    assert _work(plan) == [(first, 0, 9, 9, True), (second, 1, 1, 9, True)]
    assert sched.kv.block_table(0) == (0, 1, 2) and sched.kv.block_table(1) == (0, 1, 3)
    assert not plan.copies  # no copy-on-write: V1 has none
    assert sched.state.num_running_seqs == 2
    assert parent.status is RequestStatus.RUNNING and parent.first_token_s is None
    now = 0.1
    while not parent.is_done:
        _step(sched, now)
        now += 0.1
    assert parent.status is RequestStatus.FINISHED
    assert parent.first_token_s == 0.01 and parent.num_generated == 3
    assert not sched.has_pending


def test_beam_search_under_v1_is_refused_with_a_way_out() -> None:
    """Row 9. Beam search left vLLM's engine in v0.6.3 (from then on a front-end loop of
    one-token requests: vllm/entrypoints/llm.py LLM.beam_search); V1's engine has none."""
    s = scenario(
        poisson_workload(4, 1.0, sampling=SamplingKind.BEAM, num_seqs=2),
        system(Policy.VLLM_V1),
    )
    with pytest.raises(InputError, match=r'vllm-v1 has no beam search in its engine.*"vllm-v0"'):
        simulate(s)


def test_samples_of_their_own_lengths_end_on_their_own() -> None:
    """v1/engine/parallel_sampling.py: each child request stops on its own (its own EOS), frees
    its blocks then, and the parent finishes with the last. Samples of 2 and 5 tokens from a
    9-token prompt (blocks of 4): the short child leaves after its second token, the long one
    runs alone from then on."""
    sched = paged_scheduler(Policy.VLLM_V1, num_blocks=16)
    parent = replace(
        request(0, 9, 5), sampling=SamplingKind.PARALLEL, num_seqs=2, sample_output_lens=(2, 5)
    )
    sched.add_request(parent, 0.0)
    short, long = (CHILD_ID_BASE + 1, CHILD_ID_BASE + 2)
    assert _work(_step(sched, 0.0)) == [(short, 0, 9, 9, True), (long, 1, 1, 9, True)]
    assert _work(_step(sched, 0.1)) == [(short, 0, 1, 10, False), (long, 1, 1, 10, False)]
    # The short sample finished: its own last block (2) is free again (V1 keeps a freed block
    # in the pool, cached for reuse); the prompt's two stay with the long one.
    assert sched.state.num_running_seqs == 1 and sched.kv.block_table(1) == (0, 1, 3)
    assert sched.kv.num_free_blocks == 16 - 3
    now = 0.2
    while not parent.is_done:
        assert _work(_step(sched, now)) == [(long, 1, 1, 11 + round((now - 0.2) * 10), False)]
        now += 0.1
    assert parent.status is RequestStatus.FINISHED and parent.num_generated == 5
    assert parent.num_output_tokens == 7 and sched.num_output_tokens == 7


def test_the_decode_groups_preempter_picks_the_victim_the_state_would() -> None:
    """The grouped running phase's victim (vllm_v1._preempter, FCFS and last-arrived only)
    reads its key on the group; PagedState.preempt_for's key reads the request: the same
    choice, ties in arrival broken by id."""
    v1 = paged_scheduler(Policy.VLLM_V1, num_blocks=16)
    state = v1.state
    preempter = _preempter(state)
    assert preempter is not None
    arrivals = [(0, 0.5), (1, 2.0), (2, 2.0), (3, 1.0), (4, 0.0)]
    groups = [state.new_group(request(rid, 9, 4, arrival_s=at)) for rid, at in arrivals]
    for n in range(1, len(groups) + 1):
        for candidates in (groups[:n], groups[-n:]):
            expected = max(candidates, key=lambda g: state.victim_key(g.request))
            assert preempter.victim_of(candidates) is expected
    assert preempter.victim_of(groups).request.request_id == 2

"""vLLM V1's hybrid KV-cache manager, step by step with exact block ids (reference v0.11:
v1/core/kv_cache_coordinator.py, single_type_kv_cache_manager.py, kv_cache_utils.py; the
schedulers below are v0.11.0's, whose free queue appends every freed block, and where v0.34.0
differs, its own story follows: from v0.24.0 block_pool.py free_blocks puts unhashed freed
blocks at the head).

A tiny model with one full-attention layer and one sliding-window layer (one group each),
block size 4: every logical block of a request takes one block in each group.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hybrid_helpers import hybrid_scheduler, layout_of, tiny_hybrid
from sim_helpers import explicit_workload, poisson_workload, request, scenario, system
from sim_helpers import step_and_check as _step
from sim_helpers import work_of as _work

from pagesim.simulator.core.config import Policy, PreemptionPolicy, VllmVersion
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.model_spec import LayerKind
from pagesim.simulator.core.request import RequestStatus
from pagesim.simulator.engine import simulate
from pagesim.simulator.kv.block_pool import EvictionOrder
from pagesim.simulator.kv.hybrid_cache import HybridKVCache

FULL, SLIDING = LayerKind.FULL, LayerKind.SLIDING
V0_11 = VllmVersion.V0_11


def test_a_decoding_request_frees_its_window_blocks_as_it_advances() -> None:
    """SlidingWindowManager.remove_skipped_blocks before each allocation: with W = 5 and 4-token
    blocks, the blocks wholly before token num_computed - W + 1 go back to the pool."""
    layout = layout_of(tiny_hybrid((FULL, SLIDING), window=5))
    sched = hybrid_scheduler(layout, num_blocks=12, enable_prefix_cache=False, vllm_version=V0_11)
    sched.add_request(request(0, 9, 6), 0.0)
    # Step 1: the 9-token prompt takes cdiv(9, 4) = 3 blocks per group, the full group first.
    assert _work(_step(sched, 0.0)) == [(0, 0, 9, 9, True)]
    assert sched.kv.tables(0) == ([[0, 1, 2], [3, 4, 5]], [])
    # Step 2: 9 computed, last useful token 9 - 5 + 1 = 5 -> block 1: block 3 leaves.
    _step(sched, 0.1)
    assert sched.kv.tables(0) == ([[0, 1, 2], [None, 4, 5]], [])
    # Steps 3, 4: 10 and 11 computed: tokens 6 and 7 are still in block 1; no new block.
    _step(sched, 0.2)
    _step(sched, 0.3)
    assert sched.kv.tables(0) == ([[0, 1, 2], [None, 4, 5]], [])
    assert sched.kv.num_free_blocks == 12 - 5
    # Step 5: 12 computed, last useful token 8 -> block 2: block 4 leaves; token 13 needs a
    # fourth logical block: the pool's FIFO gives 6 to the full group, 7 to the window group.
    _step(sched, 0.4)
    assert sched.kv.tables(0) == ([[0, 1, 2, 6], [None, None, 5, 7]], [])
    assert sched.kv.num_window_freed_blocks == 2
    # Step 6: the sixth output token: finished, every group's blocks freed tail first.
    _step(sched, 0.5)
    assert sched.queue_lengths() == (0, 0, 0)
    assert sched.kv.num_free_blocks == 12
    # An all-full model would have held 2 x 4 = 8 blocks at the end, this one 6.


def test_from_v0_24_a_block_leaving_the_window_is_reused_first() -> None:
    """The same request under v0.34.0: remove_skipped_blocks frees through
    block_pool.py free_blocks, which (v0.24.0 on, prefix caching off: no block has a hash)
    puts the freed block at the head of the free queue. Step 5 frees block 4 before its
    allocation: the full group takes 4, the window group 3 (freed at step 2), not 6 and 7."""
    layout = layout_of(tiny_hybrid((FULL, SLIDING), window=5))
    sched = hybrid_scheduler(layout, num_blocks=12, enable_prefix_cache=False)
    assert sched.system.vllm_version is VllmVersion.V0_34  # the default
    sched.add_request(request(0, 9, 6), 0.0)
    _step(sched, 0.0)
    assert sched.kv.tables(0) == ([[0, 1, 2], [3, 4, 5]], [])
    _step(sched, 0.1)
    assert sched.kv.tables(0) == ([[0, 1, 2], [None, 4, 5]], [])
    for i in (2, 3, 4):
        _step(sched, i / 10)
    assert sched.kv.tables(0) == ([[0, 1, 2, 4], [None, None, 5, 3]], [])


def test_the_window_keeps_its_blocks_within_window_plus_one() -> None:
    """A long decode never holds more than cdiv(W - 1 + 1, B) + 1 blocks in a window group."""
    layout = layout_of(tiny_hybrid((FULL, SLIDING), window=6))
    sched = hybrid_scheduler(layout, num_blocks=40, enable_prefix_cache=False)
    sched.add_request(request(0, 5, 40), 0.0)
    for i in range(39):
        _step(sched, i * 0.1)
        held = sched.kv.num_sliding_blocks_held(0)
        assert held <= layout.max_sliding_blocks(1) == 3
        assert sched.kv.blocks_held(0) == -(-sched.kv.num_tokens(0) // 4) + held
    _step(sched, 4.0)
    assert sched.kv.num_free_blocks == 40


def _after_a_request_left(c_tokens: int) -> HybridKVCache:
    """W = 9 (a hit needs cdiv(8, 4) = 2 window blocks). Request 0 computes a 16-token prompt
    (hashes 11..14), decodes one token, leaves; then request 2 takes `c_tokens` tokens."""
    layout = layout_of(tiny_hybrid((FULL, SLIDING), window=9))
    kv = HybridKVCache(10, layout, enable_prefix_cache=True, eviction=EvictionOrder.LRU)
    hashes = [11, 12, 13, 14]
    kv.add_seq(0, hashes, 16, final_len=18)
    kv.allocate_slots([0], 16)
    kv.cache_blocks(0, 16, hashes)
    kv.commit(0, 16, hashes)
    assert kv.tables(0) == ([[0, 1, 2, 3], [4, 5, 6, 7]], [])
    kv.allocate_slots([0], 1)  # 16 computed: last useful token 8 -> block 2; 5 then 4 freed
    assert kv.tables(0) == ([[0, 1, 2, 3, 8], [None, None, 6, 7, 9]], [])
    kv.commit(0, 17)
    kv.free(0)  # LRU queue now: 5 4 | 8 3 2 1 0 | 9 7 6 (full group's tail first)
    kv.add_seq(2, (), 0, final_len=c_tokens)
    kv.allocate_slots([2], c_tokens)
    kv.check_invariants()
    return kv


def test_a_window_hit_needs_only_the_last_window_blocks() -> None:
    """SlidingWindowManager.find_longest_cache_hit: right to left, cdiv(W - 1, B) contiguous
    cached blocks make the hit; the blocks before them may be gone. Request 2 took blocks 5 and
    4 (the window blocks request 0 freed first); request 1 still hits all 16 tokens."""
    kv = _after_a_request_left(4)
    assert kv.tables(2) == ([[5], [4]], [])
    assert kv.add_seq(1, [11, 12, 13, 14], 17, final_len=18) == 16
    assert kv.tables(1) == ([[0, 1, 2, 3], [None, None, 6, 7]], [])
    kv.check_invariants()


def test_the_full_hit_is_cut_to_the_window_hit() -> None:
    """HybridKVCacheCoordinator.find_longest_cache_hit: the window groups search within the full
    groups' hit, and the full hit is truncated to theirs. Request 2's 8 tokens took 5, 4 (full)
    and 8, 3 (window): block 3 lost its hash, so the full hit is 0, 1, 2; within it the window
    group finds block 6 alone (5 and 4 are reused) and no leading run: no hit at all."""
    kv = _after_a_request_left(8)
    assert kv.tables(2) == ([[5, 4], [8, 3]], [])
    assert kv.add_seq(1, [11, 12, 13, 14], 17, final_len=18) == 0
    assert kv.num_prefix_hit_tokens == 0 and kv.num_prefix_query_tokens == 16 + 17
    kv.check_invariants()


def test_through_the_scheduler_a_second_prompt_hits_its_window() -> None:
    """Request 0 (17 tokens, 16 shared) runs and leaves; request 1 hits 16 tokens: blocks
    0..3 of the full group and only block 8 of the window group (W = 5 needs cdiv(4, 4) = 1)."""
    layout = layout_of(tiny_hybrid((FULL, SLIDING), window=5))
    sched = hybrid_scheduler(layout, num_blocks=16, vllm_version=V0_11)
    sched.add_request(request(0, 17, 1, prefix_len=16), 0.0)
    assert _work(_step(sched, 0.0)) == [(0, 0, 17, 17, True)]
    assert sched.queue_lengths() == (0, 0, 0)  # its one token: finished, blocks cached, free
    sched.add_request(request(1, 17, 2, prefix_len=16), 1.0)
    assert _work(_step(sched, 1.0)) == [(1, 1, 1, 17, True)]
    # LRU queue after request 0: 10..15, then 4 3 2 1 0 (full), 9 8 7 6 5 (window).
    assert sched.kv.tables(1) == ([[0, 1, 2, 3, 10], [None, None, None, 8, 11]], [])
    assert sched.prefix_hit_rate() == 16 / 34


def test_from_v0_24_a_finished_requests_unhashed_blocks_are_reused_first() -> None:
    """The same two requests under v0.34.0: request 0's coordinator frees group by group, each
    group one free_blocks call, tail first; its partly filled fifth blocks (4 full, 9 window)
    hold no hash and go to the head, the cached ones to the tail. Queue: 9 4 10..15 3 2 1 0
    8 7 6 5. Request 1 hits as before and its new blocks are 9 (full) and 4 (window)."""
    layout = layout_of(tiny_hybrid((FULL, SLIDING), window=5))
    sched = hybrid_scheduler(layout, num_blocks=16)
    sched.add_request(request(0, 17, 1, prefix_len=16), 0.0)
    _step(sched, 0.0)
    sched.add_request(request(1, 17, 2, prefix_len=16), 1.0)
    assert _work(_step(sched, 1.0)) == [(1, 1, 1, 17, True)]
    assert sched.kv.tables(1) == ([[0, 1, 2, 3, 9], [None, None, None, 8, 4]], [])
    assert sched.prefix_hit_rate() == 16 / 34


def test_state_layers_hold_one_block_per_group_for_the_whole_request() -> None:
    """MambaManager: one block per request per state group (its block size is the model's
    length). 1 full + 1 state layer: the state block comes with the first allocation."""
    from pagesim.simulator.core.model_spec import StateSpec

    model = tiny_hybrid((FULL, LayerKind.STATE), state=StateSpec(1, 1, 8, 8, 2))
    # state per layer: conv (2 - 1) x (2 x 8 + 8) + recurrent 8 x 8 = 88 elements = 176 B;
    # attention 256 B per token per layer. vLLM raises the block size to
    # 16 x cdiv(176, 16 x 256) = 16 tokens (HybridAttentionMambaModelConfig), page 4,096 B.
    layout = layout_of(model, block_size=4)
    assert (layout.block_size, layout.page_bytes, layout.state_bytes_per_layer) == (16, 4096, 176)
    sched = hybrid_scheduler(layout, num_blocks=8)
    sched.add_request(request(0, 20, 3), 0.0)
    _step(sched, 0.0)
    assert sched.kv.tables(0) == ([[0, 1]], [2])  # attention blocks first, then the state's
    _step(sched, 0.1)
    assert sched.kv.tables(0) == ([[0, 1]], [2])  # 21 tokens: still two attention blocks
    _step(sched, 0.2)
    assert sched.queue_lengths() == (0, 0, 0)
    assert sched.kv.num_free_blocks == 8


def test_a_request_too_big_for_the_pool_is_rejected_with_its_block_count() -> None:
    """Alone at its longest (39 tokens, the last output token needs no KV), in one chunk: 1
    full group x cdiv(39, 4) = 10 blocks + 1 window group x min(10, cdiv(5 - 1 + 39, 4) + 1)
    = 20 > 16."""
    layout = layout_of(tiny_hybrid((FULL, SLIDING), window=5))
    sched = hybrid_scheduler(layout, num_blocks=16)
    big = request(0, 30, 10)
    sched.add_request(big, 0.0)
    assert big.status is RequestStatus.REJECTED
    assert "needs 20 KV blocks of 4 tokens (over 2 layer groups)" in str(big.rejection_reason)


@pytest.mark.parametrize("policy", [Policy.VLLM_V0, Policy.ORCA, Policy.STATIC])
def test_other_policies_refuse_hybrid_models(policy: Policy) -> None:
    """Only V1 has the hybrid manager; vLLM V0's block manager kept one table per sequence."""
    sc = scenario(poisson_workload(5, 1.0, 50, 10), system(policy), model="gpt-oss-20b")
    sc = replace(sc, gpu=replace(sc.gpu))
    with pytest.raises(InputError, match="only vllm_v1 has the hybrid KV-cache manager"):
        simulate(sc)


def test_v1_with_swap_refuses_hybrid_models() -> None:
    sc = scenario(
        poisson_workload(5, 1.0, 50, 10),
        system(Policy.VLLM_V1, preemption=PreemptionPolicy.SWAP, swap_space_gib=1.0),
        model="gpt-oss-20b",
    )
    with pytest.raises(InputError, match="preempts by recompute only"):
        simulate(sc)


def test_the_summary_shows_the_hybrid_picture_and_dense_runs_do_not_change() -> None:
    """The first story's request through the engine: 2 window blocks freed, each 4 tokens x
    256 B x 1 layer = 1,024 B; 2 groups of 1 layer, no padding, no state. A dense run's
    summary has none of these keys."""
    model = tiny_hybrid((FULL, SLIDING), window=5)
    knobs = dict(block_size=4, num_kv_blocks=12, enable_prefix_cache=False)
    s = scenario(explicit_workload([(9, 6, 0.0)]), system(Policy.VLLM_V1, **knobs))
    summary = simulate(replace(s, model=model), check_invariants=True).summary
    assert summary["num_finished"] == 1
    assert {k: summary[k] for k in HYBRID_KEYS} == {
        "kv_layer_groups": 2,
        "kv_layers_per_group": 1,
        "kv_padding_layers": 0,
        "kv_window_freed_blocks": 2,
        "kv_window_freed_bytes": 2 * 1024,
        "kv_state_bytes_per_seq": 0,
    }
    dense = simulate(s).summary
    assert not set(HYBRID_KEYS) & set(dense)


HYBRID_KEYS = (
    "kv_layer_groups",
    "kv_layers_per_group",
    "kv_padding_layers",
    "kv_window_freed_blocks",
    "kv_window_freed_bytes",
    "kv_state_bytes_per_seq",
)


def test_the_whole_prompt_a_window_group_needs_is_the_window_and_a_chunk() -> None:
    """scheduler_reserve_full_isl on a hybrid model (v0.34.0, the default): the admission counts
    every block of the prompt in the full group but only what a window group holds at most
    (pagesim's model of a window's peak: the window and a chunk, cdiv(5 - 1 + 8, 4) + 1 = 4;
    vLLM v0.34.0 caps it at the window and the tokens in flight, a budget per concurrent step:
    SlidingWindowSpec.max_admission_blocks_per_request).
    Request 1's 24 tokens need 6 + 4 = 10 blocks, and after request 0's step 10 are free: it is
    admitted (12, uncapped, would not fit)."""
    layout = layout_of(tiny_hybrid((FULL, SLIDING), window=5))
    assert layout.blocks_alone(24, 8) == 10
    sched = hybrid_scheduler(
        layout, num_blocks=15, enable_prefix_cache=False, max_num_batched_tokens=8
    )
    sched.add_request(request(0, 8, 10), 0.0)
    assert _work(_step(sched, 0.0)) == [(0, 0, 8, 8, True)]
    sched.add_request(request(1, 24, 2), 0.1)
    assert _work(_step(sched, 0.1)) == [(0, 0, 1, 9, False), (1, 1, 7, 7, True)]
    # A 25-token prompt needs 7 + 4 = 11: it waits.
    sched = hybrid_scheduler(
        layout, num_blocks=15, enable_prefix_cache=False, max_num_batched_tokens=8
    )
    sched.add_request(request(0, 8, 10), 0.0)
    _step(sched, 0.0)
    sched.add_request(request(1, 25, 2), 0.1)
    assert _work(_step(sched, 0.1)) == [(0, 0, 1, 9, False)]

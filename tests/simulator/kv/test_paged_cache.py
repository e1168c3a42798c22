"""PagedKVCache stories with exact block ids: allocation, copy-on-write, prefix hits, eviction,
swap, memory accounting and misuse."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from kv_helpers import hash_token_blocks

from pagesim.simulator.core.errors import KVCacheError
from pagesim.simulator.core.memory import MemoryBreakdown
from pagesim.simulator.core.plan import BlockCopy
from pagesim.simulator.kv.paged_cache import PagedKVCache


def _run_step(
    cache: PagedKVCache, seq_id: int, num_tokens: int, hashes: Sequence[int] = ()
) -> None:
    """Append and compute `num_tokens` tokens, as one engine step would."""
    cache.allocate_slots([seq_id], num_tokens)
    cache.commit(seq_id, cache.num_tokens(seq_id), hashes)
    cache.check_invariants()


def test_allocation_order_and_fifo_reuse() -> None:
    cache = PagedKVCache(8, 4)
    cache.add_seq(1)
    assert cache.allocate_slots([1], 10) == ()
    assert cache.block_table(1) == (0, 1, 2)
    cache.add_seq(2)
    cache.allocate_slots([2], 5)
    assert cache.block_table(2) == (3, 4)
    assert cache.num_free_blocks == 3
    cache.free(1)  # tail first: the free list becomes [5, 6, 7, 2, 1, 0]
    cache.add_seq(3)
    cache.allocate_slots([3], 16)
    assert cache.block_table(3) == (5, 6, 7, 2)
    cache.allocate_slots([2], 4)  # 5 -> 9 tokens: one more block
    assert cache.block_table(2) == (3, 4, 1)
    assert cache.num_tokens(2) == 9 and cache.num_computed_tokens(2) == 0
    cache.check_invariants()


def test_blocks_are_allocated_lazily_one_at_a_time() -> None:
    cache = PagedKVCache(4, 4)
    cache.add_seq(1)
    for num_tokens, num_blocks in [(1, 1), (3, 1), (1, 2), (4, 3)]:
        cache.allocate_slots([1], num_tokens)
        assert len(cache.block_table(1)) == num_blocks
    assert cache.num_blocks_needed(1, 3) == 0 and cache.num_blocks_needed(1, 4) == 1


def test_fork_and_copy_on_write() -> None:
    cache = PagedKVCache(8, 4)
    cache.add_seq(1)
    _run_step(cache, 1, 6)  # block 0 full, block 1 holds 2 of 4 slots
    cache.fork(1, 2)
    assert cache.block_table(2) == (0, 1)
    assert (cache.ref_count(0), cache.ref_count(1)) == (2, 2)
    assert cache.num_tokens(2) == 6 and cache.num_computed_tokens(2) == 6
    assert cache.num_blocks_needed(2, 1) == 1  # the copy
    assert cache.num_blocks_needed(2, 3) == 2  # the copy and block index 2
    # The child writes into the shared partial block: copy 1 -> 2 first.
    assert cache.allocate_slots([2], 1) == (BlockCopy(src_block=1, dst_block=2),)
    assert cache.block_table(2) == (0, 2)
    assert (cache.ref_count(0), cache.ref_count(1), cache.ref_count(2)) == (2, 1, 1)
    cache.check_invariants()
    # The parent is now block 1's last holder: it writes in place, no copy.
    assert cache.num_blocks_needed(1, 1) == 0
    assert cache.allocate_slots([1], 1) == ()
    assert cache.block_table(1) == (0, 1)
    assert cache.allocate_slots([1], 2) == ()  # 9 tokens: a new block
    assert cache.block_table(1) == (0, 1, 3)
    cache.check_invariants()


def test_fork_of_a_block_aligned_sequence_needs_no_copy() -> None:
    cache = PagedKVCache(4, 4)
    cache.add_seq(1)
    _run_step(cache, 1, 4)
    cache.fork(1, 2)
    assert cache.num_blocks_needed(2, 1) == 1  # a fresh block, not a copy
    assert cache.allocate_slots([2], 1) == ()
    assert cache.block_table(2) == (0, 1) and cache.ref_count(0) == 2


def test_prefix_hit_maps_the_same_physical_blocks() -> None:
    cache = PagedKVCache(8, 4, enable_prefix_cache=True)
    hashes = hash_token_blocks(list(range(10)), 4)  # 2 full blocks
    assert cache.add_seq(1, hashes, 10) == 0
    _run_step(cache, 1, 10, hashes)
    assert cache.block_table(1) == (0, 1, 2)
    assert cache.block_hash(0) == hashes[0] and cache.block_hash(2) is None
    assert cache.count_prefix_hit_tokens(hashes, 10) == 8
    assert cache.add_seq(2, hashes, 10) == 8
    assert cache.block_table(2) == (0, 1)
    assert (cache.ref_count(0), cache.ref_count(1), cache.ref_count(2)) == (2, 2, 1)
    assert cache.num_tokens(2) == 8 and cache.num_computed_tokens(2) == 8
    cache.allocate_slots([2], 2)
    assert cache.block_table(2) == (0, 1, 3)
    assert cache.num_prefix_query_tokens == 20 and cache.num_prefix_hit_tokens == 8
    cache.check_invariants()


def test_a_prompt_served_entirely_from_cache_still_computes_its_last_token() -> None:
    cache = PagedKVCache(8, 4, enable_prefix_cache=True)
    hashes = hash_token_blocks(list(range(8)), 4)  # exactly 2 blocks
    cache.add_seq(1, hashes, 8)
    _run_step(cache, 1, 8, hashes)
    assert cache.block_hash(1) == hashes[1]
    assert cache.add_seq(2, hashes, 8) == 4  # only block 0: the last token must be computed
    assert cache.block_table(2) == (0,)
    cache.allocate_slots([2], 4)
    assert cache.block_table(2) == (0, 2)  # recomputed into a fresh block, not block 1
    cache.commit(2, 8, hashes)  # block 2 has block 1's content: block 1 keeps the hash
    assert cache.block_hash(2) is None and cache.block_hash(1) == hashes[1]
    cache.check_invariants()


def test_blocks_of_the_current_step_are_not_hits() -> None:
    cache = PagedKVCache(8, 4, enable_prefix_cache=True)
    hashes = hash_token_blocks(list(range(9)), 4)
    cache.add_seq(1, hashes, 9)
    cache.allocate_slots([1], 9)
    assert cache.add_seq(2, hashes, 9) == 0  # same step, before 1's commit
    cache.commit(1, 9, hashes)
    assert cache.add_seq(3, hashes, 9) == 8
    assert cache.num_prefix_query_tokens == 27 and cache.num_prefix_hit_tokens == 8
    cache.check_invariants()


def test_freed_tail_blocks_are_evicted_first() -> None:
    cache = PagedKVCache(8, 4, enable_prefix_cache=True)
    hashes_a = hash_token_blocks(list(range(13)), 4)  # 3 full blocks + 1 token
    hashes_b = hash_token_blocks(list(range(100, 109)), 4)  # 2 full blocks + 1 token
    cache.add_seq(1, hashes_a, 13)
    _run_step(cache, 1, 13, hashes_a)
    cache.add_seq(2, hashes_b, 9)
    _run_step(cache, 2, 9, hashes_b)
    assert cache.block_table(1) == (0, 1, 2, 3) and cache.block_table(2) == (4, 5, 6)
    cache.free(1)  # uncached 3 to the free list; cached 2, 1, 0 to the LRU queue
    cache.free(2)  # uncached 6 to the free list; cached 5, 4 to the LRU queue
    assert cache.num_free_blocks == 8 and cache.num_cached_blocks == 5
    cache.add_seq(3)
    cache.allocate_slots([3], 12)  # plain free blocks first: 7, then 3 and 6
    assert cache.block_table(3) == (7, 3, 6)
    cache.allocate_slots([3], 4)  # now evict: A's tail block 2 goes first
    assert cache.block_table(3)[-1] == 2
    assert cache.count_prefix_hit_tokens(hashes_a, 13) == 8  # A's blocks 0, 1 still hit
    cache.allocate_slots([3], 8)
    assert cache.block_table(3)[-2:] == (1, 0)
    assert cache.count_prefix_hit_tokens(hashes_a, 13) == 0
    assert cache.count_prefix_hit_tokens(hashes_b, 9) == 8  # B's prefix outlived A's
    assert cache.add_seq(4, hashes_b, 9) == 8
    assert cache.block_table(4) == (4, 5)
    assert cache.num_free_blocks == 0
    cache.check_invariants()


def test_swap_round_trip_restores_counts_and_sharing() -> None:
    cache = PagedKVCache(8, 4, num_cpu_blocks=4)
    cache.add_seq(1)
    _run_step(cache, 1, 6)
    cache.fork(1, 2)
    _run_step(cache, 2, 1)  # copy-on-write: 2 holds (0, 2), 1 holds (0, 1)
    cache.add_seq(3)
    _run_step(cache, 3, 8)  # blocks 3, 4
    before = {s: (cache.num_tokens(s), cache.num_computed_tokens(s)) for s in (1, 2)}
    assert cache.can_swap_out([1, 2])
    assert cache.swap_out([1, 2]) == 3  # block 0 moves once
    assert cache.is_swapped(1) and cache.is_swapped(2) and not cache.is_swapped(3)
    assert cache.num_cpu_free_blocks == 1 and cache.num_free_blocks == 6
    cpu_1, cpu_2 = cache.block_table(1), cache.block_table(2)
    assert cpu_1[0] == cpu_2[0] and cpu_1[1] != cpu_2[1]
    cache.check_invariants()
    assert not cache.can_swap_out([3])  # 2 blocks, 1 CPU block free
    with pytest.raises(KVCacheError, match="needs 2 CPU blocks, 1 free"):
        cache.swap_out([3])
    assert cache.can_swap_in([1, 2], reserve_blocks=3)
    assert not cache.can_swap_in([1, 2], reserve_blocks=4)
    assert cache.swap_in([1, 2]) == 3
    table_1, table_2 = cache.block_table(1), cache.block_table(2)
    assert table_1[0] == table_2[0] and table_1[1] != table_2[1]
    assert cache.ref_count(table_1[0]) == 2 and cache.ref_count(table_1[1]) == 1
    assert {s: (cache.num_tokens(s), cache.num_computed_tokens(s)) for s in (1, 2)} == before
    assert cache.num_cpu_free_blocks == 4
    cache.check_invariants()


def test_swapping_out_part_of_a_sharing_group_copies_the_shared_block() -> None:
    cache = PagedKVCache(8, 4, num_cpu_blocks=4)
    cache.add_seq(1)
    _run_step(cache, 1, 6)
    cache.fork(1, 2)
    assert cache.swap_out([2]) == 2
    assert cache.block_table(1) == (0, 1) and cache.ref_count(0) == 1
    cache.check_invariants()
    cache.free(2)  # a swapped sequence can be freed: its CPU blocks come back
    assert cache.num_cpu_free_blocks == 4 and not cache.has_seq(2)
    cache.check_invariants()


def test_swap_in_keeps_prefix_cache_entries() -> None:
    cache = PagedKVCache(4, 4, num_cpu_blocks=4, enable_prefix_cache=True)
    hashes = hash_token_blocks(list(range(9)), 4)
    cache.add_seq(1, hashes, 9)
    _run_step(cache, 1, 9, hashes)
    cache.swap_out([1])  # cached blocks 0, 1 become evictable on GPU
    cache.evict_one()
    cache.evict_one()
    assert cache.num_cached_blocks == 0
    cache.swap_in([1])  # the copies bring their hashes back
    assert cache.count_prefix_hit_tokens(hashes, 9) == 8
    cache.check_invariants()


def test_memory_breakdown_counts_shared_blocks_once() -> None:
    # Seq 1 ends at 7 tokens (needs 1 more slot of block 1), seq 2 at 12 (needs both): reserved.
    cache = PagedKVCache(8, 4)
    cache.add_seq(1, final_len=7)
    _run_step(cache, 1, 6)  # block 0: 4 computed; block 1: 2 computed, 2 empty
    cache.fork(1, 2)  # seq 2 inherits final length 7: both end at 7
    # Slot 3 of block 1 will never be used.
    assert cache.memory_breakdown() == MemoryBreakdown(6, 1, 1, 0, 24)


def test_memory_breakdown_of_forks_with_different_final_lengths() -> None:
    cache = PagedKVCache(8, 4)
    cache.add_seq(1, final_len=7)
    _run_step(cache, 1, 6)
    cache.fork(1, 2, final_len=12)  # a sample that will grow to 12 tokens
    assert cache.memory_breakdown() == MemoryBreakdown(6, 2, 0, 0, 24)
    cache.allocate_slots([2], 2)  # copy 1 -> 2; seq 2 holds 8 slots, 6 computed
    breakdown = cache.memory_breakdown()
    # Block 1: 2 computed, 1 reserved (seq 1), 1 frag; block 2: 2 computed + 2 reserved.
    assert breakdown == MemoryBreakdown(8, 3, 1, 0, 20)
    assert breakdown.total_slots == 32
    cache.commit(2, 8)
    cache.free(1)
    cache.free(2)
    assert cache.memory_breakdown() == MemoryBreakdown(0, 0, 0, 0, 32)


def test_memory_breakdown_counts_evictable_blocks_as_free() -> None:
    cache = PagedKVCache(4, 4, enable_prefix_cache=True)
    hashes = hash_token_blocks(list(range(8)), 4)
    cache.add_seq(1, hashes, 8, final_len=8)
    _run_step(cache, 1, 8, hashes)
    cache.free(1)
    assert cache.num_cached_blocks == 2
    assert cache.memory_breakdown() == MemoryBreakdown(0, 0, 0, 0, 16)
    cache.add_seq(2, hashes, 8, final_len=8)  # revives block 0: full of computed KV again
    assert cache.memory_breakdown() == MemoryBreakdown(4, 0, 0, 0, 12)
    cache.check_invariants()


def test_allocation_that_does_not_fit_returns_none_and_changes_nothing() -> None:
    cache = PagedKVCache(2, 4)
    cache.add_seq(1)
    cache.allocate_slots([1], 6)
    cache.add_seq(2)
    assert cache.allocate_slots([2], 1) is None
    assert cache.allocate_slots([1], 3) is None  # 2 fit in block 1, the third needs a block
    assert cache.allocate_slots([1, 2], [1, 1]) is None  # all or nothing: seq 2 needs a block
    assert cache.num_tokens(1) == 6 and cache.block_table(1) == (0, 1)
    assert cache.num_tokens(2) == 0 and cache.block_table(2) == ()
    assert cache.allocate_slots([1], 2, reserve_blocks=1) is None
    assert cache.num_tokens(1) == 6
    assert cache.allocate_slots([1], 2) == () and cache.num_tokens(1) == 8
    cache.check_invariants()


def test_misuse_raises() -> None:
    cache = PagedKVCache(4, 4, num_cpu_blocks=2)
    with pytest.raises(KVCacheError, match="unknown seq 9"):
        cache.allocate_slots([9], 1)
    with pytest.raises(KVCacheError, match="unknown seq 9"):
        cache.num_tokens(9)
    cache.add_seq(1)
    with pytest.raises(KVCacheError, match="already exists"):
        cache.add_seq(1)
    cache.allocate_slots([1], 3)
    with pytest.raises(KVCacheError, match="commit its step first"):
        cache.fork(1, 2)
    with pytest.raises(KVCacheError, match=r"expected 0\.\.3"):
        cache.commit(1, 4)
    cache.commit(1, 2)
    with pytest.raises(KVCacheError, match=r"expected 2\.\.3"):
        cache.commit(1, 1)
    with pytest.raises(KVCacheError):
        cache.allocate_slots([1], -1)
    with pytest.raises(KVCacheError, match="repeated"):
        cache.swap_out([1, 1])
    cache.swap_out([1])
    with pytest.raises(KVCacheError, match="swapped out"):
        cache.allocate_slots([1], 1)
    with pytest.raises(KVCacheError, match="already swapped out"):
        cache.swap_out([1])
    cache.free(1)
    with pytest.raises(KVCacheError, match="unknown seq 1"):
        cache.free(1)  # double free
    cache.add_seq(3)
    with pytest.raises(KVCacheError, match="no final length"):
        cache.memory_breakdown()
    with pytest.raises(KVCacheError, match="2 token counts for 1 sequences"):
        cache.allocate_slots([3], [1, 1])
    with pytest.raises(KVCacheError):
        PagedKVCache(0, 4)
    cache.check_invariants()


def test_prefix_cache_off_ignores_hashes() -> None:
    cache = PagedKVCache(4, 4)
    hashes = hash_token_blocks(list(range(9)), 4)
    cache.add_seq(1, hashes, 9)
    _run_step(cache, 1, 9, hashes)
    assert cache.add_seq(2, hashes, 9) == 0
    assert cache.num_cached_blocks == 0 and cache.num_prefix_query_tokens == 0


def test_memory_saved_by_sharing_counts_copies_by_cause() -> None:
    """A block held by r sequences saves r - 1 copies: prefix hits on blocks in use count for
    the prefix cache, forks for forks; a shared block losing a holder drops a fork's share first;
    copy-on-write ends a fork's share of the block it copies."""
    cache = PagedKVCache(16, 4, enable_prefix_cache=True)
    prompt = hash_token_blocks(range(10), 4)  # two full blocks
    cache.add_seq(1, prompt, 10, final_len=12)
    _run_step(cache, 1, 10, prompt)  # blocks 0, 1 full and cached; block 2 holds 2 slots
    assert (cache.num_prefix_saved_blocks, cache.num_fork_saved_blocks) == (0, 0)
    assert cache.add_seq(2, prompt, 10, final_len=12) == 8  # hits blocks 0 and 1, in use
    assert (cache.num_prefix_saved_blocks, cache.num_fork_saved_blocks) == (2, 0)
    cache.fork(1, 3)  # shares blocks 0, 1 and the partial block 2
    assert (cache.num_prefix_saved_blocks, cache.num_fork_saved_blocks) == (2, 3)
    breakdown = cache.memory_breakdown()
    assert (breakdown.prefix_saved_slots, breakdown.fork_saved_slots) == (8, 12)
    cache.allocate_slots([3], 1)  # a write into shared, partial block 2: copy-on-write
    assert cache.num_fork_saved_blocks == 2
    cache.free(1)  # blocks 0, 1 each lose a holder: the fork's shares go first
    assert (cache.num_prefix_saved_blocks, cache.num_fork_saved_blocks) == (2, 0)
    cache.check_invariants()
    cache.free(3)  # seq 2 alone holds blocks 0 and 1 now
    assert (cache.num_prefix_saved_blocks, cache.num_fork_saved_blocks) == (0, 0)
    cache.check_invariants()

"""Where freed blocks go in vLLM V1's free queue, by release: from v0.24.0 a block freed without
a hash goes to the head (reused first), a hashed one to the tail (v1/core/block_pool.py
BlockPool.free_blocks, FreeKVCacheBlockQueue.prepend_n); v0.11.0 to v0.23.0 appended every one.
Exact block ids, as vLLM's tests/v1/core/test_prefix_caching.py test_prefill walks them (its
block ids start at 1, after the null block; pagesim's at 0)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.simulator.kv.block_pool import BlockPool, EvictionOrder
from pagesim.simulator.kv.lru_queue import LruQueue
from pagesim.simulator.kv.paged_cache import PagedKVCache

COMMON = [11, 12, 13]  # hashes of a 3-block (12-token) common prefix


def _v1(reuse_unhashed_first: bool) -> PagedKVCache:
    return PagedKVCache(
        10,
        4,
        enable_prefix_cache=True,
        eviction=EvictionOrder.LRU,
        allow_duplicate_hashes=True,
        reuse_unhashed_first=reuse_unhashed_first,
    )


def _prefill(kv: PagedKVCache, seq_id: int, num_tokens: int) -> tuple[int, ...]:
    """A prompt of the common prefix and `num_tokens - 12` unique tokens, its blocks cached when
    allocated as V1 does: its block table."""
    hit = kv.add_seq(seq_id, COMMON, num_tokens, final_len=num_tokens)
    assert kv.allocate_slots([seq_id], num_tokens - hit) == ()
    kv.cache_blocks(seq_id, num_tokens, COMMON)
    kv.commit(seq_id, num_tokens, COMMON)
    return kv.block_table(seq_id)


def _free_queue(kv: PagedKVCache, seq_id: int) -> tuple[int, ...]:
    """The free queue, head first, read by allocating every free block to `seq_id`."""
    kv.add_seq(seq_id, final_len=40)
    assert kv.allocate_slots([seq_id], 4 * kv.num_free_blocks) == ()
    return kv.block_table(seq_id)


def test_v0_24_on_unhashed_blocks_are_reused_first_as_in_vllms_test_prefill() -> None:
    """tests/v1/core/test_prefix_caching.py test_prefill (vllm-project/vllm, the form of
    v0.24.0 on): request 0 (12 common + 3 tokens) takes blocks 0-3, request 1 (12 common + 1)
    hits 0-2 and takes 4. Freeing 0 then 1: the partial blocks 3, then 4, each go to the head,
    the common ones (2, 1, 0, tail first) to the tail. Request 2 hits the common prefix again
    and reuses block 4; after it leaves, a 10-block request takes them in the queue's order."""
    kv = _v1(reuse_unhashed_first=True)
    assert _prefill(kv, 0, 15) == (0, 1, 2, 3)
    assert _prefill(kv, 1, 13) == (0, 1, 2, 4)
    kv.free(0)  # 2, 1, 0 still held by request 1: only 3 is freed
    kv.free(1)
    assert kv.num_free_blocks == 10
    assert _prefill(kv, 2, 14) == (0, 1, 2, 4)  # "reuse partial [5]" in vLLM's ids
    kv.free(2)
    assert _free_queue(kv, 3) == (4, 3, 5, 6, 7, 8, 9, 2, 1, 0)
    kv.check_invariants()


def test_v0_11_appends_every_freed_block() -> None:
    """The same requests under v0.11.0's free_blocks (append_n of every freed block): the
    partial blocks queue behind the never-used ones, in the order freed, and request 2's new
    block is 5, the head."""
    kv = _v1(reuse_unhashed_first=False)
    assert _prefill(kv, 0, 15) == (0, 1, 2, 3)
    assert _prefill(kv, 1, 13) == (0, 1, 2, 4)
    kv.free(0)
    kv.free(1)
    assert _prefill(kv, 2, 14) == (0, 1, 2, 5)
    kv.free(2)
    assert _free_queue(kv, 3) == (6, 7, 8, 9, 3, 4, 5, 2, 1, 0)
    kv.check_invariants()


def test_without_a_prefix_cache_every_freed_block_is_reused_first() -> None:
    """v0.24.0 on, prefix caching off: no block has a hash, so a sequence's blocks all go to the
    head, tail first (its last block is reused first); v0.11.0: to the tail."""
    for reuse, expected in ((True, (2, 1, 0, 3)), (False, (3, 2, 1, 0))):
        kv = PagedKVCache(4, 4, reuse_unhashed_first=reuse)
        kv.add_seq(0, final_len=12)
        kv.allocate_slots([0], 12)
        kv.commit(0, 12)
        kv.free(0)
        assert _free_queue(kv, 1) == expected
        kv.check_invariants()


def test_a_private_sequences_full_blocks_go_where_hashed_ones_go() -> None:
    """A private request (policies/group_hashes.py) registers no hash, but vLLM hashed its full
    blocks: freed with `hashes_full_blocks`, blocks 0 and 1 (full) go to the tail, block 2
    (partly filled) to the head, as if they held their hashes."""
    kv = _v1(reuse_unhashed_first=True)
    kv.add_seq(0, final_len=10)
    kv.allocate_slots([0], 10)
    kv.commit(0, 10)
    kv.free(0, hashes_full_blocks=True)
    assert _free_queue(kv, 1) == (2, 3, 4, 5, 6, 7, 8, 9, 1, 0)


def test_one_free_blocks_call_prepends_its_blocks_in_order() -> None:
    """FreeKVCacheBlockQueue.prepend_n keeps the order of the blocks it is given: a batch
    decref_many(5, 6) puts 5 first, where two single frees put 6 first."""
    pool = BlockPool(8, eviction=EvictionOrder.LRU, reuse_unhashed_first=True)
    taken = pool.allocate_many(8)
    assert taken == list(range(8))
    assert pool.decref_many([5, 6]) == [5, 6]
    pool.decref(3)
    pool.decref(2)
    assert pool.allocate_many(4) == [2, 3, 5, 6]
    pool.check_invariants()


def test_a_prepended_block_with_stale_entries_is_compacted_first() -> None:
    """LruQueue.prepend: a block's live entry must follow its stale ones; prepending a block that
    has one rebuilds the queue first, so it is still reused first."""
    queue = LruQueue([0, 1, 2], 3)
    queue.remove(1)  # a hit on free block 1: its entry goes stale
    queue.prepend([1])
    assert list(queue) == [1, 0, 2]
    assert queue.popleft() == 1
    queue.check([0, 1, 0])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 12), st.booleans()), min_size=1, max_size=30))
def test_the_free_blocks_are_conserved_whatever_the_order(ops: list[tuple[int, bool]]) -> None:
    """Whatever sequences come and go, and whichever of their blocks are hashed, every block is
    free or held exactly once and the pool's audit holds, under either order."""
    for reuse in (True, False):
        kv = PagedKVCache(
            12,
            2,
            enable_prefix_cache=True,
            eviction=EvictionOrder.LRU,
            allow_duplicate_hashes=True,
            reuse_unhashed_first=reuse,
        )
        live: list[int] = []
        for seq_id, (num_tokens, hashed) in enumerate(ops):
            if kv.num_free_blocks * 2 < num_tokens:
                kv.free(live.pop(0), hashes_full_blocks=not hashed)
                continue
            kv.add_seq(seq_id, final_len=num_tokens)
            kv.allocate_slots([seq_id], num_tokens)
            hashes = [1000 * seq_id + i for i in range(num_tokens // 2)] if hashed else []
            kv.commit(seq_id, num_tokens, hashes)
            live.append(seq_id)
            kv.check_invariants()
        for seq_id in live:
            kv.free(seq_id)
        kv.check_invariants()
        assert kv.num_free_blocks == 12

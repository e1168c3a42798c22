"""BlockPool stories with exact block ids, misuse errors, and a random-operation property."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.simulator.core.errors import KVCacheError
from pagesim.simulator.kv.block_pool import BlockPool, EvictionOrder


def test_allocation_order_is_fifo() -> None:
    pool = BlockPool(4)
    assert [pool.allocate() for _ in range(3)] == [0, 1, 2]
    assert pool.decref(1) == 0
    assert pool.decref(0) == 0
    # Free list is now [3, 1, 0]: lowest position first, freed blocks at the tail.
    assert [pool.allocate() for _ in range(3)] == [3, 1, 0]
    assert pool.num_free_blocks == 0 and pool.num_used_blocks == 4
    pool.check_invariants()


def test_ref_counts() -> None:
    pool = BlockPool(2)
    block = pool.allocate()
    pool.incref(block)
    assert pool.ref_count(block) == 2
    assert pool.decref(block) == 1
    assert pool.num_used_blocks == 1
    assert pool.decref(block) == 0
    assert pool.num_free_blocks == 2
    pool.check_invariants()


def test_cached_block_stays_hittable_until_evicted() -> None:
    pool = BlockPool(3)
    a, b, c = pool.allocate(), pool.allocate(), pool.allocate()
    assert pool.cache_block(a, 111) and pool.cache_block(b, 222)
    assert pool.num_cached_blocks == 2
    pool.decref(b)
    pool.decref(a)  # evictable LRU: [b, a]
    pool.decref(c)  # plain free list: [c]
    assert pool.num_free_blocks == 3 and pool.num_evictable_blocks == 2
    assert pool.lookup(111) == a and pool.block_hash(a) == 111
    pool.touch(a)  # a hit revives a
    assert pool.ref_count(a) == 1 and pool.num_free_blocks == 2
    assert pool.allocate() == c  # plain free blocks go before cached ones
    assert pool.allocate() == b  # then the LRU cached block, its hash dropped
    assert pool.lookup(222) is None and pool.block_hash(b) is None
    assert pool.num_cached_blocks == 1
    with pytest.raises(KVCacheError, match="no free block"):
        pool.allocate()
    pool.check_invariants()


def test_duplicate_hash_keeps_the_first_mapping() -> None:
    pool = BlockPool(2)
    a, b = pool.allocate(), pool.allocate()
    assert pool.cache_block(a, 7)
    assert not pool.cache_block(b, 7)
    assert pool.lookup(7) == a and pool.block_hash(b) is None
    assert pool.cache_block(a, 7)  # re-registering the same hash is a no-op
    pool.decref(b)
    assert pool.num_evictable_blocks == 0  # b was uncached: plain free
    pool.check_invariants()


def test_evict_one_goes_lru_first() -> None:
    pool = BlockPool(3)
    blocks = [pool.allocate() for _ in range(3)]
    for block in blocks:
        pool.cache_block(block, 100 + block)
    for block in (2, 0, 1):
        pool.decref(block)
    assert [pool.evict_one() for _ in range(4)] == [2, 0, 1, None]
    assert pool.num_cached_blocks == 0
    assert [pool.allocate() for _ in range(3)] == [2, 0, 1]
    pool.check_invariants()


def test_misuse_raises() -> None:
    pool = BlockPool(2)
    with pytest.raises(KVCacheError, match="decref of free block"):
        pool.decref(0)
    with pytest.raises(KVCacheError, match="incref of free block"):
        pool.incref(0)
    with pytest.raises(KVCacheError, match="unknown block"):
        pool.ref_count(2)
    with pytest.raises(KVCacheError, match="unknown block"):
        pool.decref(-1)
    block = pool.allocate()
    with pytest.raises(KVCacheError, match="touch of uncached"):
        pool.touch(block)
    with pytest.raises(KVCacheError, match="cache_block of free"):
        pool.cache_block(1, 5)
    pool.cache_block(block, 5)
    with pytest.raises(KVCacheError, match="cached under hash 5"):
        pool.cache_block(block, 6)
    pool.decref(block)
    with pytest.raises(KVCacheError, match="double free"):
        pool.decref(block)
    with pytest.raises(KVCacheError):
        BlockPool(-1)
    pool.check_invariants()


ops = st.lists(st.tuples(st.sampled_from("aitdce"), st.integers(0, 7)), max_size=60)


@settings(max_examples=80, deadline=None)
@given(ops=ops)
def test_random_operations_keep_invariants(ops: list[tuple[str, int]]) -> None:
    pool = BlockPool(6)
    refs: dict[int, int] = {}  # the model: references we hold
    for op, arg in ops:
        held = sorted(refs)
        if op == "a" and pool.num_free_blocks:
            block = pool.allocate()
            assert block not in refs
            refs[block] = 1
        elif op == "i" and held:
            block = held[arg % len(held)]
            pool.incref(block)
            refs[block] += 1
        elif op == "t" and pool.lookup(arg) is not None:
            block = pool.lookup(arg)
            assert block is not None
            pool.touch(block)
            refs[block] = refs.get(block, 0) + 1
        elif op == "d" and held:
            block = held[arg % len(held)]
            refs[block] -= 1
            assert pool.decref(block) == refs[block]
            if not refs[block]:
                del refs[block]
        elif op == "c" and held:
            block = held[arg % len(held)]
            if pool.block_hash(block) is None:
                pool.cache_block(block, arg)
        elif op == "e":
            pool.evict_one()
        pool.check_invariants()
        assert pool.num_used_blocks == len(refs)
        assert all(pool.ref_count(b) == n for b, n in refs.items())


def test_cache_many_registers_a_chunk_and_checks_as_cache_block_does() -> None:
    # V1's pool (duplicates allowed): blocks 0..2 held; 0 and 1 cached in one call, then 2 joins
    # 0's hash as a duplicate; a held block under a second hash and a free block are refused.
    pool = BlockPool(4, eviction=EvictionOrder.LRU, allow_duplicates=True)
    a, b, c = pool.allocate_many(3)
    pool.cache_many([a, b], [10, 0])  # 0 is a hash like any other
    pool.cache_many([c, a], [10, 10])  # a: the same hash again, a no-op
    assert pool.block_hash(a) == 10 and pool.block_hash(b) == 0 and pool.block_hash(c) == 10
    with pytest.raises(KVCacheError, match="cached under hash 10, not 11"):
        pool.cache_many([a], [11])
    with pytest.raises(KVCacheError, match="cache_block of free block 3"):
        pool.cache_many([3], [12])
    pool.check_invariants()


@settings(max_examples=120, deadline=None)
@given(
    pairs=st.lists(st.tuples(st.integers(-2, 7), st.integers(0, 3)), max_size=12),
    duplicates=st.booleans(),
    eviction=st.sampled_from(EvictionOrder),
)
def test_cache_many_is_cache_block_of_each_pair(
    pairs: list[tuple[int, int]], duplicates: bool, eviction: EvictionOrder
) -> None:
    # Blocks -2..7: out of range ones are unknown blocks (a negative index must not wrap
    # round); blocks 4 and 5 stay free (caching them is an error). Both pools end alike, an
    # error or not: each pair before the failing one cached, the same blocks found.
    def pool() -> BlockPool:
        made = BlockPool(6, eviction=eviction, allow_duplicates=duplicates)
        made.allocate_many(4)
        return made

    def state(of: BlockPool) -> tuple[list[int | None], list[int | None]]:
        return [of.block_hash(b) for b in range(6)], [of.lookup(h) for h in range(4)]

    one_by_one, at_once = pool(), pool()
    expected: type[Exception] | None = None
    for block, block_hash in pairs:
        try:
            one_by_one.cache_block(block, block_hash)
        except KVCacheError:
            expected = KVCacheError
            break
    if expected is None:
        at_once.cache_many([b for b, _ in pairs], [h for _, h in pairs])
    else:
        with pytest.raises(expected):
            at_once.cache_many([b for b, _ in pairs], [h for _, h in pairs])
    assert state(at_once) == state(one_by_one)
    at_once.check_invariants()
    # The copies of a hash found in turn as they are evicted one by one (the duplicates' order).
    for of in (one_by_one, at_once):
        for block in range(4):
            of.decref(block)
    while True:
        evicted = one_by_one.evict_one()
        assert at_once.evict_one() == evicted
        assert state(at_once) == state(one_by_one)
        if evicted is None:
            break


def test_cache_many_refuses_lists_of_different_lengths_before_caching_any() -> None:
    pool = BlockPool(4, eviction=EvictionOrder.LRU, allow_duplicates=True)
    a, b = pool.allocate_many(2)
    with pytest.raises(ValueError, match="2 blocks, 1 hashes"):
        pool.cache_many([a, b], [10])
    assert pool.block_hash(a) is None


def test_v1_duplicates_are_found_oldest_first_as_each_copy_is_evicted() -> None:
    # V1 (v1/core/block_pool.py BlockHashToBlockMap): every copy is cached, a lookup finds the
    # oldest; when a copy is reused for other content, the next oldest is found.
    pool = BlockPool(5, eviction=EvictionOrder.LRU, allow_duplicates=True)
    a, b, c = pool.allocate_many(3)
    for block in (a, b, c):
        assert pool.cache_block(block, 7)
    assert pool.lookup(7) == a
    for block in (c, a, b):  # freed in this order: evicted in this order after blocks 3, 4
        pool.decref(block)
    pool.check_invariants()
    assert pool.allocate_many(2) == [3, 4] and pool.lookup(7) == a  # plain free blocks first
    assert pool.allocate() == c and pool.lookup(7) == a  # a later copy goes: a still first
    assert pool.allocate() == a and pool.lookup(7) == b  # the oldest goes: b is found now
    pool.check_invariants()
    assert pool.allocate() == b and pool.lookup(7) is None
    pool.check_invariants()


@settings(max_examples=100, deadline=None)
@given(
    held=st.lists(st.booleans(), min_size=6, max_size=6),
    queried=st.lists(st.integers(0, 7), max_size=8),
    max_blocks=st.integers(0, 8),
    eviction=st.sampled_from(EvictionOrder),
)
def test_lookup_run_and_touch_run_are_lookup_and_touch_of_each_in_turn(
    held: list[bool], queried: list[int], max_blocks: int, eviction: EvictionOrder
) -> None:
    # Blocks 0..5 cached under hashes 0..5, the `held` ones still referenced, the others
    # evictable; hashes 6 and 7 are cached nowhere. A hash may come twice: its block is hit
    # twice (a free one revived, then shared).
    def pool() -> BlockPool:
        made = BlockPool(6, eviction=eviction)
        for block in made.allocate_many(6):
            made.cache_block(block, block)
        made.decref_many([b for b in range(6) if not held[b]])
        return made

    one_by_one, at_once = pool(), pool()
    hits: list[int] = []
    for block_hash in queried[:max_blocks]:
        block = one_by_one.lookup(block_hash)
        if block is None:
            break
        one_by_one.touch(block)
        hits.append(block)
    assert at_once.lookup_run(queried, max_blocks) == hits
    at_once.touch_run(hits)
    at_once.check_invariants()
    assert at_once.num_used_blocks == one_by_one.num_used_blocks
    assert at_once.num_prefix_saved_blocks == one_by_one.num_prefix_saved_blocks
    assert at_once.ref_counts == one_by_one.ref_counts
    # The free order too: the blocks left free are taken in the same order.
    assert at_once.allocate_many(at_once.num_free_blocks) == one_by_one.allocate_many(
        one_by_one.num_free_blocks
    )


def _one_by_one(pool: BlockPool, block_hashes: list[int], max_blocks: int) -> list[int]:
    hits: list[int] = []
    for block_hash in block_hashes[:max_blocks]:
        block = pool.lookup(block_hash)
        if block is None:
            break
        hits.append(block)
    return hits


@settings(max_examples=100, deadline=None)
@given(
    ops=st.lists(st.tuples(st.sampled_from("aAcCdtegx"), st.integers(0, 9)), max_size=40),
    eviction=st.sampled_from(EvictionOrder),
    duplicates=st.booleans(),
)
def test_lookup_run_asked_again_answers_as_the_map_is_now(
    ops: list[tuple[str, int]], eviction: EvictionOrder, duplicates: bool
) -> None:
    """`lookup_run` gives its last answer again while the hashes, their count, the cap and the
    map are as they were: asked of the same list after every kind of change (a hash mapped
    alone or in bulk, dropped by an allocation or an eviction, the list grown, a hit, a free),
    it answers as looking up each hash in turn does, and an answer changed by its caller
    changes no later one."""
    pool = BlockPool(8, eviction=eviction, allow_duplicates=duplicates, reuse_unhashed_first=True)
    block_hashes = [100, 101, 102]  # a hasher's list: it only grows
    held: list[int] = []
    for op, arg in ops:
        free = pool.num_free_blocks
        if op == "a" and free:
            held.append(pool.allocate())
        elif op == "A" and free:
            held += pool.allocate_many(1 + arg % free)
        elif op == "c" and held:
            block = held[arg % len(held)]
            if pool.block_hash(block) is None:
                pool.cache_block(block, 100 + arg % 6)
        elif op == "C" and held:
            fresh = [b for b in held if pool.block_hash(b) is None][: 1 + arg % 3]
            pool.cache_many(fresh, [100 + (arg + i) % 6 for i in range(len(fresh))])
        elif op == "d" and held:
            pool.decref(held.pop(arg % len(held)))
        elif op == "t" and pool.lookup(100 + arg % 6) is not None:
            block = pool.lookup(100 + arg % 6)
            assert block is not None
            pool.touch(block)
            held.append(block)
        elif op == "e":
            pool.evict_one()
        elif op == "g":
            block_hashes.append(100 + len(block_hashes))
        max_blocks = 1 + arg % 6 if op == "x" else 6
        for _ in range(2):  # the second answered from the first, if nothing changed
            hits = pool.lookup_run(block_hashes, max_blocks)
            assert hits == _one_by_one(pool, block_hashes, max_blocks)
            hits.append(-1)  # the caller's to keep (a table): the next answer is not it
        pool.check_invariants()


def test_lookup_run_asked_again_sees_a_grown_list_and_hashes_dropped_in_bulk() -> None:
    """The two changes the repeated question misses most easily: the hasher's list grown by a
    hash now cached, and V1's `allocate_many` dropping a hash on its inlined path."""
    pool = BlockPool(
        4, eviction=EvictionOrder.LRU, allow_duplicates=True, reuse_unhashed_first=True
    )
    assert pool.allocate_many(4) == [0, 1, 2, 3]
    pool.cache_many([0, 1, 2], [10, 11, 12])
    block_hashes = [10, 11]
    assert pool.lookup_run(block_hashes, 8) == [0, 1]
    block_hashes.append(12)  # the list grew: its new hash is cached already
    assert pool.lookup_run(block_hashes, 8) == [0, 1, 2]
    assert pool.free_table([0, 1, 2, 3])  # free order: 3 (no hash) at the head, then 2, 1, 0
    assert pool.lookup_run(block_hashes, 8) == [0, 1, 2]  # free, still cached
    assert pool.allocate_many(2) == [3, 2]  # block 2's hash dropped
    assert pool.lookup_run(block_hashes, 8) == [0, 1]
    pool.check_invariants()

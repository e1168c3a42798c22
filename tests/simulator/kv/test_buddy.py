"""The buddy allocator the vLLM paper assumes for Orca (Kwon et al., SOSP 2023, §6.1: "We assume
Orca uses the buddy allocation algorithm"; §3.1: external fragmentation from the allocator):
splitting, coalescing with buddies, power-of-two rounding and how it is counted (Fig. 2: Orca
(Oracle) has no internal fragmentation, a large external one)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.simulator.core.errors import KVCacheError
from pagesim.simulator.core.memory import MemoryBreakdown
from pagesim.simulator.kv.buddy import BuddyKVCache, block_order
from pagesim.simulator.kv.contiguous import ContiguousKVCache


def test_block_order_is_the_smallest_power_of_two_that_holds() -> None:
    assert [block_order(n) for n in (1, 2, 3, 4, 5, 8, 9, 2048, 2049)] == [
        0, 1, 2, 2, 3, 3, 4, 11, 12
    ]  # fmt: skip
    assert block_order(np.int64(2049)) == 12  # sizes computed with NumPy work too
    with pytest.raises(KVCacheError, match="num_slots >= 1"):
        block_order(0)


def test_split_then_coalesce_with_buddies() -> None:
    cache = BuddyKVCache(16)
    assert cache.holes() == [(0, 16)]
    # Seq 1 asks 5: 16 splits into 0..8 | 8..16; seq 1 takes 0..8 (8 held for 5 asked).
    assert cache.reserve(1, 5) == 0
    assert cache.region(1) == (0, 8) and cache.asked_slots(1) == 5
    assert cache.holes() == [(8, 8)]
    # Seq 2 asks 3: 8..16 splits into 8..12 | 12..16; seq 2 takes 8..12.
    assert cache.reserve(2, 3) == 8
    assert cache.holes() == [(12, 4)]
    # Seq 3 asks 1: 12..16 splits twice: 12..14 | 14..16, then 12..13 | 13..14.
    assert cache.reserve(3, 1) == 12
    assert cache.holes() == [(13, 1), (14, 2)]
    assert cache.num_free_slots == 3
    cache.check_invariants()
    # Freeing seq 2 (8..12): its buddy 12..16 is split, so nothing merges.
    cache.free(2)
    assert cache.holes() == [(8, 4), (13, 1), (14, 2)]
    # Freeing seq 3 (12): 12+13 -> 12..14, + 14..16 -> 12..16, + 8..12 -> 8..16; 0..8 is held.
    cache.free(3)
    assert cache.holes() == [(8, 8)]
    cache.free(1)
    assert cache.holes() == [(0, 16)]
    assert cache.num_free_slots == 16
    cache.check_invariants()


def test_the_smallest_sufficient_block_is_used_lowest_address_first() -> None:
    cache = BuddyKVCache(16)
    for seq_id in range(4):
        assert cache.reserve(seq_id, 4) == 4 * seq_id
    cache.free(0)
    cache.free(3)
    assert cache.holes() == [(0, 4), (12, 4)]
    assert cache.reserve(9, 2) == 0  # the lowest block of order 2, split: 0..2 | 2..4
    assert cache.holes() == [(2, 2), (12, 4)]
    assert cache.reserve(10, 2) == 2  # a free block of order 1 exists: no split of 12..16
    assert cache.holes() == [(12, 4)]
    cache.check_invariants()


def test_neighbours_that_are_not_buddies_never_merge() -> None:
    # 4..8 and 8..12 are free and adjacent, but 4..8's buddy is 0..4 and 8..12's is 12..16:
    # eight contiguous free slots that cannot serve a request of 8. First fit merges them.
    buddy, first_fit = BuddyKVCache(16), ContiguousKVCache(16)
    for cache in (buddy, first_fit):
        for seq_id in range(4):
            cache.reserve(seq_id, 4)
        cache.free(1)
        cache.free(2)
    assert buddy.holes() == [(4, 4), (8, 4)] and buddy.find_fit(8) is None
    assert first_fit.holes() == [(4, 8)] and first_fit.find_fit(8) == 4
    final_lens = {0: 4, 3: 4}
    for seq_id in (0, 3):
        buddy.set_computed(seq_id, 4)
    # The next request needs 8: every free slot is stranded (external), none is free.
    assert buddy.memory_breakdown(final_lens, next_request_slots=8) == MemoryBreakdown(
        8, 0, 0, 8, 0
    )
    assert buddy.memory_breakdown(final_lens, next_request_slots=4) == MemoryBreakdown(
        8, 0, 0, 0, 8
    )


def test_rounding_counts_as_external_fragmentation() -> None:
    # The vLLM paper's Fig. 2 shows Orca (Oracle) with no internal fragmentation: a reservation
    # of exactly the final length wastes only the buddy's rounding, which counts as external.
    cache = BuddyKVCache(16)
    cache.reserve(1, 5)  # oracle: asks its final length 5; holds 8
    cache.set_computed(1, 3)
    # Seq 2 asks 6 (its policy over-reserves: it ends at 4 tokens) and holds 8.
    cache.reserve(2, 6)
    cache.set_computed(2, 4)
    breakdown = cache.memory_breakdown({1: 5, 2: 4}, next_request_slots=None)
    # Token states 3 + 4; reservation 2 (seq 1's tokens 4, 5); internal 2 (seq 2's ask past
    # its end); external 3 + 2 (rounding 5 -> 8 and 6 -> 8); free 0.
    assert breakdown == MemoryBreakdown(7, 2, 2, 5, 0)
    assert breakdown.total_slots == 16
    with pytest.raises(KVCacheError, match="do not fit its 5 slots"):
        cache.set_computed(1, 6)  # the rounding is not the sequence's to use


def test_a_capacity_that_is_not_a_power_of_two_is_cut_into_its_binary_digits() -> None:
    # The vLLM paper's OPT-13B budget (Table 1): 12 GB of KV, about 15.7K token slots.
    cache = BuddyKVCache(15_728)
    assert cache.holes() == [
        (0, 8192),
        (8192, 4096),
        (12288, 2048),
        (14336, 1024),
        (15360, 256),
        (15616, 64),
        (15680, 32),
        (15712, 16),
    ]
    assert cache.can_ever_hold(2048, 7) and not cache.can_ever_hold(2048, 8)
    assert not cache.can_ever_hold(8193, 1)  # rounds to 16,384: larger than any piece
    assert ContiguousKVCache(15_728).can_ever_hold(9000, 1)
    # Max reservation (2,048): seven regions, as many as first fit places; 1,392 slots left.
    # Smallest sufficient block first: the 2,048 piece, then the 4,096 one split, then 8,192.
    offsets = [cache.reserve(seq_id, 2048) for seq_id in range(7)]
    assert offsets == [12288, 8192, 10240, 0, 2048, 4096, 6144]
    assert cache.find_fit(2048) is None and cache.num_free_slots == 1392
    # Pieces never merge with each other.
    for seq_id in range(7):
        cache.free(seq_id)
    assert cache.holes()[:3] == [(0, 8192), (8192, 4096), (12288, 2048)]
    cache.check_invariants()


def test_misuse_raises() -> None:
    cache = BuddyKVCache(8)
    cache.reserve(1, 3)
    with pytest.raises(KVCacheError, match="already holds"):
        cache.reserve(1, 1)
    with pytest.raises(KVCacheError, match="no free block of 8 slots for 5"):
        cache.reserve(2, 5)
    cache.free(1)
    with pytest.raises(KVCacheError, match="unknown seq 1"):
        cache.free(1)
    with pytest.raises(KVCacheError, match="num_slots >= 1"):
        BuddyKVCache(0)


@settings(max_examples=120, deadline=None)
@given(
    st.integers(1, 300),
    st.lists(st.tuples(st.booleans(), st.integers(1, 70), st.integers(0, 69)), max_size=60),
)
def test_random_reserve_and_free(num_slots: int, ops: list[tuple[bool, int, int]]) -> None:
    cache = BuddyKVCache(num_slots)
    pieces = cache.holes()
    assert sum(length for _, length in pieces) == num_slots
    live: list[int] = []
    for next_id, (is_reserve, size, pick) in enumerate(ops):
        if is_reserve or not live:
            offset = cache.find_fit(size)
            if offset is None:
                assert cache.largest_hole < 1 << block_order(size)
                continue
            assert cache.reserve(next_id, size) == offset
            cache.set_computed(next_id, size // 2)
            live.append(next_id)
        else:
            cache.free(live.pop(pick % len(live)))
        # No two regions or free blocks overlap, all aligned, merging complete.
        cache.check_invariants()
        final_lens = {seq_id: cache.asked_slots(seq_id) - pick % 2 for seq_id in live}
        breakdown = cache.memory_breakdown(final_lens, size)
        assert breakdown.total_slots == num_slots
        assert breakdown.external_frag_slots >= sum(
            cache.region(s)[1] - cache.asked_slots(s) for s in live
        )
    for seq_id in live:
        cache.free(seq_id)
    assert cache.holes() == pieces  # coalescing restores the initial free blocks
    if num_slots & (num_slots - 1) == 0:
        assert cache.holes() == [(0, num_slots)]  # a power of two: one free region

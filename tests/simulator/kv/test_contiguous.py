"""Contiguous reservation: sizing policies, first fit, hole merging, fragmentation accounting."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.simulator.core.config import Reservation
from pagesim.simulator.core.errors import KVCacheError
from pagesim.simulator.core.memory import MemoryBreakdown
from pagesim.simulator.kv.contiguous import ContiguousKVCache, reservation_slots


@pytest.mark.parametrize(
    ("policy", "prompt_len", "output_len", "expected"),
    [
        (Reservation.MAX, 10, 5, 200),
        (Reservation.POW2, 10, 5, 18),
        (Reservation.POW2, 10, 8, 18),
        (Reservation.POW2, 10, 9, 26),
        (Reservation.POW2, 10, 1, 11),
        (Reservation.POW2, 100, 65, 200),  # 100 + 128 capped at the maximum length
        (Reservation.ORACLE, 10, 5, 15),
    ],
)
def test_reservation_slots(
    policy: Reservation, prompt_len: int, output_len: int, expected: int
) -> None:
    assert reservation_slots(policy, prompt_len, output_len, max_len=200) == expected


def test_reservation_sizes_without_judging_the_request() -> None:
    # Too long for the model: the scheduler rejects it; sizing still answers without raising.
    assert reservation_slots(Reservation.POW2, 150, 51, max_len=200) == 200
    assert reservation_slots(Reservation.ORACLE, 150, 51, max_len=200) == 201
    with pytest.raises(KVCacheError, match="negative length"):
        reservation_slots(Reservation.MAX, -1, 5, max_len=200)


def test_first_fit_and_external_fragmentation() -> None:
    cache = ContiguousKVCache(100)
    assert cache.reserve(1, 30) == 0
    assert cache.reserve(2, 20) == 30
    assert cache.reserve(3, 30) == 50
    assert cache.holes() == [(80, 20)]
    cache.free(2)  # a hole in the middle
    assert cache.holes() == [(30, 20), (80, 20)]
    assert cache.num_free_slots == 40 and cache.largest_hole == 20
    # 25 slots: 40 are free, but no hole holds 25.
    assert cache.find_fit(25) is None and not cache.can_reserve(25)
    with pytest.raises(KVCacheError, match="no hole of 25 slots"):
        cache.reserve(4, 25)
    for seq_id in (1, 3):
        cache.set_computed(seq_id, 30)
    final_lens = {1: 30, 3: 30}
    assert cache.memory_breakdown(final_lens, next_request_slots=25) == MemoryBreakdown(
        60, 0, 0, 40, 0
    )
    assert cache.memory_breakdown(final_lens, next_request_slots=20) == MemoryBreakdown(
        60, 0, 0, 0, 40
    )
    assert cache.memory_breakdown(final_lens, next_request_slots=None).external_frag_slots == 0
    assert cache.reserve(5, 10) == 30  # first fit: the lowest hole that fits
    assert cache.holes() == [(40, 10), (80, 20)]
    cache.check_invariants()


def test_free_merges_holes_on_both_sides() -> None:
    cache = ContiguousKVCache(60)
    for seq_id in range(6):
        cache.reserve(seq_id, 10)
    cache.free(1)
    cache.free(3)
    assert cache.holes() == [(10, 10), (30, 10)]
    cache.free(2)  # merges with both neighbours
    assert cache.holes() == [(10, 30)]
    cache.free(0)
    assert cache.holes() == [(0, 40)]
    cache.free(5)
    assert cache.holes() == [(0, 40), (50, 10)]
    cache.free(4)
    assert cache.holes() == [(0, 60)]
    cache.check_invariants()


def test_memory_breakdown_reservation_and_internal_fragmentation() -> None:
    cache = ContiguousKVCache(100)
    cache.reserve(1, 32)  # over-reserved: the request ends at 19 tokens
    cache.set_computed(1, 12)
    cache.reserve(2, 20)
    cache.set_computed(2, 20)
    # Seq 1 will end at 19 tokens: 7 reserved, 13 over-reserved. Seq 2 is complete.
    breakdown = cache.memory_breakdown({1: 19, 2: 20}, next_request_slots=10)
    assert breakdown == MemoryBreakdown(32, 7, 13, 0, 48)
    assert breakdown.total_slots == 100


def test_misuse_raises() -> None:
    cache = ContiguousKVCache(10)
    cache.reserve(1, 4)
    with pytest.raises(KVCacheError, match="already holds"):
        cache.reserve(1, 2)
    with pytest.raises(KVCacheError, match="do not fit"):
        cache.set_computed(1, 5)
    with pytest.raises(KVCacheError, match="num_slots >= 1"):
        cache.reserve(2, 0)
    cache.free(1)
    with pytest.raises(KVCacheError, match="unknown seq 1"):
        cache.free(1)
    with pytest.raises(KVCacheError, match="unknown seq 7"):
        cache.region(7)
    with pytest.raises(KVCacheError):
        ContiguousKVCache(0)
    cache.check_invariants()


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 30)), max_size=40))
def test_random_reserve_and_free_tile_the_space(ops: list[tuple[bool, int]]) -> None:
    cache = ContiguousKVCache(100)
    live: list[int] = []
    for next_id, (is_reserve, size) in enumerate(ops):
        if is_reserve or not live:
            offset = cache.find_fit(size)
            if offset is None:
                assert cache.largest_hole < size
                continue
            assert cache.reserve(next_id, size) == offset
            cache.set_computed(next_id, size // 2)
            live.append(next_id)
        else:
            cache.free(live.pop(size % len(live)))
        cache.check_invariants()
        final_lens = {seq_id: cache.region(seq_id)[1] - 1 for seq_id in live}
        assert cache.memory_breakdown(final_lens, size).total_slots == 100
    for seq_id in live:
        cache.free(seq_id)
    assert cache.holes() == [(0, 100)]

"""The CPU offload tier (simulator/kv/offload_tier.py), block by block: least recently used out
first, a store in flight not hit before it ends, a loading block not evicted, a store with no
room refused whole; and its bookkeeping under any sequence of operations."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagesim.simulator.kv.offload_tier import OffloadTier


def test_a_full_tier_evicts_the_least_recently_used_first() -> None:
    tier = OffloadTier(3)
    assert tier.store([11, 12, 13], now_s=0.0, ready_s=0.0) == [11, 12, 13]
    tier.touch([11])  # a lookup's blocks become the most recent: order 12, 13, 11
    assert tier.store([14], now_s=1.0, ready_s=1.0) == [14]
    assert 12 not in tier and list(_order(tier)) == [13, 11, 14]
    assert tier.store([15, 16], now_s=2.0, ready_s=2.0) == [15, 16]
    assert list(_order(tier)) == [14, 15, 16]
    assert (tier.num_stored, tier.num_evicted) == (6, 3)


def test_a_block_held_already_is_not_written_again() -> None:
    tier = OffloadTier(4)
    tier.store([1, 2], 0.0, 0.0)
    assert tier.store([1, 2, 3], 1.0, 1.0) == [3]
    assert tier.num_stored == 3


def test_a_store_in_flight_is_not_hit_before_it_ends() -> None:
    tier = OffloadTier(4)
    tier.store([1, 2, 3], now_s=0.0, ready_s=2.0)
    assert tier.lookup([1, 2, 3], now_s=1.9) == 0
    assert tier.lookup([1, 2, 3], now_s=2.0) == 3
    assert tier.lookup([1, 9, 3], now_s=2.0) == 1  # the run of leading hits only


def test_blocks_in_flight_or_loading_are_not_evicted_and_a_store_without_room_is_refused() -> None:
    tier = OffloadTier(2)
    tier.store([1], now_s=0.0, ready_s=5.0)  # storing until 5
    tier.store([2], now_s=0.0, ready_s=0.0)
    tier.load([2], until_s=3.0)  # being loaded until 3
    assert tier.store([3], now_s=1.0, ready_s=1.0) is None  # nothing may go: refused whole
    assert tier.num_refused == 1 and len(tier) == 2
    assert tier.store([3], now_s=3.0, ready_s=3.0) == [3]  # the load ended: 2 may go now
    assert 2 not in tier and 1 in tier


def test_a_tier_holds_at_least_one_block() -> None:
    with pytest.raises(ValueError, match="at least one block"):
        OffloadTier(0)


def _order(tier: OffloadTier) -> list[int]:
    return list(tier._entries)  # least recent first


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["store", "touch", "load", "lookup"]),
        st.lists(st.integers(0, 12), max_size=5),
        st.floats(0, 3),
    ),
    max_size=40,
)


@given(st.integers(1, 6), _OPS)
def test_the_tier_never_holds_more_than_it_can_and_counts_reconcile(
    num_blocks: int, ops: list[tuple[str, list[int], float]]
) -> None:
    tier = OffloadTier(num_blocks)
    now = 0.0
    for op, keys, dt in ops:
        now += dt
        if op == "store":
            written = tier.store(keys, now, now + dt)
            assert written is None or all(k in tier for k in written)
        elif op == "touch":
            tier.touch(keys)
        elif op == "load":
            tier.load([k for k in keys if k in tier], now + dt)
        else:
            hits = tier.lookup(keys, now)
            assert all(k in tier for k in keys[:hits])
        tier.check_invariants()

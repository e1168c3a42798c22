"""vLLM V1's free-block queue (kv/lru_queue.py): least recently freed first, hits taken out of
the middle lazily; checked against a plain list, and inside the block pool against V1's order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.simulator.kv import lru_queue
from pagesim.simulator.kv.block_pool import BlockPool, EvictionOrder
from pagesim.simulator.kv.lru_queue import LruQueue


def test_a_hit_leaves_the_middle_and_a_freed_block_goes_to_the_tail() -> None:
    queue = LruQueue(range(5), 5)
    assert queue.pop_many(2) == [0, 1]
    queue.remove(3)  # a prefix hit on free block 3
    queue.append(0)  # block 0 freed
    assert list(queue) == [2, 4, 0] and len(queue) == 3
    queue.append(3)  # 3 freed again: its old entry is stale, the new one is at the tail
    assert list(queue) == [2, 4, 0, 3]
    assert queue.pop_many(3) == [2, 4, 0]
    assert queue.popleft() == 3 and len(queue) == 0
    queue.check([1] * 5)


def test_asking_more_blocks_than_are_free_takes_none() -> None:
    queue = LruQueue(range(3), 3)
    queue.remove(1)  # a stale entry: three entries, two blocks
    with pytest.raises(IndexError):
        queue.pop_many(3)
    assert list(queue) == [0, 2] and queue.pop_many(2) == [0, 2]


ops = st.lists(st.tuples(st.sampled_from("aprmR"), st.integers(0, 9)), max_size=80)


@settings(max_examples=150, deadline=None)
@given(ops=ops, compact_after=st.sampled_from([0, 1, 4096]))
def test_the_queue_is_a_list_in_freeing_order(
    ops: list[tuple[str, int]], compact_after: int
) -> None:
    with pytest.MonkeyPatch.context() as patch:  # compaction exercised too
        patch.setattr(lru_queue, "COMPACT_AFTER", compact_after)
        check_against_a_list(ops)


def check_against_a_list(ops: list[tuple[str, int]]) -> None:
    num_blocks = 8
    queue, model = LruQueue(range(num_blocks), num_blocks), list(range(num_blocks))
    for op, arg in ops:
        taken = [b for b in range(num_blocks) if b not in model]
        if op == "a" and taken:  # free a block in use
            block = taken[arg % len(taken)]
            queue.append(block)
            model.append(block)
        elif op == "p" and model:
            assert queue.popleft() == model.pop(0)
        elif op == "m" and model:
            count = arg % len(model) + 1
            assert queue.pop_many(count) == model[:count]
            del model[:count]
        elif op == "r" and model:  # a hit on a free block
            block = model[arg % len(model)]
            queue.remove(block)
            model.remove(block)
        elif op == "R" and model:  # a prompt's hits on free blocks, at once
            blocks = model[arg % len(model) :][:3]
            queue.remove_many(blocks)
            model = [b for b in model if b not in blocks]
        assert list(queue) == model and len(queue) == len(model)
        queue.check([0 if b in model else 1 for b in range(num_blocks)])


pool_ops = st.lists(st.tuples(st.sampled_from("aAtdcfe"), st.integers(0, 11)), max_size=80)


@settings(max_examples=150, deadline=None)
@given(ops=pool_ops, compact_after=st.sampled_from([0, 2, 4096]))
def test_a_v1_pool_reuses_blocks_in_v1s_order(
    ops: list[tuple[str, int]], compact_after: int
) -> None:
    # V1 (v1/core/kv_cache_utils.py FreeKVCacheBlockQueue): allocation takes the head, a freed
    # block goes to the tail, a hit takes a free block out, cached or not all in one order.
    with pytest.MonkeyPatch.context() as patch:  # the queue's compaction too
        patch.setattr(lru_queue, "COMPACT_AFTER", compact_after)
        check_a_v1_pool(ops)


def check_a_v1_pool(ops: list[tuple[str, int]]) -> None:
    num_blocks = 8
    pool = BlockPool(num_blocks, eviction=EvictionOrder.LRU, allow_duplicates=True)
    order = list(range(num_blocks))  # the model: free blocks, least recently freed first
    refs: dict[int, int] = {}
    for op, arg in ops:
        held = sorted(refs)
        if op == "a" and order:
            block = pool.allocate()
            assert block == order.pop(0)
            refs[block] = 1
        elif op == "A" and order:
            count = arg % len(order) + 1
            assert pool.allocate_many(count) == order[:count]
            for block in order[:count]:
                refs[block] = 1
            del order[:count]
        elif op == "t" and pool.lookup(arg) is not None:
            block = pool.lookup(arg)
            assert block is not None
            pool.touch(block)
            if block in order:
                order.remove(block)
            refs[block] = refs.get(block, 0) + 1
        elif op == "d" and held:
            block = held[arg % len(held)]
            refs[block] -= 1
            pool.decref(block)
            if not refs[block]:
                del refs[block]
                order.append(block)
        elif op == "f" and held:  # a finished sequence's unshared blocks, at once
            blocks = [b for b in held if refs[b] == 1][: arg % 4 + 1]
            assert pool.free_table(blocks[::-1])  # freed in the order of `blocks`
            for block in blocks:
                del refs[block]
            order.extend(blocks)
        elif op == "c" and held:
            block = held[arg % len(held)]
            if pool.block_hash(block) is None:
                pool.cache_block(block, arg)
        elif op == "e":
            pool.evict_one()  # drops a hash; the block keeps its place
        pool.check_invariants()
        assert pool.num_free_blocks == len(order) and pool.num_used_blocks == len(refs)

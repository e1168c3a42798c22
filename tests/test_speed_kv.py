"""The KV cache's hot-path methods do exactly what the general ones do.

`append_one_slot` and `commit_one` are what the schedulers call for a decoding sequence every step;
`append_slots(seq, 1)` and `commit(seq, computed + 1)` are the general, validated operations. Two
caches driven by the same random story, one through each, must agree on every block id, counter
and memory breakdown after every step.
"""

from __future__ import annotations

import random

import pytest

from pagesim.simulator.core.errors import KVCacheError
from pagesim.simulator.kv.paged_cache import PagedKVCache


def _state(cache: PagedKVCache, final_lens: dict[int, int]) -> tuple[object, ...]:
    tables = {s: cache.block_table(s) for s in cache.seq_ids()}
    counts = {s: (cache.num_tokens(s), cache.num_computed_tokens(s)) for s in cache.seq_ids()}
    return tables, counts, cache.num_free_blocks, cache.memory_breakdown(final_lens)


@pytest.mark.parametrize("seed", range(20))
def test_fast_decode_methods_match_the_general_ones(seed: int) -> None:
    rng = random.Random(seed)
    block_size = rng.choice([1, 2, 4, 16])
    fast, slow = (PagedKVCache(40, block_size) for _ in range(2))
    final_lens: dict[int, int] = {}
    next_id = 0
    for _ in range(300):
        live = list(fast.seq_ids())
        action = rng.random()
        if action < 0.15 or not live:
            seq_id, next_id = next_id, next_id + 1
            prompt = rng.randint(1, 3 * block_size)
            for cache in (fast, slow):
                cache.add_seq(seq_id)
                if cache.can_append(seq_id, prompt):
                    cache.append_slots(seq_id, prompt)
                    cache.commit(seq_id, prompt)
                else:
                    cache.free(seq_id)
            if fast.has_seq(seq_id):
                final_lens[seq_id] = prompt + rng.randint(0, 3 * block_size)
        elif action < 0.25:
            parent = rng.choice(live)
            child, next_id = next_id, next_id + 1
            for cache in (fast, slow):
                cache.fork(parent, child)
            final_lens[child] = final_lens[parent]
        elif action < 0.35:
            seq_id = rng.choice(live)
            for cache in (fast, slow):
                cache.free(seq_id)
            del final_lens[seq_id]
        else:
            seq_id = rng.choice(live)
            grown = fast.append_one_slot(seq_id)
            assert grown == (
                slow.num_blocks_needed(seq_id, 1) == 0
                or (
                    slow.num_blocks_needed(seq_id, 1) == 1
                    and slow.num_free_blocks >= 1
                    and slow.num_tokens(seq_id) % block_size == 0
                )
            )
            if not grown:
                if slow.num_blocks_needed(seq_id, 1) > slow.num_free_blocks:
                    continue
                fast.append_slots(seq_id, 1)  # the general path, as the scheduler falls back
            slow.append_slots(seq_id, 1)
            fast.commit_one(seq_id)
            slow.commit(seq_id, slow.num_computed_tokens(seq_id) + 1)
            final_lens[seq_id] = max(final_lens[seq_id], fast.num_tokens(seq_id))
        fast.check_invariants()
        assert _state(fast, final_lens) == _state(slow, final_lens)


def test_commit_one_refuses_a_slot_never_appended() -> None:
    cache = PagedKVCache(4, 4)
    cache.add_seq(0)
    cache.append_slots(0, 3)
    cache.commit(0, 3)
    with pytest.raises(KVCacheError, match="commit of one more"):
        cache.commit_one(0)
    with pytest.raises(KVCacheError, match="unknown seq"):
        cache.commit_one(7)


@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_advance_decoded_is_that_many_one_token_steps(block_size: int) -> None:
    fast, slow = (PagedKVCache(12, block_size) for _ in range(2))
    for cache in (fast, slow):
        cache.add_seq(0)
        cache.append_slots(0, 5)
        cache.commit(0, 5)
    steps = -5 % block_size
    fast.advance_decoded(0, steps)
    for _ in range(steps):
        assert slow.append_one_slot(0)
        slow.commit_one(0)
    fast.check_invariants()
    assert _state(fast, {0: 40}) == _state(slow, {0: 40})
    with pytest.raises(KVCacheError, match="cannot advance"):
        fast.advance_decoded(0, 1)  # a new block is needed: not in place


def test_advance_decoded_refuses_a_shared_last_block() -> None:
    cache = PagedKVCache(8, 4)
    cache.add_seq(0)
    cache.append_slots(0, 2)
    cache.commit(0, 2)
    cache.fork(0, 1)
    with pytest.raises(KVCacheError, match="cannot advance"):
        cache.advance_decoded(0, 1)


def test_bulk_block_operations_match_one_by_one() -> None:
    from pagesim.simulator.kv.block_pool import BlockPool

    bulk, single = BlockPool(10), BlockPool(10)
    assert bulk.allocate_many(6) == [single.allocate() for _ in range(6)] == [0, 1, 2, 3, 4, 5]
    assert bulk.free_unshared([4, 2, 0])
    for block in (4, 2, 0):
        single.decref(block)
    assert bulk.allocate_many(7) == [single.allocate() for _ in range(7)]
    bulk.check_invariants()
    assert bulk.num_used_blocks == single.num_used_blocks == 10


def test_free_unshared_leaves_shared_or_cached_blocks_to_decref() -> None:
    from pagesim.simulator.kv.block_pool import BlockPool

    pool = BlockPool(4)
    a, b = pool.allocate_many(2)
    pool.incref(b)
    assert not pool.free_unshared([b, a])
    pool.decref(b)
    pool.cache_block(a, 99)
    assert not pool.free_unshared([b, a])
    assert pool.free_unshared([b]) and pool.num_used_blocks == 1
    pool.check_invariants()

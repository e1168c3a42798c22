"""The KV cache's hot paths do exactly what the general ones do.

`allocate_slots([seq], 1)` (a lone decode: a few operations) and `commit_one` are what the
schedulers call for a decoding sequence every step; `allocate_slots([seq], [1])` (a count per
sequence: the general, validated path) and `commit(seq, computed + 1)` are the general
operations. Two caches driven by the same random story, one through each, must agree on every
block id, counter and memory breakdown after every step.
"""

from __future__ import annotations

import random

import pytest

from pagesim.simulator.core.errors import KVCacheError
from pagesim.simulator.kv.block_pool import EvictionOrder
from pagesim.simulator.kv.paged_cache import PagedKVCache


def _state(cache: PagedKVCache) -> tuple[object, ...]:
    tables = {s: cache.block_table(s) for s in cache.seq_ids()}
    counts = {s: (cache.num_tokens(s), cache.num_computed_tokens(s)) for s in cache.seq_ids()}
    return tables, counts, cache.num_free_blocks, cache.memory_breakdown()


@pytest.mark.parametrize("seed", range(20))
def test_fast_decode_paths_match_the_general_ones(seed: int) -> None:
    rng = random.Random(seed)
    block_size = rng.choice([1, 2, 4, 16])
    fast, slow = (PagedKVCache(40, block_size) for _ in range(2))
    final_lens: dict[int, int] = {}
    next_id = 0
    num_decodes = 0
    for _ in range(300):
        live = list(fast.seq_ids())
        action = rng.random()
        if action < 0.15 or not live:
            seq_id, next_id = next_id, next_id + 1
            prompt = rng.randint(1, 3 * block_size)
            final_len = prompt + rng.randint(0, 3 * block_size)
            for cache in (fast, slow):
                cache.add_seq(seq_id, final_len=final_len)
                if cache.allocate_slots([seq_id], prompt) is not None:
                    cache.commit(seq_id, prompt)
                else:
                    cache.free(seq_id)
            if fast.has_seq(seq_id):
                final_lens[seq_id] = final_len
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
            if fast.num_tokens(seq_id) >= final_lens[seq_id]:
                continue  # it finished growing
            copies = fast.allocate_slots([seq_id], 1)
            assert copies == slow.allocate_slots([seq_id], [1])
            if copies is None:
                continue
            num_decodes += 1
            fast.commit_one(seq_id)
            slow.commit(seq_id, slow.num_computed_tokens(seq_id) + 1)
        fast.check_invariants()
        assert _state(fast) == _state(slow)
    assert num_decodes > 10  # the story did decode


def test_commit_one_refuses_a_slot_never_appended() -> None:
    cache = PagedKVCache(4, 4)
    cache.add_seq(0)
    cache.allocate_slots([0], 3)
    cache.commit(0, 3)
    with pytest.raises(KVCacheError, match="commit of one more"):
        cache.commit_one(0)
    with pytest.raises(KVCacheError, match="unknown seq"):
        cache.commit_one(7)


def test_bulk_block_operations_match_one_by_one() -> None:
    from pagesim.simulator.kv.block_pool import BlockPool

    bulk, single = BlockPool(10), BlockPool(10)
    assert bulk.allocate_many(6) == [single.allocate() for _ in range(6)] == [0, 1, 2, 3, 4, 5]
    assert bulk.free_table([0, 2, 4])  # freed tail first: 4, 2, 0
    for block in (4, 2, 0):
        single.decref(block)
    assert bulk.allocate_many(7) == [single.allocate() for _ in range(7)]
    bulk.check_invariants()
    assert bulk.num_used_blocks == single.num_used_blocks == 10


def test_free_table_leaves_shared_blocks_to_decref_and_keeps_cached_ones_findable() -> None:
    from pagesim.simulator.kv.block_pool import BlockPool

    pool = BlockPool(4)
    a, b = pool.allocate_many(2)
    pool.incref(b)
    assert not pool.free_table([a, b])  # b is shared: nothing changes, a's reference kept
    assert pool.num_used_blocks == 2 and pool.ref_counts == [1, 2, 0, 0]
    pool.check_invariants()
    pool.decref(b)
    pool.cache_block(a, 99)
    assert pool.free_table([a, b])  # a cached block goes to the evictable queue, findable
    assert pool.num_used_blocks == 0 and pool.lookup(99) == a
    assert pool.num_evictable_blocks == 1
    pool.check_invariants()


def _v1_cache(num_blocks: int, block_size: int) -> PagedKVCache:
    return PagedKVCache(
        num_blocks,
        block_size,
        enable_prefix_cache=True,
        eviction=EvictionOrder.LRU,
        allow_duplicate_hashes=True,
    )


@pytest.mark.parametrize("prefix_cache", [False, True])
@pytest.mark.parametrize("seed", range(20))
def test_append_blocks_is_allocate_slots_entry_by_entry(seed: int, prefix_cache: bool) -> None:
    """A run's crossing members over several steps (a sequence may come again), a block each:
    one allocation, the same blocks in the same order as one `allocate_slots` an entry. With
    vLLM V1's prefix cache, the free blocks taken are cached ones whose hashes go."""
    rng = random.Random(seed)
    block_size = rng.choice([1, 4, 16])
    num_blocks = 200
    if prefix_cache:
        bulk, one_by_one = (_v1_cache(num_blocks, block_size) for _ in range(2))
        for cache in (bulk, one_by_one):  # every block cached, then freed: all evictable
            cache.add_seq(99, final_len=num_blocks * block_size)
            assert cache.allocate_slots([99], num_blocks * block_size) is not None
            cache.commit(99, num_blocks * block_size, range(1000, 1000 + num_blocks))
            cache.free(99)
    else:
        bulk, one_by_one = (PagedKVCache(num_blocks, block_size) for _ in range(2))
    prompts = [rng.randint(1, 3 * block_size) for _ in range(6)]
    for cache in (bulk, one_by_one):
        for seq_id, prompt in enumerate(prompts):
            cache.add_seq(seq_id, final_len=1000)
            assert cache.allocate_slots([seq_id], prompt) is not None
    tables = {s: len(bulk.block_table(s)) for s in range(6)}
    seq_ids, tokens = [], []
    for _ in range(rng.randint(0, 12)):
        seq_id = rng.randrange(6)
        tokens.append(tables[seq_id] * block_size + rng.randint(1, block_size))  # a block more
        tables[seq_id] += 1
        seq_ids.append(seq_id)
    bulk.append_blocks(seq_ids, tokens)
    for seq_id, count in zip(seq_ids, tokens, strict=True):
        before = one_by_one.num_free_blocks
        growth = count - one_by_one.num_tokens(seq_id)
        assert one_by_one.allocate_slots([seq_id], growth) == ()
        assert before - one_by_one.num_free_blocks == 1
    assert _state(bulk) == _state(one_by_one)
    if prefix_cache:  # the blocks taken lost their hashes, the same ones on both sides
        hashes = [bulk.block_hash(b) for b in range(num_blocks)]
        assert hashes == [one_by_one.block_hash(b) for b in range(num_blocks)]
        taken = {b for s in bulk.seq_ids() for b in bulk.block_table(s)}
        assert all((hashes[b] is None) == (b in taken) for b in range(num_blocks))
        bulk.check_invariants()


def test_append_blocks_refuses_what_is_not_a_block_each() -> None:
    cache = PagedKVCache(4, 4)
    for seq_id in (0, 1):
        cache.add_seq(seq_id, final_len=100)
        assert cache.allocate_slots([seq_id], 4) is not None
    before = _state(cache)
    with pytest.raises(KVCacheError, match="3 blocks asked for, 2 free"):
        cache.append_blocks([0, 1, 0], [5, 5, 9])
    assert _state(cache) == before  # nothing changed
    with pytest.raises(AssertionError, match="not one new block"):
        cache.append_blocks([0], [9])  # 4 -> 9 slots: two blocks
    cache = PagedKVCache(8, 4)
    cache.add_seq(1, final_len=100)
    assert cache.allocate_slots([1], 5) is not None  # its last block holds 1 of 4 slots
    cache.commit(1, 5)
    cache.fork(1, 2)  # now shared: a write into it needs a copy first
    with pytest.raises(AssertionError, match="not one new block"):
        cache.append_blocks([1], [9])


@pytest.mark.parametrize("seed", range(40))
def test_free_table_is_decref_many_of_the_reversed_table(seed: int) -> None:
    """`free_table(table, n)` (a finished sequence's free, the set of its first n blocks never
    built) leaves the pool as `decref_many(table[::-1], frozenset(table[:n]))` does, in every
    eviction order, with hashed blocks among the table or elsewhere in the pool."""
    from pagesim.simulator.kv.block_pool import BlockPool

    rng = random.Random(seed)
    options = dict(
        eviction=rng.choice(list(EvictionOrder)),
        allow_duplicates=rng.random() < 0.5,
        reuse_unhashed_first=rng.random() < 0.7,
    )
    pools = [BlockPool(24, **options) for _ in range(2)]  # type: ignore[arg-type]
    for pool in pools:  # the same story on both: a few blocks freed, some of them hashed
        blocks = pool.allocate_many(20)
        for i, block in enumerate(blocks[:6]):
            if i % 2 or seed % 3 == 0:
                pool.cache_block(block, 1000 + i)
        pool.free_table(blocks[:6])
    if rng.random() < 0.4:  # a hit on a free cached block: V1's queue keeps a stale entry
        for pool in pools:
            pool.touch(blocks[1])
    table = pools[0].allocate_many(rng.randint(0, 9))
    assert pools[1].allocate_many(len(table)) == table
    # hashed blocks here and there, or a hashed prefix (a preempted request's registered
    # blocks, then those it took since: split in two slices)
    num_prefix = rng.randint(0, len(table)) if rng.random() < 0.4 else 0
    for i, block in enumerate(table):
        if i < num_prefix or (not num_prefix and rng.random() < 0.3):
            for pool in pools:
                pool.cache_block(block, 2000 + i)
    num_hashed_like = rng.randint(0, len(table))
    if table and rng.random() < 0.5:  # one block past them: a private request's, the usual
        num_hashed_like = len(table) - 1
    if rng.random() < 0.3:  # a block outside the table shared: each of the table's is tested
        for pool in pools:
            pool.incref(blocks[10])
    if rng.random() < 0.2 and table:  # shared: neither frees anything
        for pool in pools:
            pool.incref(table[0])
    slot_counts = [7] * 24  # the caller's per-block counts: the table's zeroed on success
    # a private sequence's table holds no hash, and its caller says so (the hashed free
    # blocks' count then looks at none of it): the audit below checks that count
    hashless = all(pools[0].block_hash(b) is None for b in table) and rng.random() < 0.5
    if pools[0].free_table(table, num_hashed_like, slot_counts, hashless=hashless):
        freed = pools[1].decref_many(table[::-1], frozenset(table[:num_hashed_like]))
        assert freed == table[::-1]
        assert slot_counts == [0 if b in table else 7 for b in range(24)]
    else:  # shared: nothing changed; the general way frees the rest
        assert table and pools[0].ref_count(table[0]) == 2
        assert slot_counts == [7] * 24
        for pool in pools:
            pool.decref_many(table[::-1], frozenset(table[:num_hashed_like]))
    for pool in pools:
        pool.check_invariants()
    assert pools[0].allocate_many(pools[0].num_free_blocks) == pools[1].allocate_many(
        pools[1].num_free_blocks
    )
    for pool in pools:  # every hashed block taken lost its hash, counted
        pool.check_invariants()


def test_the_audit_counts_the_free_blocks_that_hold_a_hash() -> None:
    """The pool's count of free hashed blocks (which lets V1's `allocate_many` skip looking at
    hashes while it is 0) is audited: a table said to be hashless that holds a hash leaves it
    one short, and the audit says so."""
    from pagesim.simulator.kv.block_pool import BlockPool

    pool = BlockPool(8, eviction=EvictionOrder.LRU, reuse_unhashed_first=True)
    table = pool.allocate_many(3)
    pool.cache_block(table[0], 5)
    assert pool.free_table(table, 2, hashless=True)  # wrong: table[0] holds a hash
    with pytest.raises(AssertionError, match="free blocks holding a hash"):
        pool.check_invariants()


@pytest.mark.parametrize("lru", [True, False])
@pytest.mark.parametrize("seed", range(15))
def test_refuse_hits_is_add_seq_then_free(seed: int, lru: bool) -> None:
    """A refused admission whose prefix hits are all free blocks (policies/admission.py): the
    hits looked up and requeued (`prefix_hits`, `refuse_hits`) leave the cache as adding the
    sequence and freeing it again: counters, memory, hashes and the free order (every block
    allocated afterwards, in order)."""
    rng = random.Random(seed)
    block_size = rng.choice([1, 4, 16])
    num_blocks = 60

    def cache_of() -> PagedKVCache:
        return PagedKVCache(
            num_blocks,
            block_size,
            enable_prefix_cache=True,
            eviction=EvictionOrder.LRU if lru else EvictionOrder.PLAIN_FIRST,
            allow_duplicate_hashes=lru,
            reuse_unhashed_first=lru and rng.random() < 0.5,
        )

    state = rng.getstate()
    caches = []
    for _ in range(2):  # the same story on both: cached sequences freed, one still running
        rng.setstate(state)
        cache = cache_of()
        _commit_four(cache, rng, block_size)
        for seq_id in rng.sample(range(3), 3):
            cache.free(seq_id)
        caches.append(cache)
    hashes = list(range(100 * rng.randrange(4), 100 * rng.randrange(4) + 6))
    num_prompt_tokens = rng.randint(1, 8 * block_size)
    looked_up, added = caches
    hits = looked_up.prefix_hits(hashes, num_prompt_tokens)
    if not looked_up.are_free(hits):
        return  # a hit on the running sequence's block: admission goes the whole way
    looked_up.refuse_hits(hits, num_prompt_tokens)
    assert added.add_seq(9, hashes, num_prompt_tokens) == len(hits) * block_size
    added.free(9)
    for cache in caches:
        cache.check_invariants()
    assert looked_up.num_prefix_query_tokens == added.num_prefix_query_tokens
    assert looked_up.num_prefix_hit_tokens == added.num_prefix_hit_tokens
    assert _state(looked_up) == _state(added)
    assert [looked_up.block_hash(b) for b in range(num_blocks)] == [
        added.block_hash(b) for b in range(num_blocks)
    ]
    for cache in caches:
        cache.add_seq(10)
    rest = looked_up.num_free_blocks * block_size
    assert looked_up.allocate_slots([10], rest) == added.allocate_slots([10], rest)
    assert looked_up.block_table(10) == added.block_table(10)


def _commit_four(cache: PagedKVCache, rng: random.Random, block_size: int) -> None:
    """Sequences 0-3, each 1-4 full blocks and a random part of one more, computed and committed
    under block hashes 100 * id, 100 * id + 1, ..."""
    for seq_id in range(4):
        num_tokens = rng.randint(1, 4) * block_size + rng.randint(0, block_size - 1)
        cache.add_seq(seq_id, final_len=num_tokens)
        assert cache.allocate_slots([seq_id], num_tokens) is not None
        cache.commit(seq_id, num_tokens, range(100 * seq_id, 100 * seq_id + 10))


@pytest.mark.parametrize("seed", range(20))
def test_hits_ending_the_free_order_are_taken_last_the_last_first(seed: int) -> None:
    """`ends_free_order` (a refused head's run of pure steps, fastpath/decode_window.py): right
    after `refuse_hits`, and only while nothing was freed since, the hits end the free order;
    then blocks taken one by one reach them only once the other free blocks are gone, and each
    one taken leaves the hits one shorter (the last hit goes first)."""
    rng = random.Random(seed)
    block_size = rng.choice([1, 4, 16])
    cache = PagedKVCache(
        60,
        block_size,
        enable_prefix_cache=True,
        eviction=EvictionOrder.LRU,
        allow_duplicate_hashes=True,
    )
    _commit_four(cache, rng, block_size)
    for seq_id in rng.sample(range(3), 2):
        cache.free(seq_id)
    hashes = list(range(100 * rng.randrange(3), 100 * rng.randrange(3) + 6))
    num_prompt_tokens = 8 * block_size
    hits = cache.prefix_hits(hashes, num_prompt_tokens)
    if not hits or not cache.are_free(hits):
        return
    cache.refuse_hits(hits, num_prompt_tokens)
    assert cache.ends_free_order(hits)
    if rng.random() < 0.5:  # a block freed after the refusal lands behind the hits
        last = next(s for s in range(3) if cache.has_seq(s))
        cache.free(last)
        assert not cache.ends_free_order(hits)
        return
    spare = cache.num_free_blocks - len(hits)
    cache.add_seq(9)
    for taken in range(1, cache.num_free_blocks + 1):
        assert cache.allocate_slots([9], block_size) is not None  # one block more
        left = len(hits) - max(0, taken - spare)
        assert cache.prefix_hits(hashes, num_prompt_tokens) == hits[:left]
        assert cache.ends_free_order(hits[:left])


@pytest.mark.parametrize("commits_first", [True, False])
def test_a_block_cached_before_its_kv_and_hit_by_a_refused_admission_counts_once(
    commits_first: bool,
) -> None:
    # V1 caches seq 1's two blocks as it takes them (cache_blocks); seq 2, admitted in the same
    # step, hits both (counting them full) and is refused (freed). Seq 1 then computes them,
    # or is freed first: either way the computed-slot count is each block's, not the sum of
    # what the sequences thought (commit's and free's shortcuts must not apply here).
    kv = PagedKVCache(8, 4, enable_prefix_cache=True, eviction=EvictionOrder.LRU)
    kv.add_seq(1, final_len=8)
    assert kv.allocate_slots([1], 8) == ()
    kv.cache_blocks(1, 8, [11, 12])
    assert kv.add_seq(2, [11, 12], 9, final_len=9) == 8
    kv.free(2)
    if commits_first:
        kv.commit(1, 8)
        kv.check_invariants()
        assert kv.memory_breakdown().token_slots == 8
    kv.free(1)
    kv.check_invariants()
    assert kv.memory_breakdown().token_slots == 0


@pytest.mark.parametrize("then", ["fork", "register", "swap", "free"])
def test_a_private_sequences_full_blocks_are_counted_once_it_may_share_them(then: str) -> None:
    # Seq 1 (no hit, nothing registered) computes 2.5 blocks in three commits: its full blocks
    # keep no per-block count (BlockTable.slots_kept), its totals do. Forked, registered or
    # swapped out, every block's count is written (check_invariants compares them with the
    # tables); freed, they all go. The breakdown is the walked one throughout.
    kv = PagedKVCache(8, 4, num_cpu_blocks=8, enable_prefix_cache=True)
    kv.add_seq(1, final_len=12)
    assert kv.allocate_slots([1], 10) == ()
    for computed in (3, 5, 10):
        kv.commit(1, computed)
        kv.check_invariants()
        assert kv.memory_breakdown() == kv.walk_memory_breakdown()
    if then == "fork":
        kv.fork(1, 2)
    elif then == "register":
        kv.cache_blocks(1, 10, [11, 12])
    elif then == "swap":
        assert kv.swap_out([1]) == 3
        kv.check_invariants()
        assert kv.swap_in([1]) == 3
    else:
        kv.free(1)
    kv.check_invariants()
    assert kv.memory_breakdown() == kv.walk_memory_breakdown()
    assert kv.memory_breakdown().token_slots == (0 if then == "free" else 10)

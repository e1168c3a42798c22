"""Hybrid block tables: a narrative with exact block ids, then random hybrid models driven
through prefill chunks, decodes and frees: no leak, and no window group above its bound."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.simulator.core.catalog import get_model
from pagesim.simulator.kv.block_pool import BlockPool
from pagesim.simulator.kv.window_blocks import (
    HybridBlockTables,
    KVGroup,
    kv_groups,
    max_window_blocks,
)


def test_blocks_wholly_out_of_the_window_are_freed_as_vllm_does() -> None:
    pool = BlockPool(12)
    tables = HybridBlockTables(pool, [KVGroup(None), KVGroup(5)], block_size=4)
    assert tables.allocate(7, 0, 13)  # a 13-token prompt: 4 blocks in each group
    assert tables._tables[7] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # the next step has 13 tokens computed: last_useful_token = 13 - 5 + 1 = 9 -> block 2,
    # so the window group frees blocks 0 and 1 (ids 5 then 4: nearest the window first).
    assert tables.allocate(7, 13, 1)
    assert tables._tables[7] == [[0, 1, 2, 3], [None, None, 6, 7]]
    assert pool.num_free_blocks == 12 - 6
    tables.check_invariants()
    tables.free(7)
    assert pool.num_free_blocks == 12
    tables.check_invariants()


def test_a_short_pool_refuses_but_still_frees_what_left_the_window() -> None:
    pool = BlockPool(6)
    tables = HybridBlockTables(pool, [KVGroup(None), KVGroup(4)], block_size=2)
    assert tables.allocate(1, 0, 6)  # 3 blocks per group: the pool is full
    assert not tables.allocate(1, 6, 2)  # needs 2 more; the window group freed 1, not enough
    assert tables.blocks_held(1, 1) == 2 and pool.num_free_blocks == 1
    tables.check_invariants()


def test_catalog_models_group_their_layers_without_padding() -> None:
    groups, size = kv_groups(get_model("gemma-3-27b"))  # 10 full, 52 sliding: gcd 2
    assert size == 2 and len(groups) == 31
    assert sum(g.window is None for g in groups) == 5
    groups, size = kv_groups(get_model("gpt-oss-120b"))  # 18 and 18
    assert (len(groups), size) == (2, 18)
    groups, size = kv_groups(get_model("llama-3.1-8b"))  # all full: one group of 32
    assert (groups, size) == ((KVGroup(None),), 32)


# A random hybrid model: some full groups, some window groups, random windows and block size.
models = st.tuples(
    st.integers(0, 2),  # full groups
    st.lists(st.integers(1, 40), min_size=1, max_size=3),  # one window per window group
    st.integers(1, 8),  # block size
)
# A program: per request, a prompt in chunks then some decodes, then a free (or not).
programs = st.lists(
    st.tuples(
        st.lists(st.integers(1, 30), min_size=1, max_size=3),  # prefill chunks
        st.integers(0, 40),  # decode steps
        st.booleans(),  # freed at the end of its turn
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(models, programs, st.integers(20, 200))
def test_random_hybrid_models_never_leak_and_windows_stay_bounded(
    model: tuple[int, list[int], int],
    program: list[tuple[list[int], int, bool]],
    num_blocks: int,
) -> None:
    num_full, windows, block_size = model
    groups = [KVGroup(None)] * num_full + [KVGroup(w) for w in windows]
    pool = BlockPool(num_blocks)
    tables = HybridBlockTables(pool, groups, block_size)
    kept: list[int] = []
    for request_id, (chunks, num_decodes, is_freed) in enumerate(program):
        computed = 0
        for num_new in chunks + [1] * num_decodes:
            if not tables.allocate(request_id, computed, num_new):
                break  # the pool is short: a scheduler would preempt; the cache stays sound
            computed += num_new
            tables.check_invariants()
            for index, group in enumerate(groups):
                held = tables.blocks_held(request_id, index)
                if group.window is None:
                    assert held == -(-computed // block_size)
                else:
                    assert held <= max_window_blocks(group.window, num_new, block_size)
        if is_freed:
            tables.free(request_id)
        else:
            kept.append(request_id)
        tables.check_invariants()
    for request_id in kept:
        tables.free(request_id)
    tables.check_invariants()
    assert pool.num_used_blocks == 0 and pool.num_free_blocks == num_blocks

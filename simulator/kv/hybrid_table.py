"""One request's record in the hybrid KV cache (its per-group block tables and slot counts),
and the prefix-cache hit search over them (vLLM V1 v0.11 `find_longest_cache_hit`:
`FullAttentionManager`, `SlidingWindowManager`, `HybridKVCacheCoordinator`). Plain data and
pure lookups: `HybridKVCache` (hybrid_cache.py) changes them, `hybrid_audit` checks them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import islice

from pagesim.simulator.kv.block_pool import BlockPool
from pagesim.simulator.kv.hybrid_layout import HybridLayout

Bundle = list[int]  # one logical block's block in each group of a kind


@dataclass(slots=True)
class HybridSeq:
    full: list[Bundle]  # logical block i -> its block in each full group
    sliding: list[Bundle | None]  # ... in each sliding group; None: freed out of the window
    state: list[int]  # one block per state group, from the first allocation
    num_tokens: int
    num_computed_tokens: int
    num_registered_blocks: int
    final_len: int | None
    num_last_new_tokens: int = 0  # what the last allocation added (bounds the window's blocks)
    is_swapped: bool = field(default=False)  # never: V1 recomputes


def blocks_at(seq: HybridSeq, i: int) -> list[int]:
    """The live blocks of logical block i of `seq`, full groups first."""
    blocks = list(seq.full[i]) if seq.full else []
    bundle = seq.sliding[i] if seq.sliding else None
    if bundle is not None:
        blocks += bundle
    return blocks


def group_key(block_hash: int, group: int) -> int:
    """The cache key of a block of `group` holding the content `block_hash` (vLLM's
    BlockHashWithGroupId): the same prompt block is a different entry in each group."""
    return hash((block_hash, group))


def cached_bundle(
    pool: BlockPool, block_hash: int, first_group: int, num_groups: int
) -> Bundle | None:
    """The cached block of each of the groups, or None unless every one is cached (vLLM's
    `get_cached_block(block_hash, kv_cache_group_ids)`)."""
    blocks = []
    for g in range(first_group, first_group + num_groups):
        block = pool.lookup(group_key(block_hash, g))
        if block is None:
            return None
        blocks.append(block)
    return blocks


def find_longest_hit(
    pool: BlockPool, layout: HybridLayout, block_hashes: Sequence[int], max_blocks: int
) -> tuple[list[Bundle], list[Bundle | None]]:
    """The cached blocks a prompt may take, per kind: the full groups' leading run (at most
    `max_blocks`); within it, the sliding groups' rightmost cdiv(W - 1, B) contiguous cached
    blocks, nulls before them (or, if no run is that long, their leading run); the full run cut
    to the sliding hit's length. Nothing is touched."""
    num_full, num_sliding = layout.num_full_groups, layout.num_sliding_groups
    full: list[Bundle] = []
    if num_full:
        for block_hash in islice(block_hashes, max_blocks):
            bundle = cached_bundle(pool, block_hash, 0, num_full)
            if bundle is None:
                break
            full.append(bundle)
        max_blocks = len(full)
    if not num_sliding:
        return full, []
    needed = layout.num_window_blocks
    run: list[Bundle] = []  # contiguous cached bundles from i rightwards, rightmost first
    start = 0
    for i in range(max_blocks - 1, -1, -1):
        bundle = cached_bundle(pool, block_hashes[i], num_full, num_sliding)
        if bundle is None:
            run = []
            continue
        run.append(bundle)
        if len(run) >= needed:
            start = i
            break
    # (No run long enough: `run` is the leading run, maybe empty, and start stays 0.)
    sliding: list[Bundle | None] = [None] * start
    sliding.extend(reversed(run))
    del full[len(sliding) :]
    return full, sliding

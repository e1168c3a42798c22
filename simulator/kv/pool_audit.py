"""A block pool's audit (kv/block_pool.py): an O(blocks) walk that recounts its bookkeeping, for
tests and checks; and `invariant`, the assertion every audit of the KV layer uses.

The pool passes its parts in (`BlockPool.check_invariants`), as the paged cache does to
kv/paged_audit.py: the audit reads them and changes nothing. The per-block loops are left to C
where they can be: a CPU swap pool is large and mostly idle.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import NamedTuple

from pagesim.simulator.kv.lru_queue import LruQueue


class PoolParts(NamedTuple):
    """A pool's state as kv/block_pool.py keeps it (its docstring says what each holds)."""

    ref_counts: list[int]
    hashes: list[int | None]
    free: deque[int]  # plain-first: uncached free blocks
    evictable: OrderedDict[int, None]  # plain-first: cached free blocks
    lru: LruQueue  # LRU: every free block
    first_of_hash: dict[int, int]
    later_of_hash: dict[int, dict[int, None]]
    fork_shares: list[int]
    num_used: int
    num_fork_shares: int
    num_prefix_shares: int
    num_free_hashed: int
    is_lru: bool
    allow_duplicates: bool


def invariant(condition: bool, message: str) -> None:
    """Like assert, but kept under `python -O`: invariant checks are what tests run."""
    if not condition:
        raise AssertionError(message)


def check_pool_invariants(pool: PoolParts) -> None:
    """Raise AssertionError if the pool's bookkeeping is inconsistent (O(num_blocks))."""
    refs, hashes, free, evictable = pool.ref_counts, pool.hashes, pool.free, pool.evictable
    num_blocks = len(refs)
    invariant(not refs or min(refs) >= 0, "negative ref_count")
    num_used = num_blocks - refs.count(0)
    invariant(num_used == pool.num_used, "used counter disagrees with ref_counts")
    invariant(len(set(free)) == len(free), "a block is twice in the free list")
    invariant(
        len(free) + len(evictable) + len(pool.lru) + num_used == num_blocks,
        "free + evictable + used != total",
    )
    if pool.is_lru:
        invariant(not free and not evictable, "LRU: a free block outside _lru")
        pool.lru.check(refs)
    else:
        invariant(not len(pool.lru), "plain-first: a block in the LRU queue")
    if sum(map(refs.__getitem__, free)) or set(map(hashes.__getitem__, free)) - {None}:
        block = next(b for b in free if refs[b] or hashes[b] is not None)
        raise AssertionError(f"free block {block} is referenced or holds a hash")
    if sum(map(refs.__getitem__, evictable)):
        block = next(b for b in evictable if refs[b])
        raise AssertionError(f"evictable block {block} is referenced")
    if not pool.is_lru:
        for block in evictable:
            invariant(hashes[block] is not None, f"evictable block {block} has no hash")
    num_mapped = len(pool.first_of_hash)
    for block_hash, block in pool.first_of_hash.items():
        invariant(hashes[block] == block_hash, f"hash {block_hash} -> block {block}")
    for block_hash, later in pool.later_of_hash.items():
        invariant(bool(later), f"hash {block_hash} keeps an empty list of copies")
        invariant(pool.allow_duplicates, f"hash {block_hash}: copies")
        invariant(block_hash in pool.first_of_hash, f"hash {block_hash}: copies, no first")
        for block in later:
            invariant(hashes[block] == block_hash, f"hash {block_hash} -> block {block}")
        num_mapped += len(later)
    num_hashed = num_blocks - hashes.count(None)
    invariant(num_hashed == num_mapped, "a block holds a hash not in the map")
    num_free_hashed = sum(not r and h is not None for r, h in zip(refs, hashes, strict=True))
    invariant(
        num_free_hashed == pool.num_free_hashed, "free blocks holding a hash: counter disagrees"
    )
    forks = pool.fork_shares
    invariant(sum(forks) == pool.num_fork_shares, "fork shares disagree with their total")
    if pool.num_fork_shares:
        invariant(
            all(f <= max(0, r - 1) for f, r in zip(forks, refs, strict=True)),
            "a block has more fork shares than references beyond its first",
        )
    invariant(
        sum(refs) - num_used == pool.num_fork_shares + pool.num_prefix_shares,
        "saved copies (references beyond each block's first) disagree with their causes",
    )

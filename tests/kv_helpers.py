"""Token-level references for the KV tests: the prefix hashes a real engine would compute from
token ids, which the simulator's SequenceHasher (segments, no token ids) must agree with."""

from __future__ import annotations

from collections.abc import Sequence

from pagesim.simulator.kv.prefix_hash import ROOT_HASH


def hash_token_blocks(token_ids: Sequence[int], block_size: int) -> list[int]:
    """Chained hashes of the full blocks of `token_ids` (a trailing partial block is skipped)."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    hashes: list[int] = []
    parent = ROOT_HASH
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        block = tuple(int(t) for t in token_ids[start : start + block_size])
        parent = hash((parent, block))
        hashes.append(parent)
    return hashes

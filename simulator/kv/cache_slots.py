"""What the paged and the hybrid KV cache share (paged_slots.py, hybrid_slots.py): sequences by
id over one GPU `BlockPool`, a running count of the computed slots each block holds (so memory
accounting never walks the pool), the prefix cache's query and hit counters, and the queries that
read only those.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Generic, Protocol, TypeVar

from pagesim.simulator.core.errors import KVCacheError
from pagesim.simulator.kv.block_pool import BlockPool, EvictionOrder


class _Seq(Protocol):
    num_tokens: int
    num_computed_tokens: int
    is_swapped: bool


SeqT = TypeVar("SeqT", bound=_Seq)


class CacheSlots(Generic[SeqT]):
    """Sequences (`SeqT`, by id) over a GPU block pool of `num_blocks` `block_size`-token
    blocks (`BlockPool`, with its eviction order and duplicate-hash rule)."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_prefix_cache: bool,
        eviction: EvictionOrder,
        allow_duplicate_hashes: bool,
        reuse_unhashed_first: bool = False,
    ) -> None:
        gpu = BlockPool(
            num_blocks,
            eviction=eviction,
            allow_duplicates=allow_duplicate_hashes,
            reuse_unhashed_first=reuse_unhashed_first,
        )
        self._gpu = gpu
        self._num_gpu_blocks = num_blocks
        self._block_size = block_size
        self._enable_prefix_cache = enable_prefix_cache
        self._seqs: dict[int, SeqT] = {}
        self._computed_slots = [0] * gpu.num_blocks  # per GPU block; 0 while the block is free
        self._num_computed_slots = 0  # sum of the above
        self._num_prefix_query_tokens = 0
        self._num_prefix_hit_tokens = 0

    @property
    def block_size(self) -> int:
        return self._block_size

    @property
    def num_blocks(self) -> int:
        return self._num_gpu_blocks

    @property
    def enable_prefix_cache(self) -> bool:
        return self._enable_prefix_cache

    @property
    def num_used_blocks(self) -> int:
        return self._gpu.num_used_blocks

    @property
    def num_cached_blocks(self) -> int:
        return self._gpu.num_cached_blocks

    @property
    def num_prefix_saved_blocks(self) -> int:
        """GPU blocks prefix-cache hits share instead of holding copies (BlockPool's count)."""
        return self._gpu.num_prefix_saved_blocks

    @property
    def num_prefix_query_tokens(self) -> int:
        """Prompt tokens of every `add_seq` made with the prefix cache on (vLLM's 'queries')."""
        return self._num_prefix_query_tokens

    @property
    def num_prefix_hit_tokens(self) -> int:
        """Tokens served from the prefix cache; hit rate = hits / queries, as vLLM reports it."""
        return self._num_prefix_hit_tokens

    def has_seq(self, seq_id: int) -> bool:
        return seq_id in self._seqs

    def seq_ids(self) -> tuple[int, ...]:
        return tuple(self._seqs)

    def is_swapped(self, seq_id: int) -> bool:
        return self._seq(seq_id).is_swapped

    def num_tokens(self, seq_id: int) -> int:
        return self._seq(seq_id).num_tokens

    def num_computed_tokens(self, seq_id: int) -> int:
        return self._seq(seq_id).num_computed_tokens

    def ref_count(self, block: int) -> int:
        return self._gpu.ref_count(block)

    def block_hash(self, block: int) -> int | None:
        return self._gpu.block_hash(block)

    def block_states(self) -> tuple[tuple[int, ...], tuple[int | None, ...]]:
        """Every GPU block's reference count and content hash (None: uncached), copied: what a
        block map records after a step (O(blocks), at C speed)."""
        return tuple(self._gpu.ref_counts), tuple(self._gpu.block_hashes)

    def _seq(self, seq_id: int) -> SeqT:
        seq = self._seqs.get(seq_id)
        if seq is None:
            raise KVCacheError(f"unknown seq {seq_id}")
        return seq

    def _note_computed(self, block: int, fill: int) -> None:
        """Block `block` now holds computed KV in its first `fill` slots."""
        gained = fill - self._computed_slots[block]
        if gained > 0:
            self._computed_slots[block] = fill
            self._num_computed_slots += gained

    def _release_gpu(self, block: int) -> None:
        """One holder lets go of GPU block `block`; its computed slots go with its last one."""
        if self._gpu.decref(block) == 0:
            self._num_computed_slots -= self._computed_slots[block]
            self._computed_slots[block] = 0

    def _release_gpu_many(
        self, blocks: list[int], hashed_like: AbstractSet[int] = frozenset()
    ) -> None:
        """`_release_gpu` of each, in order, as one vLLM `free_blocks` call (BlockPool.
        decref_many: the order the freed ones join the free blocks in)."""
        computed_slots = self._computed_slots
        for block in self._gpu.decref_many(blocks, hashed_like):
            self._num_computed_slots -= computed_slots[block]
            computed_slots[block] = 0

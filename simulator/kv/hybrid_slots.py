"""Hybrid KV cache, the per-step part: per-group block tables over one block pool, grown (after
freeing what left the windows), committed, cached and freed every step, and the memory they
hold; what it shares with the paged cache (sequences by id, computed-slot counts, prefix
counters, the pool's queries) is cache_slots.py's `CacheSlots`. `HybridKVCache` (hybrid_cache.py,
whose docstring tells the rules and their vLLM sources) adds the rest: sequences entering with
prefix-cache hits, its own queries, audits.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pagesim.simulator.core.errors import KVCacheError
from pagesim.simulator.core.memory import MemoryBreakdown
from pagesim.simulator.core.model_spec import LayerKind
from pagesim.simulator.core.plan import BlockCopy
from pagesim.simulator.kv.block_pool import EvictionOrder
from pagesim.simulator.kv.cache_slots import CacheSlots
from pagesim.simulator.kv.hybrid_layout import HybridLayout, cdiv
from pagesim.simulator.kv.hybrid_table import HybridSeq, blocks_at, group_key

_NO_COPIES: tuple[BlockCopy, ...] = ()


class HybridSlots(CacheSlots[HybridSeq]):
    """Per-group block tables of sequences (ids chosen by the caller) over one block pool: the
    per-step operations. Sequences enter through `HybridKVCache.add_seq`."""

    def __init__(
        self,
        num_blocks: int,
        layout: HybridLayout,
        *,
        enable_prefix_cache: bool = False,
        eviction: EvictionOrder = EvictionOrder.LRU,
        allow_duplicate_hashes: bool = True,
        reuse_unhashed_first: bool = False,
    ) -> None:
        if num_blocks < 1:
            raise KVCacheError(f"need num_blocks >= 1, got {num_blocks}")
        super().__init__(
            num_blocks,
            layout.block_size,
            enable_prefix_cache,
            eviction,
            allow_duplicate_hashes,
            reuse_unhashed_first,
        )
        self.layout = layout
        self._num_full = layout.num_full_groups
        self._num_sliding = layout.num_sliding_groups
        self._num_state = layout.num_state_groups
        # Prefix hits need every group to hit; state groups never do.
        self._can_hit = enable_prefix_cache and not self._num_state
        self.num_window_freed_blocks = 0  # blocks freed out of a window so far

    @property
    def num_free_blocks(self) -> int:
        """Blocks allocatable now, evictable cached ones included: every block no group of any
        sequence holds (the paged cache answers the same, in paged_slots.py)."""
        return self._num_gpu_blocks - self._gpu.num_used_blocks

    def allocate_slots(
        self,
        seq_ids: Sequence[int],
        num_new_tokens: int | Sequence[int],
        reserve_blocks: int = 0,
    ) -> tuple[BlockCopy, ...] | None:
        """Grow sequences by `num_new_tokens` slots each, all or nothing, after freeing what
        left their windows; None (nothing allocated) when the free blocks less
        `reserve_blocks` cannot hold the growth. Never copies (no forks)."""
        counts = (
            [num_new_tokens] * len(seq_ids) if isinstance(num_new_tokens, int) else num_new_tokens
        )
        if len(counts) != len(seq_ids):
            raise KVCacheError(f"{len(counts)} token counts for {len(seq_ids)} sequences")
        seqs = [self._seq(seq_id) for seq_id in seq_ids]
        needed = 0
        for seq, count in zip(seqs, counts, strict=True):
            if count < 0:
                raise KVCacheError(f"cannot append {count} tokens")
            self._remove_skipped_blocks(seq)
            needed += self._num_new_blocks(seq, seq.num_tokens + count)
        if self._gpu.num_free_blocks - needed < reserve_blocks:
            return None
        allocate_many = self._gpu.allocate_many
        bs = self._block_size
        for seq, count in zip(seqs, counts, strict=True):
            seq.num_tokens += count
            seq.num_last_new_tokens = count
            grow = cdiv(seq.num_tokens, bs) - len(seq.full if self._num_full else seq.sliding)
            # Group by group in vLLM's group order, each group's new blocks in a row (the
            # coordinator asks each group's manager in turn), transposed into bundles.
            for kind in self.layout.kind_order:
                if kind is LayerKind.STATE:
                    if not seq.state and count:
                        seq.state = allocate_many(self._num_state)
                        for block in seq.state:
                            self._note_computed(block, bs)
                elif grow > 0:
                    is_full = kind is LayerKind.FULL
                    num_groups = self._num_full if is_full else self._num_sliding
                    per_group = [allocate_many(grow) for _ in range(num_groups)]
                    bundles = map(list, zip(*per_group, strict=True))
                    (seq.full if is_full else seq.sliding).extend(bundles)
        return _NO_COPIES

    def num_blocks_needed(self, seq_id: int, num_new_tokens: int) -> int:
        """Blocks `allocate_slots` would take now (before it frees what left the windows)."""
        seq = self._seq(seq_id)
        return self._num_new_blocks(seq, seq.num_tokens + num_new_tokens)

    def _num_new_blocks(self, seq: HybridSeq, num_tokens: int) -> int:
        logical = cdiv(num_tokens, self._block_size)
        have = len(seq.full if self._num_full else seq.sliding)
        new = max(0, logical - have) * (self._num_full + self._num_sliding)
        if self._num_state and not seq.state and num_tokens > seq.num_tokens:
            new += self._num_state
        return new

    def _remove_skipped_blocks(self, seq: HybridSeq) -> None:
        """vLLM's rule (module docstring), group by group, each nearest the window first."""
        window = self.layout.window
        if window is None:
            return
        sliding = seq.sliding
        last_useful_block = (seq.num_computed_tokens - window + 1) // self._block_size
        first = last = min(last_useful_block, len(sliding))
        while first > 0 and sliding[first - 1] is not None:
            first -= 1
        if first == last:
            return
        freed = sliding[first:last]
        for i in range(first, last):
            sliding[i] = None
        release = self._release_gpu_many  # each group's manager frees its blocks in one call
        for g in range(self._num_sliding):
            release([bundle[g] for bundle in reversed(freed) if bundle is not None])
        self.num_window_freed_blocks += len(freed) * self._num_sliding

    def cache_blocks(self, seq_id: int, num_tokens: int, block_hashes: Sequence[int]) -> None:
        """Register the full blocks among the first `num_tokens` slots in every group now, as
        V1 caches the blocks a step will fill when it allocates them."""
        if not self._enable_prefix_cache:
            return
        seq = self._seq(seq_id)
        if num_tokens > seq.num_tokens:
            raise KVCacheError(
                f"seq {seq_id}: cannot cache {num_tokens} tokens, {seq.num_tokens} are allocated"
            )
        self._register(seq, min(num_tokens // self._block_size, len(block_hashes)), block_hashes)

    def _register(self, seq: HybridSeq, num_full: int, block_hashes: Sequence[int]) -> None:
        cache_block = self._gpu.cache_block
        num_full_groups = self._num_full
        for i in range(seq.num_registered_blocks, num_full):
            block_hash = block_hashes[i]
            if num_full_groups:
                for g, block in enumerate(seq.full[i]):
                    cache_block(block, group_key(block_hash, g))
            bundle = seq.sliding[i] if self._num_sliding else None
            if bundle is not None:
                for g, block in enumerate(bundle, start=num_full_groups):
                    cache_block(block, group_key(block_hash, g))
        seq.num_registered_blocks = max(seq.num_registered_blocks, num_full)

    def commit(
        self, seq_id: int, num_computed_tokens: int, block_hashes: Sequence[int] = ()
    ) -> None:
        """The step finished: the first `num_computed_tokens` slots hold KV (full blocks cached
        under `block_hashes` if not yet)."""
        seq = self._seq(seq_id)
        old = seq.num_computed_tokens
        if not old <= num_computed_tokens <= seq.num_tokens:
            raise KVCacheError(
                f"seq {seq_id}: commit of {num_computed_tokens} computed tokens, expected "
                f"{old}..{seq.num_tokens}"
            )
        bs = self._block_size
        for i in range(old // bs, cdiv(num_computed_tokens, bs)):
            fill = min(bs, num_computed_tokens - i * bs)
            if self._num_full:
                for block in seq.full[i]:
                    self._note_computed(block, fill)
            bundle = seq.sliding[i] if self._num_sliding else None
            if bundle is not None:
                for block in bundle:
                    self._note_computed(block, fill)
        seq.num_computed_tokens = num_computed_tokens
        if self._enable_prefix_cache and block_hashes:
            self._register(seq, min(num_computed_tokens // bs, len(block_hashes)), block_hashes)

    def commit_one(self, seq_id: int) -> None:
        """A decode step wrote one slot."""
        seq = self._seq(seq_id)
        if seq.num_computed_tokens >= seq.num_tokens:
            raise KVCacheError(
                f"seq {seq_id}: commit of one more computed token, "
                f"{seq.num_computed_tokens} of {seq.num_tokens} are computed already"
            )
        self.commit(seq_id, seq.num_computed_tokens + 1)

    def free(self, seq_id: int, *, hashes_full_blocks: bool = False) -> None:
        """Drop a sequence: group by group in vLLM's group order (its coordinator frees
        manager by manager), each group's blocks tail first. (`hashes_full_blocks` is the paged
        cache's: a hybrid model's groups hash every request, so it changes nothing here.)"""
        seq = self._seq(seq_id)
        del self._seqs[seq_id]
        release = self._release_gpu_many  # one free_blocks call per group's manager
        for kind in self.layout.kind_order:
            if kind is LayerKind.FULL:
                for g in range(self._num_full):
                    release([bundle[g] for bundle in reversed(seq.full)])
            elif kind is LayerKind.SLIDING:
                live = []
                for maybe in reversed(seq.sliding):
                    if maybe is None:
                        break  # everything before it left the window already
                    live.append(maybe)
                for g in range(self._num_sliding):
                    release([bundle[g] for bundle in live])
            else:
                for block in seq.state:  # one block per state group (manager)
                    release([block])

    def memory_breakdown(
        self,
        seq_ids: Sequence[int] | None = None,
        *,
        num_uncommitted: int = 0,
        num_reserved_elsewhere: int = 0,
    ) -> MemoryBreakdown:
        """Split the capacity in token slots (one block = block_size slots), shared blocks
        once; O(live sequences + their not-yet-computed blocks)."""
        bs = self._block_size
        reserved = num_reserved_elsewhere + self.num_reserved_slots(seq_ids)
        computed = self._num_computed_slots + num_uncommitted
        gpu = self._gpu
        return MemoryBreakdown(
            token_slots=computed,
            reserved_slots=reserved,
            internal_frag_slots=gpu.num_used_blocks * bs - computed - reserved,
            external_frag_slots=0,
            free_slots=gpu.num_free_blocks * bs,
            prefix_saved_slots=gpu.num_prefix_saved_blocks * bs,
        )

    def num_reserved_slots(self, seq_ids: Iterable[int] | None = None) -> int:
        """Held, not yet computed slots that some holder will still fill."""
        bs = self._block_size
        computed_slots = self._computed_slots
        need_of: dict[int, int] = {}  # block -> the most slots of it some holder will fill
        seqs = self._seqs
        items = seqs.items() if seq_ids is None else ((s, seqs[s]) for s in seq_ids)
        for seq_id, seq in items:
            if seq.final_len is None:
                raise KVCacheError(f"memory_breakdown: no final length for seq {seq_id}")
            for i in range(seq.num_computed_tokens // bs, cdiv(seq.num_tokens, bs)):
                need = min(bs, seq.final_len - i * bs)
                for block in blocks_at(seq, i):
                    if need > need_of.get(block, 0):
                        need_of[block] = need
        return sum(max(0, need - computed_slots[b]) for b, need in need_of.items())

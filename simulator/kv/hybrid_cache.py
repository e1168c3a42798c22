"""Paged KV cache of a hybrid model (full-attention, sliding-window and state layer groups over
one block pool), as vLLM V1's hybrid KV-cache manager keeps it (v0.11:
vllm/v1/core/kv_cache_coordinator.py `HybridKVCacheCoordinator`,
vllm/v1/core/single_type_kv_cache_manager.py `FullAttentionManager`, `SlidingWindowManager`,
`MambaManager`; the layout in kv/hybrid_layout.py).

Each request holds one block table per group. pagesim stores them by kind: logical block i of
the request maps to one block per full group (`full[i]`) and one per sliding group
(`sliding[i]`, None once freed out of the window: vLLM's null block); each state group holds one
block for the request's whole life.

Sliding groups: before each allocation, blocks wholly before the window are freed
(`SlidingWindowManager.remove_skipped_blocks`, with the request's computed tokens so far):

    last_useful_token = num_computed_tokens - window + 1
    last_useful_block = last_useful_token // block_size        (blocks before it are freed)

    window W = 5, block size 4, 13 tokens computed: tokens 9..12 (+ the next) are attended
    sliding  [ null ][ null ][ b7 ][ b8 ]      last_useful_token = 13 - 5 + 1 = 9 -> block 2
               0..3    4..7   8..11  12..

They are freed even when the allocation that follows does not fit, as vLLM does. A prompt
chunk allocates every block it writes (v0.11 counts cdiv(tokens, block_size) for sliding groups
too); the blocks it leaves behind the window go at the next step. So a sliding group holds at
most cdiv(W - 1 + n, block_size) + 1 blocks after a step adding n tokens.

Prefix caching (`add_seq`), vLLM's `find_longest_cache_hit`: full groups hit the longest run of
leading prompt blocks cached in every full group; sliding groups need, within that run, only
the last cdiv(W - 1, block_size) contiguous blocks (searched right to left; the blocks before
them are null), or a leading run shorter than that; the hit is the shorter of the two, full
groups truncated to it. Every block, in every group, is cached under its (hash, group) key
when allocated, and a sliding block freed out of the window stays findable until reused. State
groups cache nothing: a model with state layers never hits (v0.11's `MambaManager` returns no
cached blocks; later versions' "align" mode is not modelled).

Not supported (refused by `PagedState`'s policy checks before a run): forks (V1 fans n > 1
out into child requests) and swapping (V1 only recomputes).

Memory accounting counts a block's token slots as `PagedSlots` does (computed / reserved /
internal fragmentation, shared blocks once); a state block counts as computed from its
allocation (it holds the request's state). Blocks freed out of the window are free memory,
counted in `num_window_freed_blocks`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice

from pagesim.simulator.core.errors import KVCacheError
from pagesim.simulator.core.memory import MemoryBreakdown
from pagesim.simulator.core.plan import BlockCopy
from pagesim.simulator.kv.block_pool import BlockPool, EvictionOrder
from pagesim.simulator.kv.hybrid_layout import HybridLayout, cdiv

_NO_COPIES: tuple[BlockCopy, ...] = ()


@dataclass(slots=True)
class HybridSeq:
    full: list[list[int]]  # logical block i -> its block in each full group
    sliding: list[list[int] | None]  # ... in each sliding group; None: freed out of the window
    state: list[int]  # one block per state group, from the first allocation
    num_tokens: int
    num_computed_tokens: int
    num_registered_blocks: int
    final_len: int | None
    num_last_new_tokens: int = 0  # what the last allocation added (bounds the window's blocks)
    is_swapped: bool = field(default=False)  # never: V1 recomputes


def group_key(block_hash: int, group: int) -> int:
    """The cache key of a block of `group` holding the content `block_hash` (vLLM's
    BlockHashWithGroupId): the same prompt block is a different entry in each group."""
    return hash((block_hash, group))


class HybridKVCache:
    """Per-group block tables of sequences (ids chosen by the caller) over one block pool."""

    def __init__(
        self,
        num_blocks: int,
        layout: HybridLayout,
        *,
        enable_prefix_cache: bool = False,
        eviction: EvictionOrder = EvictionOrder.LRU,
        allow_duplicate_hashes: bool = True,
    ) -> None:
        if num_blocks < 1:
            raise KVCacheError(f"need num_blocks >= 1, got {num_blocks}")
        self.layout = layout
        self._block_size = layout.block_size
        self._num_full = layout.num_full_groups
        self._num_sliding = layout.num_sliding_groups
        self._num_state = layout.num_state_groups
        # Prefix hits need every group to hit; state groups never do.
        self._enable_prefix_cache = enable_prefix_cache
        self._can_hit = enable_prefix_cache and not self._num_state
        self._gpu = BlockPool(
            num_blocks, eviction=eviction, allow_duplicates=allow_duplicate_hashes
        )
        self._seqs: dict[int, HybridSeq] = {}
        self._computed_slots = [0] * num_blocks  # per block; 0 while the block is free
        self._num_computed_slots = 0
        self.num_window_freed_blocks = 0  # blocks freed out of a window so far
        self._num_prefix_query_tokens = 0
        self._num_prefix_hit_tokens = 0

    # -- queries -------------------------------------------------------------------------------
    @property
    def block_size(self) -> int:
        return self._block_size

    @property
    def num_blocks(self) -> int:
        return self._gpu.num_blocks

    @property
    def num_cpu_blocks(self) -> int:
        return 0

    @property
    def enable_prefix_cache(self) -> bool:
        return self._enable_prefix_cache

    @property
    def num_free_blocks(self) -> int:
        return self._gpu.num_free_blocks

    @property
    def num_used_blocks(self) -> int:
        return self._gpu.num_used_blocks

    @property
    def num_cached_blocks(self) -> int:
        return self._gpu.num_cached_blocks

    @property
    def num_prefix_saved_blocks(self) -> int:
        return self._gpu.num_prefix_saved_blocks

    @property
    def num_prefix_query_tokens(self) -> int:
        return self._num_prefix_query_tokens

    @property
    def num_prefix_hit_tokens(self) -> int:
        return self._num_prefix_hit_tokens

    @property
    def num_state_blocks(self) -> int:
        """Blocks holding requests' state now (one per state group per live request)."""
        return sum(len(seq.state) for seq in self._seqs.values())

    def has_seq(self, seq_id: int) -> bool:
        return seq_id in self._seqs

    def seq_ids(self) -> tuple[int, ...]:
        return tuple(self._seqs)

    def is_swapped(self, seq_id: int) -> bool:
        self._seq(seq_id)
        return False

    def num_tokens(self, seq_id: int) -> int:
        return self._seq(seq_id).num_tokens

    def num_computed_tokens(self, seq_id: int) -> int:
        return self._seq(seq_id).num_computed_tokens

    def ref_count(self, block: int) -> int:
        return self._gpu.ref_count(block)

    def block_hash(self, block: int) -> int | None:
        return self._gpu.block_hash(block)

    def tables(self, seq_id: int) -> tuple[list[list[int | None]], list[int]]:
        """Per attention group, the block ids of logical blocks 0.. (None: out of the window),
        full groups first; and the state blocks. Copies (tests)."""
        seq = self._seq(seq_id)
        groups: list[list[int | None]] = [[b[g] for b in seq.full] for g in range(self._num_full)]
        for g in range(self._num_sliding):
            groups.append([None if b is None else b[g] for b in seq.sliding])
        return groups, list(seq.state)

    def blocks_held(self, seq_id: int) -> int:
        seq = self._seq(seq_id)
        live = sum(b is not None for b in seq.sliding)
        return len(seq.full) * self._num_full + live * self._num_sliding + len(seq.state)

    def num_sliding_blocks_held(self, seq_id: int) -> int:
        """Live blocks of one sliding group of the sequence (all sliding groups hold as many)."""
        return sum(b is not None for b in self._seq(seq_id).sliding)

    # -- lifecycle -----------------------------------------------------------------------------
    def add_seq(
        self,
        seq_id: int,
        block_hashes: Sequence[int] = (),
        num_prompt_tokens: int = 0,
        *,
        final_len: int | None = None,
    ) -> int:
        """Register a sequence and map its longest cached prompt prefix (module docstring);
        returns the hit tokens, capped so the last prompt token is computed."""
        if seq_id in self._seqs:
            raise KVCacheError(f"seq {seq_id} already exists")
        if num_prompt_tokens < 0:
            raise KVCacheError(f"seq {seq_id}: num_prompt_tokens {num_prompt_tokens} < 0")
        seq = HybridSeq([], [], [], 0, 0, 0, final_len)
        self._seqs[seq_id] = seq
        if self._enable_prefix_cache and num_prompt_tokens > 0:
            self._num_prefix_query_tokens += num_prompt_tokens
            if self._can_hit:
                max_blocks = min(len(block_hashes), (num_prompt_tokens - 1) // self._block_size)
                self._take_hit(seq, block_hashes, max_blocks)
                self._num_prefix_hit_tokens += seq.num_tokens
        return seq.num_tokens

    def _bundle(self, block_hash: int, first_group: int, num_groups: int) -> list[int] | None:
        """The cached block of each of the groups, or None unless every one is cached."""
        lookup = self._gpu.lookup
        blocks = []
        for g in range(first_group, first_group + num_groups):
            block = lookup(group_key(block_hash, g))
            if block is None:
                return None
            blocks.append(block)
        return blocks

    def _take_hit(self, seq: HybridSeq, block_hashes: Sequence[int], max_blocks: int) -> None:
        num_full, num_sliding = self._num_full, self._num_sliding
        full: list[list[int]] = []
        if num_full:
            for block_hash in islice(block_hashes, max_blocks):
                bundle = self._bundle(block_hash, 0, num_full)
                if bundle is None:
                    break
                full.append(bundle)
            max_blocks = len(full)
        sliding: list[list[int] | None] = []
        if num_sliding:
            needed = self.layout.num_window_blocks
            run: list[list[int]] = []  # cached bundles from i rightwards, nearest first
            start = 0
            for i in range(max_blocks - 1, -1, -1):
                bundle = self._bundle(block_hashes[i], num_full, num_sliding)
                if bundle is None:
                    run = []
                    continue
                run.append(bundle)
                if len(run) >= needed:
                    start = i
                    break
            else:
                start = 0  # no run long enough: the leading run (maybe empty) is the hit
            sliding = [None] * start + list(reversed(run))
            del full[len(sliding) :]
        seq.full, seq.sliding = full, sliding
        num_hit = len(sliding) if num_sliding else len(full)
        seq.num_tokens = seq.num_computed_tokens = seq.num_last_new_tokens = (
            num_hit * self._block_size
        )
        seq.num_registered_blocks = num_hit
        bs = self._block_size
        for bundle in [*full, *(b for b in sliding if b is not None)]:
            for block in bundle:
                self._gpu.touch(block)
                self._note_computed(block, bs)

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
            if grow > 0:
                # Group by group, each its new blocks in a row (vLLM's coordinator asks each
                # group's manager in turn), then transposed into per-logical-block bundles.
                if self._num_full:
                    per_group = [allocate_many(grow) for _ in range(self._num_full)]
                    seq.full.extend(map(list, zip(*per_group, strict=True)))
                if self._num_sliding:
                    per_group = [allocate_many(grow) for _ in range(self._num_sliding)]
                    seq.sliding.extend(map(list, zip(*per_group, strict=True)))
            if self._num_state and not seq.state and count:
                seq.state = allocate_many(self._num_state)
                for block in seq.state:
                    self._note_computed(block, bs)
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
        release = self._release
        for g in range(self._num_sliding):
            for bundle in reversed(freed):
                assert bundle is not None
                release(bundle[g])
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

    def free(self, seq_id: int) -> None:
        """Drop a sequence: each group's blocks tail first, group by group (vLLM's
        coordinator frees manager by manager), state blocks last."""
        seq = self._seq(seq_id)
        del self._seqs[seq_id]
        release = self._release
        for g in range(self._num_full):
            for bundle in reversed(seq.full):
                release(bundle[g])
        for g in range(self._num_sliding):
            for maybe in reversed(seq.sliding):
                if maybe is None:
                    break  # everything before it left the window already
                release(maybe[g])
        for block in seq.state:
            release(block)

    def fork(self, parent_seq_id: int, child_seq_id: int, *, final_len: int | None = None) -> None:
        raise KVCacheError("a hybrid KV cache does not fork: vLLM V1 fans n > 1 out instead")

    def can_swap_out(self, seq_ids: Iterable[int]) -> bool:
        return False  # V1 recomputes; the scenario checks refuse swap for hybrid models

    def swap_out(self, seq_ids: Iterable[int]) -> int:
        raise KVCacheError("a hybrid KV cache does not swap: vLLM V1 preempts by recompute")

    def can_swap_in(self, seq_ids: Iterable[int], reserve_blocks: int = 0) -> bool:
        return False

    def swap_in(self, seq_ids: Iterable[int]) -> int:
        raise KVCacheError("a hybrid KV cache does not swap: vLLM V1 preempts by recompute")

    def block_table(self, seq_id: int) -> tuple[int, ...]:
        raise KVCacheError(f"seq {seq_id}: a hybrid model has one block table per group (tables)")

    # -- accounting ----------------------------------------------------------------------------
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
                for block in self.blocks_at(seq, i):
                    if need > need_of.get(block, 0):
                        need_of[block] = need
        return sum(max(0, need - computed_slots[b]) for b, need in need_of.items())

    def blocks_at(self, seq: HybridSeq, i: int) -> list[int]:
        """The live blocks of logical block i of `seq`, full groups first."""
        blocks = list(seq.full[i]) if self._num_full else []
        bundle = seq.sliding[i] if self._num_sliding else None
        if bundle is not None:
            blocks += bundle
        return blocks

    def walk_memory_breakdown(
        self, num_computed_of: Mapping[int, int] | None = None
    ) -> MemoryBreakdown:
        """`memory_breakdown` recomputed block by block from the tables (O(blocks); checks)."""
        from pagesim.simulator.kv.hybrid_audit import walk_hybrid_breakdown

        return walk_hybrid_breakdown(self, num_computed_of or {})

    def check_invariants(self) -> None:
        from pagesim.simulator.kv.hybrid_audit import check_hybrid_invariants

        check_hybrid_invariants(self)

    # -- internals -----------------------------------------------------------------------------
    def _seq(self, seq_id: int) -> HybridSeq:
        seq = self._seqs.get(seq_id)
        if seq is None:
            raise KVCacheError(f"unknown seq {seq_id}")
        return seq

    def _note_computed(self, block: int, fill: int) -> None:
        gained = fill - self._computed_slots[block]
        if gained > 0:
            self._computed_slots[block] = fill
            self._num_computed_slots += gained

    def _release(self, block: int) -> None:
        if self._gpu.decref(block) == 0:
            self._num_computed_slots -= self._computed_slots[block]
            self._computed_slots[block] = 0

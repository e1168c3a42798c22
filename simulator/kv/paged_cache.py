"""Paged KV cache: per-sequence block tables over a GPU BlockPool, prefix cache, CPU swap space.

Mechanism only: it never decides who runs, who is preempted or which request comes next.

Its parts (docs/design.md: BlockPool · BlockTable · PrefixCache · SwapSpace):

    block_pool    BlockPool: one device's blocks, reference counts, the content-hash cache (LRU)
    block_table   BlockTable: one sequence's table and slot counts
    cache_slots   CacheSlots: what it shares with the hybrid cache: sequences by id, the
                  computed-slot counts, the prefix counters, the GPU pool's queries
    paged_slots   PagedSlots: the per-step operations (grow, commit, free), copy-on-write, and
                  the memory breakdown kept in O(sequences); the picture of copy-on-write
    swap_space    SwapSpace: the CPU pool and the copy of blocks between the pools
    paged_audit   the O(blocks) checks: invariants, the memory breakdown walked block by block
    this module   PagedKVCache: sequences entering (with prefix-cache hits, and V1's blocks
                  cached as they are taken) and forking, swapping out and in, the CPU-pool,
                  fork and block-table queries, and a decode group's members settling their
                  slots (fastpath/decode_group.py)

The prefix cache is the GPU pool's hash cache: `commit` registers full computed blocks, `add_seq`
maps a prompt's longest cached prefix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from pagesim.simulator.core.errors import KVCacheError
from pagesim.simulator.core.memory import MemoryBreakdown
from pagesim.simulator.kv.block_table import BlockTable, clamp_fill, unique_blocks
from pagesim.simulator.kv.paged_audit import check_paged_invariants, walk_memory_breakdown
from pagesim.simulator.kv.paged_slots import PagedSlots


class PagedKVCache(PagedSlots):
    """Block tables of sequences (ids chosen by the caller) over `num_blocks` GPU blocks."""

    # -- queries -------------------------------------------------------------------------------

    @property
    def num_cpu_blocks(self) -> int:
        return self._swap_space.pool.num_blocks

    @property
    def num_cpu_free_blocks(self) -> int:
        return self._swap_space.pool.num_free_blocks

    def cpu_ref_count(self, block: int) -> int:
        """References to CPU (swap) block `block`: one per swapped-out table that lists it."""
        return self._swap_space.pool.ref_count(block)

    def cpu_ref_counts(self) -> tuple[int, ...]:
        """Every CPU block's reference count, copied (a block map's record of the swap space)."""
        return tuple(self._swap_space.pool.ref_counts)

    @property
    def num_fork_saved_blocks(self) -> int:
        """GPU blocks forked sequences share instead of holding copies (BlockPool's count)."""
        return self._gpu.num_fork_saved_blocks

    def block_table(self, seq_id: int) -> tuple[int, ...]:
        """Physical block ids, GPU ones (CPU ones while the sequence is swapped out)."""
        return tuple(self._seq(seq_id).block_table)

    def count_prefix_hit_tokens(self, block_hashes: Sequence[int], num_prompt_tokens: int) -> int:
        """The tokens `add_seq` would hit now, without touching anything or counting a query."""
        return len(self.prefix_hits(block_hashes, num_prompt_tokens)) * self._block_size

    def prefix_hits(self, block_hashes: Sequence[int], num_prompt_tokens: int) -> list[int]:
        """The cached blocks `add_seq` would map now (with the prefix cache on), in order,
        without touching anything or counting a query."""
        return self._gpu.lookup_run(block_hashes, self._max_hit_blocks(num_prompt_tokens))

    def are_free(self, blocks: Sequence[int]) -> bool:
        """Whether no sequence holds any of `blocks` (cached ones: evictable)."""
        return not any(map(self._gpu_refs.__getitem__, blocks))

    def refuse_hits(self, blocks: list[int], num_prompt_tokens: int) -> None:
        """What `add_seq` of a prompt of `num_prompt_tokens` tokens whose hits are `blocks`
        (`prefix_hits`, every one free: `are_free`), then `free` of it, leave: the lookup
        counted, and each hit block taken out of the free order and put back at its tail, the
        last first (BlockPool.requeue). A refused admission (policies/admission.py)."""
        self.note_prefix_query(num_prompt_tokens)
        if blocks:
            self._num_prefix_hit_tokens += len(blocks) * self._block_size
            self._gpu.requeue(blocks)

    # -- lifecycle -----------------------------------------------------------------------------

    def add_seq(
        self,
        seq_id: int,
        block_hashes: Sequence[int] = (),
        num_prompt_tokens: int = 0,
        *,
        final_len: int | None = None,
    ) -> int:
        """Register a sequence; map its longest cached prompt prefix. Returns the hit tokens.

        `block_hashes`: the prompt's full-block hashes (`SequenceHasher.block_hashes()`). The hit
        is the longest run of leading hashes found in the cache, capped at
        (num_prompt_tokens - 1) // block_size blocks so the last prompt token is always computed
        (its logits give the first output token). Hit tokens count as appended and computed.
        `final_len`: the slots the sequence will hold when it finishes, which only the memory
        accounting reads (reserved vs internal fragmentation); a fork inherits its parent's.
        With the prefix cache on, every call adds num_prompt_tokens to `num_prefix_query_tokens`
        and the hit to `num_prefix_hit_tokens`. A hit on an evictable block takes it out of
        `num_free_blocks`.
        """
        if seq_id in self._seqs:
            raise KVCacheError(f"seq {seq_id} already exists")
        if num_prompt_tokens < 0:
            raise KVCacheError(f"seq {seq_id}: num_prompt_tokens {num_prompt_tokens} < 0")
        table: list[int] = []
        bs = self._block_size
        if self._enable_prefix_cache and num_prompt_tokens > 0:
            # The hits looked up, then touched, in order (a touch moves no hash): dozens of
            # blocks at an admission, so in bulk, `_note_computed` inlined. Each counts full
            # now; an evictable one held no slots (a free block's count is 0), so unless a
            # hit was on a block in use (one more copy saved) they gain bs each.
            if block_hashes:
                gpu = self._gpu
                table = gpu.lookup_run(block_hashes, self._max_hit_blocks(num_prompt_tokens))
                num_saved = gpu.num_prefix_saved_blocks
                gpu.touch_run(table)
                computed_slots = self._computed_slots
                held = 0
                if gpu.num_prefix_saved_blocks != num_saved:
                    held = sum(map(computed_slots.__getitem__, table))
                self._num_computed_slots += bs * len(table) - held
                for block in table:
                    computed_slots[block] = bs
            self._num_prefix_query_tokens += num_prompt_tokens
            self._num_prefix_hit_tokens += len(table) * bs
        num_hit_tokens = len(table) * bs
        # without hits, a private sequence until a block of it is registered, shared or
        # swapped (BlockTable.slots_kept)
        self._seqs[seq_id] = BlockTable(
            table, num_hit_tokens, num_hit_tokens, len(table), final_len, slots_kept=bool(table)
        )
        return num_hit_tokens

    def cache_blocks(self, seq_id: int, num_tokens: int, block_hashes: Sequence[int]) -> None:
        """Register the sequence's full blocks among its first `num_tokens` slots under
        `block_hashes` now, before their KV is computed: vLLM V1 caches the blocks a step will
        fill when it allocates them (v1/core/kv_cache_manager.py allocate_slots ->
        cache_blocks), so a request admitted later in the same step can hit them. `commit`
        registers nothing twice."""
        if not self._enable_prefix_cache:
            return
        seq = self._gpu_seq(seq_id)
        if num_tokens > seq.num_tokens:
            raise KVCacheError(
                f"seq {seq_id}: cannot cache {num_tokens} tokens, {seq.num_tokens} are allocated"
            )
        num_full = min(num_tokens // self._block_size, len(block_hashes))
        first = seq.num_registered_blocks
        if num_full > first:
            if not seq.slots_kept:
                self._keep_slots(seq)
            self._gpu.cache_many(seq.block_table[first:num_full], block_hashes[first:num_full])
        seq.num_registered_blocks = max(seq.num_registered_blocks, num_full)

    def note_prefix_query(self, num_prompt_tokens: int, num_hit_tokens: int = 0) -> None:
        """Count a lookup `add_seq` would make (hitting `num_hit_tokens`), the sequence not
        added: an admission found not to fit before it (policies/admission.py), or lookups of
        several steps' refused admissions summed (fastpath/decode_window.py)."""
        if self._enable_prefix_cache and num_prompt_tokens > 0:
            self._num_prefix_query_tokens += num_prompt_tokens
            self._num_prefix_hit_tokens += num_hit_tokens

    def ends_free_order(self, blocks: list[int]) -> bool:
        """Whether `blocks` (free prefix hits: `prefix_hits`, `are_free`) end the free order as
        `refuse_hits` leaves them, each its hash's only holder: blocks taken from the free
        order then reach them last, the last hit first (BlockPool.ends_free_order)."""
        return self._gpu.ends_free_order(blocks)

    def fork(
        self,
        parent_seq_id: int,
        child_seq_id: int,
        *,
        final_len: int | None = None,
        parent_done: bool = False,
    ) -> None:
        """The child shares every block of the parent (copy-on-write later); its final length
        is the parent's unless given. `parent_done`: the parent writes nothing more (a finished
        request whose blocks are kept for a transfer), so slots it holds uncomputed (the
        lookahead of speculative decoding) may be shared too."""
        parent = self._gpu_seq(parent_seq_id)
        if child_seq_id in self._seqs:
            raise KVCacheError(f"fork: seq {child_seq_id} already exists")
        if parent.num_computed_tokens != parent.num_tokens and not parent_done:
            # Its pending writes would land in blocks the child now shares.
            raise KVCacheError(
                f"fork of seq {parent_seq_id} with uncomputed slots: commit its step first"
            )
        if not parent.slots_kept:
            self._keep_slots(parent)
        for block in parent.block_table:
            self._gpu.incref(block)
        self._seqs[child_seq_id] = BlockTable(
            list(parent.block_table),
            parent.num_tokens,
            parent.num_computed_tokens,
            parent.num_registered_blocks,
            parent.final_len if final_len is None else final_len,
        )

    def evict_one(self) -> int | None:
        """Evict the least recently freed cached block (tests; `allocate` evicts by itself)."""
        return self._gpu.evict_one()

    # -- swap ----------------------------------------------------------------------------------

    def can_swap_out(self, seq_ids: Iterable[int]) -> bool:
        blocks = unique_blocks(self._select(seq_ids, is_swapped=False))
        return len(blocks) <= self._swap_space.pool.num_free_blocks

    def swap_out(self, seq_ids: Iterable[int]) -> int:
        """Copy the sequences' blocks to CPU; returns the number of blocks copied.

        A block shared among these sequences moves once and stays shared on CPU; a block also
        held by other sequences is copied and stays on GPU for them.
        """
        return self._swap(seq_ids, to_cpu=True)

    def can_swap_in(self, seq_ids: Iterable[int], reserve_blocks: int = 0) -> bool:
        blocks = unique_blocks(self._select(seq_ids, is_swapped=True))
        return self._gpu.num_free_blocks - len(blocks) >= reserve_blocks

    def swap_in(self, seq_ids: Iterable[int]) -> int:
        """Copy swapped sequences back to GPU (fresh block ids, same sharing); returns the count.

        Swapping in a subset of sequences that shared a CPU block gives that subset its own GPU
        copy; the rest keep the CPU block.
        """
        return self._swap(seq_ids, to_cpu=False)

    # -- a decode group's members (fastpath/decode_group.py) --------------------------------------

    def fill_computed(self, seq_id: int, num_tokens: int) -> None:
        """The sequence holds `num_tokens` slots, all computed, within the blocks it has:
        `allocate_slots([seq_id], num_tokens - held)` then `commit(seq_id, num_tokens)`, the
        growth inlined (a decode-group member leaving: fastpath/decode_group.py, a hundred at
        once when a step must make room). Growth past its blocks (not expected of a member)
        takes the general path too, as before this was inlined; AssertionError, as then, if that
        finds no free block (a member's skipped slots lie within the blocks it holds)."""
        seq = self._seqs.get(seq_id)
        if seq is None or seq.is_swapped:
            seq = self._gpu_seq(seq_id)  # raises, naming the problem
        held = seq.num_tokens
        table = seq.block_table
        bs = self._block_size
        shared_tail = held % bs and self._gpu_refs[table[-1]] > 1
        if shared_tail or num_tokens < held or num_tokens > len(table) * bs:
            if self.allocate_slots((seq_id,), num_tokens - held) is None:  # the general path
                raise AssertionError(f"seq {seq_id}: {held} -> {num_tokens} slots found no block")
        else:
            seq.num_tokens = num_tokens
        self.commit(seq_id, num_tokens)

    def append_blocks(self, seq_ids: Sequence[int], num_tokens: Sequence[int]) -> None:
        """Entry by entry, sequence `seq_ids[i]` takes one new block and holds `num_tokens[i]`
        slots, the last of them in that block (a sequence may come again): what `allocate_slots`
        of each entry's growth in turn does when each needs exactly one block, the blocks taken
        in one allocation, in the same order. For a decode group's members crossing into new
        blocks over several steps (its closed form rests on their needing one block a crossing
        and on their last block being theirs alone). KVCacheError if the free blocks cannot
        hold them (nothing changed); AssertionError if an entry would need another count of
        blocks or a copy (the caller's bug: the blocks taken stay taken, the tables as they
        are)."""
        gpu = self._gpu
        num_free_blocks = self._num_gpu_blocks - gpu.num_used_blocks  # `num_free_blocks`
        num_blocks = len(seq_ids)
        if num_blocks > num_free_blocks:
            raise KVCacheError(f"{num_blocks} blocks asked for, {num_free_blocks} free")
        blocks = gpu.allocate_many(num_blocks)
        seqs = self._seqs
        bs = self._block_size
        if not (gpu.num_prefix_saved_blocks or gpu.num_fork_saved_blocks):
            # No block has a second holder (these count every reference past a block's
            # first): no last block is shared, so only the block count is tested (hot: every
            # crossing of every member).
            for seq_id, tokens, block in zip(seq_ids, num_tokens, blocks, strict=True):
                seq = seqs[seq_id]
                table = seq.block_table
                if (tokens - 1) // bs != len(table):
                    raise AssertionError(_not_one_block(seq_id, seq, tokens))
                table.append(block)
                seq.num_tokens = tokens
            return
        refs = self._gpu_refs
        for seq_id, tokens, block in zip(seq_ids, num_tokens, blocks, strict=True):
            seq = seqs[seq_id]
            table = seq.block_table
            if (seq.num_tokens % bs and refs[table[-1]] > 1) or (tokens - 1) // bs != len(table):
                raise AssertionError(_not_one_block(seq_id, seq, tokens))
            table.append(block)
            seq.num_tokens = tokens

    # -- accounting ----------------------------------------------------------------------------

    def walk_memory_breakdown(
        self, num_computed_of: Mapping[int, int] | None = None
    ) -> MemoryBreakdown:
        """`memory_breakdown` recomputed block by block from the tables alone (O(blocks); for
        checks). `num_computed_of[seq_id]` stands for a sequence's computed tokens where this
        cache has not been told of all of them yet (a decode group's members)."""
        return walk_memory_breakdown(self._seqs, self._gpu, self._block_size, num_computed_of)

    def check_invariants(self) -> None:
        """Raise AssertionError if tables, pools and counters disagree (O(blocks); for tests)."""
        check_paged_invariants(
            self._seqs,
            self._gpu,
            self._swap_space,
            self._computed_slots,
            self._num_computed_slots,
            self._block_size,
        )

    # -- internals -----------------------------------------------------------------------------

    def _select(self, seq_ids: Iterable[int], *, is_swapped: bool) -> list[BlockTable]:
        ids = list(seq_ids)
        if len(set(ids)) != len(ids):
            raise KVCacheError(f"repeated seq ids in {ids}")
        seqs = [self._seq(seq_id) for seq_id in ids]
        for seq_id, seq in zip(ids, seqs, strict=True):
            if seq.is_swapped != is_swapped:
                state = "already swapped out" if seq.is_swapped else "not swapped out"
                raise KVCacheError(f"seq {seq_id} is {state}")
        return seqs

    def _swap(self, seq_ids: Iterable[int], *, to_cpu: bool) -> int:
        seqs = self._select(seq_ids, is_swapped=not to_cpu)
        blocks = unique_blocks(seqs)
        copy_of = self._swap_space.copy_blocks(blocks, self._gpu, to_cpu=to_cpu)
        for seq in seqs:
            if to_cpu and not seq.slots_kept:  # its blocks' counts released below
                self._keep_slots(seq)
            if to_cpu:  # as one vLLM free_blocks call, tail first
                self._release_gpu_many(seq.block_table[::-1])
            else:
                for block in reversed(seq.block_table):
                    self._swap_space.release(block)
            seq.block_table = [copy_of[b] for b in seq.block_table]
            seq.is_swapped = to_cpu
            if not to_cpu:
                for i, block in enumerate(seq.block_table):
                    self._note_computed(
                        block, clamp_fill(seq.num_computed_tokens, i, self._block_size)
                    )
        return len(blocks)

    def _max_hit_blocks(self, num_prompt_tokens: int) -> int:
        return max(0, (num_prompt_tokens - 1) // self._block_size)


def _not_one_block(seq_id: int, seq: BlockTable, num_tokens: int) -> str:
    """`append_blocks`' refusal of an entry that is not one new block of the sequence's own."""
    return (
        f"seq {seq_id}: {seq.num_tokens} -> {num_tokens} slots over {len(seq.block_table)} "
        "blocks is not one new block of its own"
    )

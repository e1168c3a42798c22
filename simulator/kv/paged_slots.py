"""Paged KV cache, the per-step part: sequences' slots over a GPU BlockPool, grown, committed
and freed every step, and the memory they hold. `PagedKVCache` (paged_cache.py) adds the rest.

Mechanism only: it never decides who runs, who is preempted or which request comes next.

Block tables map a sequence's logical blocks to physical ones (block_size = 4 here). After
`fork(A, B)` both tables point at the same blocks. A write into a shared, partly filled last block
copies it first (copy-on-write); the last holder writes in place:

    after fork(A, B)            B appends a token           A appends a token
    A: [ 7 | 2 | 5 ]            A: [ 7 | 2 | 5 ]            A: [ 7 | 2 | 5 ]
    B: [ 7 | 2 | 5 ]            B: [ 7 | 2 | 9 ]            B: [ 7 | 2 | 9 ]
    ref  2   2   2              ref  2   2  5:1, 9:1        5 is A's alone: no copy,
    5 holds 2 of its 4 slots    BlockCopy(src=5, dst=9)     A writes into it in place

`commit` registers full, computed blocks in the prefix cache (V1 registers a step's blocks when
it takes them: `PagedKVCache.cache_blocks`). `free` releases a table tail first: its tail blocks
reach the LRU queue first and are evicted first, so shared prefixes live longest.

Memory accounting keeps a running count of computed slots per GPU block (`_computed_slots`, kept
by cache_slots.py's `CacheSlots`), so `memory_breakdown` only walks each live sequence's
not-yet-computed tail (one block per sequence after a step's commit), never the whole pool. A
private sequence's full computed blocks (none of them shared, hit, registered or swapped: the
usual request without a prefix hit) keep no count there: each holds block_size slots, read off
its computed tokens, so a prompt's blocks are neither counted at commit nor cleared at free
(`BlockTable.slots_kept`; `_keep_slots` writes the counts once that changes).

These methods run per sequence per step, the simulator's hottest code: their loops keep to local
aliases and integer arithmetic, with helpers inlined where the comments say so.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pagesim.simulator.core.errors import KVCacheError
from pagesim.simulator.core.memory import MemoryBreakdown, MemoryRow
from pagesim.simulator.core.plan import BlockCopy
from pagesim.simulator.kv.block_pool import EvictionOrder
from pagesim.simulator.kv.block_table import BlockTable, clamp_fill, hand_out
from pagesim.simulator.kv.cache_slots import CacheSlots
from pagesim.simulator.kv.swap_space import SwapSpace

_NO_COPIES: tuple[BlockCopy, ...] = ()


class PagedSlots(CacheSlots[BlockTable]):
    """Block tables of sequences (ids chosen by the caller) over `num_blocks` GPU blocks: the
    per-step operations. Sequences enter through `PagedKVCache.add_seq` and `fork`."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        num_cpu_blocks: int = 0,
        enable_prefix_cache: bool = False,
        eviction: EvictionOrder = EvictionOrder.PLAIN_FIRST,
        allow_duplicate_hashes: bool = False,
        reuse_unhashed_first: bool = False,
    ) -> None:
        if num_blocks < 1 or block_size < 1 or num_cpu_blocks < 0:
            raise KVCacheError(
                f"need num_blocks >= 1, block_size >= 1, num_cpu_blocks >= 0; got "
                f"{num_blocks}, {block_size}, {num_cpu_blocks}"
            )
        super().__init__(
            num_blocks,
            block_size,
            enable_prefix_cache,
            eviction,
            allow_duplicate_hashes,
            reuse_unhashed_first,
        )
        self._gpu_refs = self._gpu.ref_counts  # read-only view for the hot paths
        self._swap_space = SwapSpace(num_cpu_blocks)  # the CPU pool

    @property
    def num_free_blocks(self) -> int:
        """GPU blocks allocatable now: every block no sequence holds (evictable cached ones
        count as free). Asked per sequence per step (vLLM V0's one free block per sequence),
        so answered from the pool's count, an attribute read."""
        return self._num_gpu_blocks - self._gpu.num_used_blocks

    def num_blocks_needed(self, seq_id: int, num_new_tokens: int) -> int:
        """New GPU blocks `append_slots` would take, a copy-on-write copy included."""
        seq = self._seqs.get(seq_id)
        if seq is None or seq.is_swapped:
            seq = self._gpu_seq(seq_id)  # raises, naming the problem
        if num_new_tokens <= 0:
            if num_new_tokens < 0:
                raise KVCacheError(f"seq {seq_id}: cannot append {num_new_tokens} tokens")
            return 0
        # Called per sequence per step (hot): the shared-partial test is inlined.
        bs = self._block_size
        num_tokens = seq.num_tokens
        table = seq.block_table
        needed = (num_tokens + num_new_tokens + bs - 1) // bs - len(table)
        if num_tokens % bs and self._gpu_refs[table[-1]] > 1:
            needed += 1  # the copy-on-write copy of the shared, partly filled last block
        return needed

    def num_blocks_to_hold(self, seq_id: int, num_tokens: int, max_chunk: int) -> int:
        """More GPU blocks the sequence needs to hold `num_tokens` tokens (`max_chunk`, the
        hybrid cache's, changes nothing: every block of a full-attention sequence stays)."""
        have = len(self._gpu_seq(seq_id).block_table)
        return max(0, -(-num_tokens // self._block_size) - have)

    def allocate_slots(
        self,
        seq_ids: Sequence[int],
        num_new_tokens: int | Sequence[int],
        reserve_blocks: int = 0,
    ) -> tuple[BlockCopy, ...] | None:
        """Grow sequences by `num_new_tokens` slots each (one count for all, or one per sequence),
        all or nothing: the only way a sequence grows.

        Returns the copy-on-write copies made (usually none), or None when the free blocks less
        `reserve_blocks` cannot hold the growth; then nothing changed. Needs are counted per
        sequence, as `num_blocks_needed` does (sequences sharing a partly filled last block each
        count its copy, though the last of them will write in place). Blocks are taken in the
        order of `seq_ids`, each sequence's in table order.
        """
        gpu = self._gpu
        bs = self._block_size
        refs = self._gpu_refs
        seqs = self._seqs
        if isinstance(num_new_tokens, int):
            if len(seq_ids) == 1 and not reserve_blocks and num_new_tokens >= 0:
                # One sequence (a decode step's usual call): inline, unless its last block is
                # shared and partly filled (a copy-on-write copy: the general path below).
                seq = seqs.get(seq_ids[0])
                if seq is not None and not seq.is_swapped:
                    num_tokens = seq.num_tokens
                    table = seq.block_table
                    if not (num_tokens % bs and refs[table[-1]] > 1):
                        num_new_blocks = (num_tokens + num_new_tokens + bs - 1) // bs - len(table)
                        if num_new_blocks > self._num_gpu_blocks - gpu.num_used_blocks:
                            return None
                        seq.num_tokens = num_tokens + num_new_tokens
                        if num_new_blocks == 1:
                            table.append(gpu.allocate())
                        elif num_new_blocks:
                            table.extend(gpu.allocate_many(num_new_blocks))
                        return _NO_COPIES
            counts: Sequence[int] = [num_new_tokens] * len(seq_ids)
        else:
            counts = num_new_tokens
            if len(counts) != len(seq_ids):
                raise KVCacheError(f"{len(counts)} token counts for {len(seq_ids)} sequences")
        # Several sequences: count every one's blocks first (all or nothing), inline while no
        # copy-on-write is involved (a decode group's members crossing into new blocks).
        # (The counts match the ids: checked above, or made from them.)
        needed = 0
        grown: list[tuple[BlockTable, int, int]] = []  # (sequence, new blocks, tokens after)
        get = seqs.get
        for seq_id, count in zip(seq_ids, counts):  # noqa: B905
            seq = get(seq_id)
            if seq is None or seq.is_swapped or count < 0:
                break
            num_tokens = seq.num_tokens
            table = seq.block_table
            if count and num_tokens % bs and refs[table[-1]] > 1:
                break
            num_new_blocks = (num_tokens + count + bs - 1) // bs - len(table)
            needed += num_new_blocks
            grown.append((seq, num_new_blocks, num_tokens + count))
        else:
            if self._num_gpu_blocks - gpu.num_used_blocks - needed < reserve_blocks:
                return None
            hand_out(gpu.allocate_many(needed) if needed else [], grown)
            return _NO_COPIES
        # The general path: validated, copy-on-write copies made in order.
        needed = sum(map(self.num_blocks_needed, seq_ids, counts))  # raises on a bad sequence
        if self._num_gpu_blocks - gpu.num_used_blocks - needed < reserve_blocks:
            return None
        copies: list[BlockCopy] = []
        for seq_id, count in zip(seq_ids, counts, strict=True):
            if count:
                self._append(self._seqs[seq_id], count, copies)
        return tuple(copies) if copies else _NO_COPIES

    def commit(
        self, seq_id: int, num_computed_tokens: int, block_hashes: Sequence[int] = ()
    ) -> None:
        """The step finished: the first `num_computed_tokens` slots hold KV.

        With the prefix cache on, each block now full of computed KV is registered under
        `block_hashes[i]` (pass all the sequence's full-block hashes; extra ones are ignored).
        """
        seq = self._seqs.get(seq_id)
        if seq is None or seq.is_swapped:
            seq = self._gpu_seq(seq_id)  # raises, naming the problem
        old = seq.num_computed_tokens
        if not old <= num_computed_tokens <= seq.num_tokens:
            raise KVCacheError(
                f"seq {seq_id}: commit of {num_computed_tokens} computed tokens, expected "
                f"{old}..{seq.num_tokens}"
            )
        table = seq.block_table
        bs = self._block_size
        # Hot (a prompt chunk's many blocks): clamp_fill and _note_computed inlined; blocks
        # now full gain bs minus what they held (never negative), the partial last one its fill.
        computed_slots = self._computed_slots
        start = old // bs
        num_full = num_computed_tokens // bs
        if num_full > start and not seq.slots_kept:
            # A private sequence: its full blocks keep no count (their slots are its computed
            # tokens'), so only the one it filled from `old` loses what it held.
            self._num_computed_slots += num_full * bs - old
            if old > start * bs:
                computed_slots[table[start]] = 0
        elif num_full > start:
            full = table[start:num_full]
            # Unless one is shared (the pool's audited counts) or was cached before computed (a
            # hit counts it full), they hold what the sequence computed from their start.
            gpu = self._gpu
            held = old - start * bs
            if seq.num_registered_blocks > start or (
                gpu.num_prefix_saved_blocks or gpu.num_fork_saved_blocks
            ):
                held = sum(map(computed_slots.__getitem__, full))
            self._num_computed_slots += bs * len(full) - held
            for block in full:
                computed_slots[block] = bs
        fill = num_computed_tokens - num_full * bs
        if fill:
            block = table[num_full]
            gained = fill - computed_slots[block]
            if gained > 0:
                computed_slots[block] = fill
                self._num_computed_slots += gained
        seq.num_computed_tokens = num_computed_tokens
        if self._enable_prefix_cache and block_hashes:
            num_full = min(num_computed_tokens // bs, len(block_hashes))
            first = seq.num_registered_blocks
            if num_full > first:
                if not seq.slots_kept:
                    self._keep_slots(seq)
                self._gpu.cache_many(table[first:num_full], block_hashes[first:num_full])
            seq.num_registered_blocks = max(seq.num_registered_blocks, num_full)

    def _keep_slots(self, seq: BlockTable) -> None:
        """Put a private sequence's full computed blocks' slots (bs each) in the per-block
        list, as a sequence's are once a block of it may be registered, shared or swapped (the
        readers of the list then see every block's count)."""
        computed_slots = self._computed_slots
        bs = self._block_size
        for block in seq.block_table[: seq.num_computed_tokens // bs]:
            computed_slots[block] = bs
        seq.slots_kept = True

    def commit_one(self, seq_id: int) -> None:
        """`commit(seq_id, computed + 1)` with no block hashes: a decode step wrote one slot.

        The scheduler's hot path (every decoding sequence, every step), hence its own method.
        """
        seq = self._seqs.get(seq_id)
        if seq is None or seq.is_swapped or seq.num_computed_tokens >= seq.num_tokens:
            seq = self._gpu_seq(seq_id)
            raise KVCacheError(
                f"seq {seq_id}: commit of one more computed token, "
                f"{seq.num_computed_tokens} of {seq.num_tokens} are computed already"
            )
        old = seq.num_computed_tokens
        seq.num_computed_tokens = old + 1
        bs = self._block_size
        block = seq.block_table[old // bs]
        fill = old % bs + 1
        gained = fill - self._computed_slots[block]
        if gained > 0:
            # a private sequence's block, full now, keeps no count (BlockTable.slots_kept)
            self._computed_slots[block] = 0 if fill == bs and not seq.slots_kept else fill
            self._num_computed_slots += gained

    def free(self, seq_id: int, *, hashes_full_blocks: bool = False) -> None:
        """Drop a sequence (on GPU or swapped out), releasing its blocks tail first, as one
        vLLM `free_blocks` call. `hashes_full_blocks`: its full blocks go where hashed blocks
        go in the free order though it never registered them (a private request, whose hashing
        pagesim skips: policies/group_hashes.py; vLLM hashed them)."""
        seq = self._seqs.pop(seq_id, None) or self._seq(seq_id)  # (unknown: raises)
        if seq.is_swapped:
            for block in reversed(seq.block_table):
                self._swap_space.release(block)
            return
        table = seq.block_table
        bs = self._block_size
        num_hashed_like = seq.num_tokens // bs if hashes_full_blocks else 0
        computed_slots = self._computed_slots
        if not seq.slots_kept:
            # A private sequence (every block its own): the partly computed block, if any, is
            # the only one with a count, and the slots it computed go with it.
            if self._gpu.free_table(table, num_hashed_like, hashless=True):
                held = seq.num_computed_tokens
                self._num_computed_slots -= held
                if held % bs:
                    computed_slots[table[held // bs]] = 0
                return
            self._keep_slots(seq)  # (not expected: a block of it shared)
        # If every block is this sequence's alone, its computed slots go with it (zeroed in
        # `free_table`'s pass), as many as it computed unless it cached a block before
        # computing it (a hit on it, by an admission refused since, counted it full):
        # paged_audit.py checks the counts.
        held = seq.num_computed_tokens
        if seq.num_registered_blocks * bs > held:
            held = sum(map(computed_slots.__getitem__, table))
        if self._gpu.free_table(table, num_hashed_like, computed_slots):
            self._num_computed_slots -= held
            return
        self._release_gpu_many(table[::-1], frozenset(table[:num_hashed_like]))

    # -- accounting ----------------------------------------------------------------------------

    def memory_breakdown(
        self,
        seq_ids: Sequence[int] | None = None,
        *,
        num_uncommitted: int = 0,
        num_reserved_elsewhere: int = 0,
    ) -> MemoryBreakdown:
        """Split the GPU KV capacity (docs/design.md, "Memory"); shared blocks count once.

        A held slot not yet computed is reserved if some holder will still fill it (position <
        its final length, given to `add_seq`), internal fragmentation otherwise. Evictable
        cached blocks are free.
        Cost: O(live sequences + their not-yet-computed blocks).

        A caller that accounts for some sequences in closed form (a decode group, whose members
        commit their tokens only when they leave) walks only the others (`seq_ids`) and adds
        what it knows: `num_uncommitted` computed slots not committed here, and
        `num_reserved_elsewhere` reserved slots of the sequences not walked (whose slots not
        yet appended here it counts as used: it appends them when its members leave).
        """
        reserved = num_reserved_elsewhere
        if seq_ids is None or seq_ids:
            reserved += self.num_reserved_slots(seq_ids)
        return MemoryBreakdown(*self.memory_row(num_uncommitted, reserved))

    def memory_row(self, num_uncommitted: int, num_reserved: int) -> MemoryRow:
        """`memory_breakdown`'s fields in order, walking nobody: `num_reserved` is every
        reserved slot (a decode group's closed form when it is all that runs)."""
        bs = self._block_size
        computed = self._num_computed_slots + num_uncommitted
        gpu = self._gpu
        used = gpu.num_used_blocks  # O(1): the pool's counters, read as attributes
        return (
            computed,
            num_reserved,
            used * bs - computed - num_reserved,  # internal fragmentation
            0,  # no external fragmentation in a paged cache
            (self._num_gpu_blocks - used) * bs,
            gpu.num_prefix_saved_blocks * bs,
            gpu.num_fork_saved_blocks * bs,
        )

    def num_reserved_slots(self, seq_ids: Iterable[int] | None = None) -> int:
        """Held, not yet computed slots that some holder will still fill (`memory_breakdown`):
        per block, up to the most any holder's final length reaches into it, less what is
        computed there; a block shared by several counts once.

        `seq_ids`: walk only these sequences' tails (a caller that accounts for the others'
        reserved slots in closed form, as a decode group does); all live ones by default.
        """
        seqs = self._seqs
        items = seqs.items() if seq_ids is None else ((s, seqs[s]) for s in seq_ids)
        refs = self._gpu_refs
        computed_slots = self._computed_slots
        bs = self._block_size
        reserved = 0
        need_of: dict[int, int] = {}  # shared block -> slots some holder will fill, from offset 0
        # Called every step over every sequence: the loop body is kept to integer arithmetic,
        # and a block with one holder (the usual) is counted at once, without the dict.
        for seq_id, seq in items:
            if seq.is_swapped:
                continue
            final_len = seq.final_len
            if final_len is None:
                raise KVCacheError(f"memory_breakdown: no final length for seq {seq_id}")
            table = seq.block_table
            for i in range(seq.num_computed_tokens // bs, len(table)):
                need = final_len - i * bs
                if need > bs:
                    need = bs
                block = table[i]
                if refs[block] == 1:
                    gap = need - computed_slots[block]
                    if gap > 0:
                        reserved += gap
                elif need > need_of.get(block, 0):
                    need_of[block] = need
        for block, need in need_of.items():
            gap = need - computed_slots[block]
            if gap > 0:
                reserved += gap
        return reserved

    # -- internals -----------------------------------------------------------------------------

    def _gpu_seq(self, seq_id: int) -> BlockTable:
        seq = self._seq(seq_id)
        if seq.is_swapped:
            raise KVCacheError(f"seq {seq_id} is swapped out: swap it in first")
        return seq

    def _append(self, seq: BlockTable, num_new_tokens: int, copies: list[BlockCopy]) -> None:
        """Append slots whose blocks `allocate_slots` found free; a write into a shared, partly
        filled last block copies it first (the picture at the top of this module)."""
        table = seq.block_table
        bs = self._block_size
        gpu = self._gpu
        if seq.num_tokens % bs and self._gpu_refs[table[-1]] > 1:
            src = table[-1]
            dst = gpu.allocate()
            self._note_computed(dst, clamp_fill(seq.num_computed_tokens, len(table) - 1, bs))
            table[-1] = dst
            self._release_gpu(src)  # others still hold it: ref_count stays >= 1
            copies.append(BlockCopy(src, dst))
        seq.num_tokens += num_new_tokens
        num_new_blocks = (seq.num_tokens + bs - 1) // bs - len(table)
        if num_new_blocks:
            table.extend(gpu.allocate_many(num_new_blocks))

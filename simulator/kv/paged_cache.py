"""Paged KV cache: per-sequence block tables over a GPU BlockPool, prefix cache, CPU swap space.

Mechanism only: it never decides who runs, who is preempted or which request comes next.

Block tables map a sequence's logical blocks to physical ones (block_size = 4 here). After
`fork(A, B)` both tables point at the same blocks. A write into a shared, partly filled last block
copies it first (copy-on-write); the last holder writes in place:

    after fork(A, B)            B appends a token           A appends a token
    A: [ 7 | 2 | 5 ]            A: [ 7 | 2 | 5 ]            A: [ 7 | 2 | 5 ]
    B: [ 7 | 2 | 5 ]            B: [ 7 | 2 | 9 ]            B: [ 7 | 2 | 9 ]
    ref  2   2   2              ref  2   2  5:1, 9:1        5 is A's alone: no copy,
    5 holds 2 of its 4 slots    BlockCopy(src=5, dst=9)     A writes into it in place

Only full, computed blocks enter the prefix cache (`commit` registers them), so a block allocated
in this step is never a hit for another sequence in the same step. `free` releases a table tail
first: its tail blocks reach the LRU queue first and are evicted first, so shared prefixes live
longest.

Memory accounting keeps a running count of computed slots per GPU block (`_computed_slots`), so
`memory_breakdown` only walks each live sequence's not-yet-computed tail (one block per sequence
after a step's commit), never the whole pool.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice

from pagesim.simulator.core.errors import KVCacheError
from pagesim.simulator.core.memory import MemoryBreakdown
from pagesim.simulator.core.plan import BlockCopy
from pagesim.simulator.kv.block_pool import BlockPool, invariant

_NO_COPIES: tuple[BlockCopy, ...] = ()


@dataclass(slots=True)
class _Seq:
    block_table: list[int]  # logical block i -> physical block (GPU, or CPU while swapped)
    num_tokens: int  # slots appended
    num_computed_tokens: int  # leading slots whose KV is written
    num_registered_blocks: int  # leading blocks already offered to the prefix cache
    final_len: int | None  # slots it will hold when finished (memory accounting only)
    is_swapped: bool = False


class PagedKVCache:
    """Block tables of sequences (ids chosen by the caller) over `num_blocks` GPU blocks."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        num_cpu_blocks: int = 0,
        enable_prefix_cache: bool = False,
    ) -> None:
        if num_blocks < 1 or block_size < 1 or num_cpu_blocks < 0:
            raise KVCacheError(
                f"need num_blocks >= 1, block_size >= 1, num_cpu_blocks >= 0; got "
                f"{num_blocks}, {block_size}, {num_cpu_blocks}"
            )
        self._block_size = block_size
        self._enable_prefix_cache = enable_prefix_cache
        self._gpu = BlockPool(num_blocks)
        self._gpu_refs = self._gpu.ref_counts  # read-only view for the hot paths
        self._cpu = BlockPool(num_cpu_blocks)
        self._cpu_hashes: dict[int, int] = {}  # CPU block -> prefix hash its GPU original held
        self._seqs: dict[int, _Seq] = {}
        self._computed_slots = [0] * num_blocks  # per GPU block; 0 while the block is free
        self._num_computed_slots = 0  # sum of the above
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
        return self._cpu.num_blocks

    @property
    def enable_prefix_cache(self) -> bool:
        return self._enable_prefix_cache

    @property
    def num_free_blocks(self) -> int:
        """GPU blocks allocatable now; evictable cached blocks count as free."""
        return self._gpu.num_free_blocks

    @property
    def num_used_blocks(self) -> int:
        return self._gpu.num_used_blocks

    @property
    def num_cached_blocks(self) -> int:
        return self._gpu.num_cached_blocks

    @property
    def num_cpu_free_blocks(self) -> int:
        return self._cpu.num_free_blocks

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

    def block_table(self, seq_id: int) -> tuple[int, ...]:
        """Physical block ids, GPU ones (CPU ones while the sequence is swapped out)."""
        return tuple(self._seq(seq_id).block_table)

    def num_tokens(self, seq_id: int) -> int:
        return self._seq(seq_id).num_tokens

    def num_computed_tokens(self, seq_id: int) -> int:
        return self._seq(seq_id).num_computed_tokens

    def ref_count(self, block: int) -> int:
        return self._gpu.ref_count(block)

    def block_hash(self, block: int) -> int | None:
        return self._gpu.block_hash(block)

    def count_prefix_hit_tokens(self, block_hashes: Sequence[int], num_prompt_tokens: int) -> int:
        """The tokens `add_seq` would hit now, without touching anything or counting a query."""
        num_hits = 0
        for block_hash in islice(block_hashes, self._max_hit_blocks(num_prompt_tokens)):
            if self._gpu.lookup(block_hash) is None:
                break
            num_hits += 1
        return num_hits * self._block_size

    def num_blocks_needed(self, seq_id: int, num_new_tokens: int) -> int:
        """New GPU blocks `append_slots` would take, a copy-on-write copy included."""
        seq = self._seqs.get(seq_id)
        if seq is None or seq.is_swapped:
            self._gpu_seq(seq_id)  # raises, naming the problem
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
        if self._enable_prefix_cache and num_prompt_tokens > 0:
            for block_hash in islice(block_hashes, self._max_hit_blocks(num_prompt_tokens)):
                block = self._gpu.lookup(block_hash)
                if block is None:
                    break
                self._gpu.touch(block)
                self._note_computed(block, self._block_size)  # counts an evictable one again
                table.append(block)
            self._num_prefix_query_tokens += num_prompt_tokens
            self._num_prefix_hit_tokens += len(table) * self._block_size
        num_hit_tokens = len(table) * self._block_size
        self._seqs[seq_id] = _Seq(table, num_hit_tokens, num_hit_tokens, len(table), final_len)
        return num_hit_tokens

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
                        if num_new_blocks > gpu.num_free_blocks:
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
        needed = 0
        grown: list[tuple[_Seq, int]] = []
        for seq_id, count in zip(seq_ids, counts, strict=True):
            seq = seqs.get(seq_id)
            if seq is None or seq.is_swapped or count < 0:
                break
            num_tokens = seq.num_tokens
            table = seq.block_table
            if count and num_tokens % bs and refs[table[-1]] > 1:
                break
            num_new_blocks = (num_tokens + count + bs - 1) // bs - len(table)
            needed += num_new_blocks
            grown.append((seq, num_new_blocks))
        else:
            if gpu.num_free_blocks - needed < reserve_blocks:
                return None
            blocks = iter(gpu.allocate_many(needed))
            for (seq, num_new_blocks), count in zip(grown, counts, strict=True):
                seq.num_tokens += count
                if num_new_blocks:
                    seq.block_table.extend(islice(blocks, num_new_blocks))
            return _NO_COPIES
        # The general path: validated, copy-on-write copies made in order.
        needed = sum(map(self.num_blocks_needed, seq_ids, counts))  # raises on a bad sequence
        if gpu.num_free_blocks - needed < reserve_blocks:
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
        # Hot (a prompt chunk's many blocks): _clamp_fill and _note_computed inlined; blocks
        # now full gain bs minus what they held (never negative), the partial last one its fill.
        computed_slots = self._computed_slots
        start = old // bs
        num_full = num_computed_tokens // bs
        if num_full > start:
            full = table[start:num_full]
            self._num_computed_slots += bs * len(full) - sum(map(computed_slots.__getitem__, full))
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
            for i in range(seq.num_registered_blocks, num_full):
                self._gpu.cache_block(table[i], block_hashes[i])
            seq.num_registered_blocks = max(seq.num_registered_blocks, num_full)

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
            self._computed_slots[block] = fill
            self._num_computed_slots += gained

    def fork(self, parent_seq_id: int, child_seq_id: int, *, final_len: int | None = None) -> None:
        """The child shares every block of the parent (copy-on-write later); its final length
        is the parent's unless given."""
        parent = self._gpu_seq(parent_seq_id)
        if child_seq_id in self._seqs:
            raise KVCacheError(f"fork: seq {child_seq_id} already exists")
        if parent.num_computed_tokens != parent.num_tokens:
            # Its pending writes would land in blocks the child now shares.
            raise KVCacheError(
                f"fork of seq {parent_seq_id} with uncomputed slots: commit its step first"
            )
        for block in parent.block_table:
            self._gpu.incref(block)
        self._seqs[child_seq_id] = _Seq(
            list(parent.block_table),
            parent.num_tokens,
            parent.num_computed_tokens,
            parent.num_registered_blocks,
            parent.final_len if final_len is None else final_len,
        )

    def free(self, seq_id: int) -> None:
        """Drop a sequence (on GPU or swapped out), releasing its blocks tail first."""
        seq = self._seq(seq_id)
        del self._seqs[seq_id]
        if seq.is_swapped:
            for block in reversed(seq.block_table):
                self._release_cpu(block)
        else:
            table = seq.block_table
            if self._gpu.free_unshared(table[::-1]):
                # Every block was this sequence's alone: its computed slots go with it.
                computed_slots = self._computed_slots
                self._num_computed_slots -= sum(map(computed_slots.__getitem__, table))
                for block in table:
                    computed_slots[block] = 0
                return
            for block in reversed(table):
                self._release_gpu(block)

    def evict_one(self) -> int | None:
        """Evict the least recently freed cached block (tests; `allocate` evicts by itself)."""
        return self._gpu.evict_one()

    # -- swap ----------------------------------------------------------------------------------

    def can_swap_out(self, seq_ids: Iterable[int]) -> bool:
        blocks = self._unique_blocks(self._select(seq_ids, is_swapped=False))
        return len(blocks) <= self._cpu.num_free_blocks

    def swap_out(self, seq_ids: Iterable[int]) -> int:
        """Copy the sequences' blocks to CPU; returns the number of blocks copied.

        A block shared among these sequences moves once and stays shared on CPU; a block also
        held by other sequences is copied and stays on GPU for them.
        """
        return self._swap(seq_ids, to_cpu=True)

    def can_swap_in(self, seq_ids: Iterable[int], reserve_blocks: int = 0) -> bool:
        blocks = self._unique_blocks(self._select(seq_ids, is_swapped=True))
        return self._gpu.num_free_blocks - len(blocks) >= reserve_blocks

    def swap_in(self, seq_ids: Iterable[int]) -> int:
        """Copy swapped sequences back to GPU (fresh block ids, same sharing); returns the count.

        Swapping in a subset of sequences that shared a CPU block gives that subset its own GPU
        copy; the rest keep the CPU block.
        """
        return self._swap(seq_ids, to_cpu=False)

    # -- accounting ----------------------------------------------------------------------------

    def memory_breakdown(
        self,
        seq_ids: Sequence[int] | None = None,
        *,
        num_uncommitted: int = 0,
        num_reserved_elsewhere: int = 0,
    ) -> MemoryBreakdown:
        """Split the GPU KV capacity (DESIGN.md "Memory"); shared blocks count once.

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
        bs = self._block_size
        reserved = num_reserved_elsewhere
        if seq_ids is None or seq_ids:
            reserved += self.num_reserved_slots(seq_ids)
        computed = self._num_computed_slots + num_uncommitted
        gpu = self._gpu
        return MemoryBreakdown(
            token_slots=computed,
            reserved_slots=reserved,
            internal_frag_slots=gpu.num_used_blocks * bs - computed - reserved,
            external_frag_slots=0,
            free_slots=gpu.num_free_blocks * bs,
        )

    def num_reserved_slots(self, seq_ids: Iterable[int] | None = None) -> int:
        """Held, not yet computed slots that some holder will still fill (`memory_breakdown`).

        `seq_ids`: walk only these sequences' tails (a caller that accounts for the others'
        reserved slots in closed form, as a decode group does); all live ones by default.
        """
        bs = self._block_size
        refs = self._gpu_refs
        computed_slots = self._computed_slots
        reserved = 0
        need_of: dict[int, int] = {}  # shared block -> slots some holder will fill, from offset 0
        # Called every step over every sequence: the loop body is kept to integer arithmetic,
        # and a block with one holder (the usual) is counted at once, without the dict.
        seqs = self._seqs
        items = seqs.items() if seq_ids is None else ((s, seqs[s]) for s in seq_ids)
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

    def walk_memory_breakdown(
        self, num_computed_of: Mapping[int, int] | None = None
    ) -> MemoryBreakdown:
        """`memory_breakdown` recomputed block by block from the tables alone (O(blocks); for
        checks). `num_computed_of[seq_id]` stands for a sequence's computed tokens where this
        cache has not been told of all of them yet (a decode group's members)."""
        bs = self._block_size
        overrides = num_computed_of or {}
        fill: dict[int, int] = {}
        need: dict[int, int] = {}
        for seq_id, seq in self._seqs.items():
            if seq.is_swapped:
                continue
            if seq.final_len is None:
                raise KVCacheError(f"memory_breakdown: no final length for seq {seq_id}")
            computed = overrides.get(seq_id, seq.num_computed_tokens)
            final_len = seq.final_len
            for i, block in enumerate(seq.block_table):
                start = i * bs
                filled = computed - start
                filled = bs if filled > bs else max(filled, 0)
                needed = final_len - start
                needed = bs if needed > bs else max(needed, 0)
                if filled > fill.get(block, 0):
                    fill[block] = filled
                else:
                    fill.setdefault(block, filled)
                if needed > need.get(block, 0):
                    need[block] = needed
                else:
                    need.setdefault(block, needed)
        token = sum(fill.values())
        reserved = sum(max(0, need[b] - fill[b]) for b in fill)
        return MemoryBreakdown(
            token_slots=token,
            reserved_slots=reserved,
            internal_frag_slots=self._gpu.num_used_blocks * bs - token - reserved,
            external_frag_slots=0,
            free_slots=self._gpu.num_free_blocks * bs,
        )

    def check_invariants(self) -> None:
        """Raise AssertionError if tables, pools and counters disagree (O(blocks); for tests)."""
        self._gpu.check_invariants()
        self._cpu.check_invariants()
        bs = self._block_size
        gpu_refs = [0] * self._gpu.num_blocks
        cpu_refs = [0] * self._cpu.num_blocks
        computed = [0] * self._gpu.num_blocks
        for seq_id, seq in self._seqs.items():
            where = f"seq {seq_id}"
            invariant(0 <= seq.num_computed_tokens <= seq.num_tokens, f"{where}: computed > tokens")
            invariant(len(seq.block_table) == -(-seq.num_tokens // bs), f"{where}: table length")
            invariant(seq.num_registered_blocks <= seq.num_computed_tokens // bs, f"{where}: reg")
            invariant(len(set(seq.block_table)) == len(seq.block_table), f"{where}: repeated block")
            refs = cpu_refs if seq.is_swapped else gpu_refs
            for i, block in enumerate(seq.block_table):
                refs[block] += 1
                if not seq.is_swapped:
                    fill = self._clamp_fill(seq.num_computed_tokens, i)
                    computed[block] = max(computed[block], fill)
        for pool, refs, name in ((self._gpu, gpu_refs, "GPU"), (self._cpu, cpu_refs, "CPU")):
            if pool.ref_counts != refs:  # compared in C; the message names the first difference
                block = next(b for b, r in enumerate(refs) if pool.ref_counts[b] != r)
                raise AssertionError(
                    f"{name} block {block}: ref_count {pool.ref_counts[block]} != "
                    f"{refs[block]} refs"
                )
        invariant(computed == self._computed_slots, "computed slots per block disagree")
        invariant(sum(computed) == self._num_computed_slots, "computed slot counter disagrees")
        if self._gpu.num_cached_blocks:
            for block in range(self._gpu.num_blocks):
                if gpu_refs[block] and self._gpu.block_hash(block) is not None:
                    invariant(computed[block] == bs, f"cached block {block} is not fully computed")
        for block in self._cpu_hashes:
            invariant(cpu_refs[block] > 0, f"hash kept for free CPU block {block}")

    # -- internals -----------------------------------------------------------------------------

    def _seq(self, seq_id: int) -> _Seq:
        seq = self._seqs.get(seq_id)
        if seq is None:
            raise KVCacheError(f"unknown seq {seq_id}")
        return seq

    def _gpu_seq(self, seq_id: int) -> _Seq:
        seq = self._seq(seq_id)
        if seq.is_swapped:
            raise KVCacheError(f"seq {seq_id} is swapped out: swap it in first")
        return seq

    def _select(self, seq_ids: Iterable[int], *, is_swapped: bool) -> list[_Seq]:
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
        blocks = self._unique_blocks(seqs)
        src_name, dst, dst_name = ("GPU", self._cpu, "CPU") if to_cpu else ("CPU", self._gpu, "GPU")
        if len(blocks) > dst.num_free_blocks:
            raise KVCacheError(
                f"swap {src_name} -> {dst_name} needs {len(blocks)} {dst_name} blocks, "
                f"{dst.num_free_blocks} free"
            )
        copy_of: dict[int, int] = {}
        for block, num_refs in blocks.items():
            copy = dst.allocate()
            for _ in range(num_refs - 1):
                dst.incref(copy)
            # The copy carries the prefix hash, so a swapped-in block can be hit again (it stays
            # uncached if that hash meanwhile lives in another GPU block).
            if to_cpu:
                block_hash = self._gpu.block_hash(block)
                if block_hash is not None:
                    self._cpu_hashes[copy] = block_hash
            elif (block_hash := self._cpu_hashes.get(block)) is not None:
                self._gpu.cache_block(copy, block_hash)
            copy_of[block] = copy
        release = self._release_gpu if to_cpu else self._release_cpu
        for seq in seqs:
            for block in reversed(seq.block_table):
                release(block)
            seq.block_table = [copy_of[b] for b in seq.block_table]
            seq.is_swapped = to_cpu
            if not to_cpu:
                for i, block in enumerate(seq.block_table):
                    self._note_computed(block, self._clamp_fill(seq.num_computed_tokens, i))
        return len(blocks)

    @staticmethod
    def _unique_blocks(seqs: list[_Seq]) -> dict[int, int]:
        """Each block the sequences reference (first-seen order) -> references among them."""
        counts: dict[int, int] = {}
        for seq in seqs:
            for block in seq.block_table:
                counts[block] = counts.get(block, 0) + 1
        return counts

    def _max_hit_blocks(self, num_prompt_tokens: int) -> int:
        return max(0, (num_prompt_tokens - 1) // self._block_size)

    def _clamp_fill(self, num_tokens: int, block_index: int) -> int:
        """How many of block `block_index`'s slots lie below position `num_tokens`."""
        return min(self._block_size, max(0, num_tokens - block_index * self._block_size))

    def _append(self, seq: _Seq, num_new_tokens: int, copies: list[BlockCopy]) -> None:
        """Append slots whose blocks `allocate_slots` found free; a write into a shared, partly
        filled last block copies it first (the picture at the top of this module)."""
        table = seq.block_table
        bs = self._block_size
        gpu = self._gpu
        if seq.num_tokens % bs and self._gpu_refs[table[-1]] > 1:
            src = table[-1]
            dst = gpu.allocate()
            self._note_computed(dst, self._clamp_fill(seq.num_computed_tokens, len(table) - 1))
            table[-1] = dst
            self._release_gpu(src)  # others still hold it: ref_count stays >= 1
            copies.append(BlockCopy(src, dst))
        seq.num_tokens += num_new_tokens
        num_new_blocks = (seq.num_tokens + bs - 1) // bs - len(table)
        if num_new_blocks:
            table.extend(gpu.allocate_many(num_new_blocks))

    def _note_computed(self, block: int, fill: int) -> None:
        """Block `block` now holds computed KV in its first `fill` slots."""
        gained = fill - self._computed_slots[block]
        if gained > 0:
            self._computed_slots[block] = fill
            self._num_computed_slots += gained

    def _release_gpu(self, block: int) -> None:
        if self._gpu.decref(block) == 0:
            self._num_computed_slots -= self._computed_slots[block]
            self._computed_slots[block] = 0

    def _release_cpu(self, block: int) -> None:
        if self._cpu.decref(block) == 0:
            self._cpu_hashes.pop(block, None)

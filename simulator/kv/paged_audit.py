"""The paged KV cache's audits: O(blocks) walks over every block table, for tests and checks.

`check_paged_invariants` recounts references and computed slots from the tables and compares
them with the pools and the running counters; `walk_memory_breakdown` recomputes the memory
breakdown block by block, which the cache keeps in O(sequences) per step. Neither changes
anything. The cache passes its parts in (`PagedKVCache.check_invariants`, `.walk_memory_breakdown`).
"""

from __future__ import annotations

from collections.abc import Mapping

from pagesim.simulator.core.errors import KVCacheError
from pagesim.simulator.core.memory import MemoryBreakdown
from pagesim.simulator.kv.block_pool import BlockPool
from pagesim.simulator.kv.block_table import BlockTable, clamp_fill
from pagesim.simulator.kv.pool_audit import invariant
from pagesim.simulator.kv.swap_space import SwapSpace


def check_paged_invariants(
    seqs: Mapping[int, BlockTable],
    gpu: BlockPool,
    swap_space: SwapSpace,
    computed_slots: list[int],
    num_computed_slots: int,
    block_size: int,
) -> None:
    """Raise AssertionError if tables, pools and counters disagree (O(blocks))."""
    cpu = swap_space.pool
    gpu.check_invariants()
    cpu.check_invariants()
    bs = block_size
    gpu_refs = [0] * gpu.num_blocks
    cpu_refs = [0] * cpu.num_blocks
    computed = [0] * gpu.num_blocks
    kept = [0] * gpu.num_blocks  # the per-block list as the cache keeps it (BlockTable.slots_kept)
    private: list[int] = []  # the blocks of sequences whose full blocks keep no count
    for seq_id, seq in seqs.items():
        where = f"seq {seq_id}"
        invariant(0 <= seq.num_computed_tokens <= seq.num_tokens, f"{where}: computed > tokens")
        invariant(len(seq.block_table) == -(-seq.num_tokens // bs), f"{where}: table length")
        invariant(seq.num_registered_blocks <= seq.num_computed_tokens // bs, f"{where}: reg")
        invariant(len(set(seq.block_table)) == len(seq.block_table), f"{where}: repeated block")
        if not seq.slots_kept:
            invariant(not seq.is_swapped, f"{where}: swapped out, its slots not kept")
            invariant(not seq.num_registered_blocks, f"{where}: registered, its slots not kept")
            private += seq.block_table
        refs = cpu_refs if seq.is_swapped else gpu_refs
        for i, block in enumerate(seq.block_table):
            refs[block] += 1
            if not seq.is_swapped:
                fill = clamp_fill(seq.num_computed_tokens, i, bs)
                computed[block] = max(computed[block], fill)
                if seq.slots_kept or fill < bs:
                    kept[block] = max(kept[block], fill)
    for pool, refs, name in ((gpu, gpu_refs, "GPU"), (cpu, cpu_refs, "CPU")):
        if pool.ref_counts != refs:  # compared in C; the message names the first difference
            block = next(b for b, r in enumerate(refs) if pool.ref_counts[b] != r)
            raise AssertionError(
                f"{name} block {block}: ref_count {pool.ref_counts[block]} != {refs[block]} refs"
            )
    for block in private:  # each of them its sequence's alone, uncached
        invariant(gpu_refs[block] == 1, f"GPU block {block}: shared, its slots not kept")
        invariant(gpu.block_hash(block) is None, f"GPU block {block}: cached, slots not kept")
    invariant(kept == computed_slots, "computed slots per block disagree")
    invariant(sum(computed) == num_computed_slots, "computed slot counter disagrees")
    if gpu.num_cached_blocks:
        for block in range(gpu.num_blocks):
            if gpu_refs[block] and gpu.block_hash(block) is not None:
                invariant(computed[block] == bs, f"cached block {block} is not fully computed")
    for block in swap_space.hashes:
        invariant(cpu_refs[block] > 0, f"hash kept for free CPU block {block}")


def walk_memory_breakdown(
    seqs: Mapping[int, BlockTable],
    gpu: BlockPool,
    block_size: int,
    num_computed_of: Mapping[int, int] | None = None,
) -> MemoryBreakdown:
    """The memory breakdown recomputed block by block from the tables alone (O(blocks)).
    `num_computed_of[seq_id]` stands for a sequence's computed tokens where the cache has not
    been told of all of them yet (a decode group's members)."""
    bs = block_size
    overrides = num_computed_of or {}
    fill: dict[int, int] = {}
    need: dict[int, int] = {}
    for seq_id, seq in seqs.items():
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
        internal_frag_slots=gpu.num_used_blocks * bs - token - reserved,
        external_frag_slots=0,
        free_slots=gpu.num_free_blocks * bs,
    )

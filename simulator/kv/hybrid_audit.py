"""The hybrid KV cache's audits: O(blocks) walks over every block table, for tests and checks
(`HybridKVCache.check_invariants`, `.walk_memory_breakdown`). Neither changes anything.

Beside the pool's own invariants: reference counts equal the tables' references; every table
has one entry per logical block of its tokens; a sliding table is null up to some block and
live after it, holding at most `HybridLayout.max_sliding_blocks` after its last allocation;
computed slots per block and their sum agree with the tables.
"""

from __future__ import annotations

from collections.abc import Mapping

from pagesim.simulator.core.memory import MemoryBreakdown
from pagesim.simulator.kv.block_pool import BlockPool
from pagesim.simulator.kv.hybrid_layout import HybridLayout, cdiv
from pagesim.simulator.kv.hybrid_table import HybridSeq, blocks_at
from pagesim.simulator.kv.pool_audit import invariant


def check_hybrid_invariants(
    seqs: Mapping[int, HybridSeq],
    gpu: BlockPool,
    layout: HybridLayout,
    computed_slots: list[int],
    num_computed_slots: int,
) -> None:
    gpu.check_invariants()
    bs = layout.block_size
    refs = [0] * gpu.num_blocks
    fills = [0] * gpu.num_blocks
    for seq_id, seq in seqs.items():
        where = f"seq {seq_id}"
        invariant(0 <= seq.num_computed_tokens <= seq.num_tokens, f"{where}: computed > tokens")
        logical = cdiv(seq.num_tokens, bs)
        if layout.num_full_groups:
            invariant(len(seq.full) == logical, f"{where}: full table length")
        if layout.num_sliding_groups:
            invariant(len(seq.sliding) == logical, f"{where}: sliding table length")
            live = [b is not None for b in seq.sliding]
            first_live = live.index(True) if any(live) else len(live)
            invariant(all(live[first_live:]), f"{where}: a null block after a live one")
            # Freed before each allocation: at most the window, the last step's new tokens,
            # and the block the window's first token straddles.
            bound = layout.max_sliding_blocks(seq.num_last_new_tokens)
            invariant(len(live) - first_live <= bound, f"{where}: window holds > {bound} blocks")
        invariant(len(seq.state) in (0, layout.num_state_groups), f"{where}: state blocks")
        for i in range(logical):
            fill = min(bs, max(0, seq.num_computed_tokens - i * bs))
            for block in blocks_at(seq, i):
                refs[block] += 1
                fills[block] = max(fills[block], fill)
        for block in seq.state:
            refs[block] += 1
            fills[block] = bs
        for bundle in [*seq.full, *seq.sliding]:
            if bundle is not None:
                invariant(len(set(bundle)) == len(bundle), f"{where}: a block in two groups")
    if gpu.ref_counts != refs:
        block = next(b for b, r in enumerate(refs) if gpu.ref_counts[b] != r)
        raise AssertionError(
            f"block {block}: ref_count {gpu.ref_counts[block]} != {refs[block]} table refs"
        )
    invariant(fills == computed_slots, "computed slots per block disagree")
    invariant(sum(fills) == num_computed_slots, "computed slot counter disagrees")


def walk_hybrid_breakdown(
    seqs: Mapping[int, HybridSeq], gpu: BlockPool, block_size: int, overrides: Mapping[int, int]
) -> MemoryBreakdown:
    bs = block_size
    fill: dict[int, int] = {}
    need: dict[int, int] = {}
    for seq_id, seq in seqs.items():
        assert seq.final_len is not None, f"seq {seq_id}: no final length"
        computed = overrides.get(seq_id, seq.num_computed_tokens)
        for i in range(cdiv(seq.num_tokens, bs)):
            filled = min(bs, max(0, computed - i * bs))
            needed = min(bs, max(0, seq.final_len - i * bs))
            for block in blocks_at(seq, i):
                fill[block] = max(fill.get(block, 0), filled)
                need[block] = max(need.get(block, 0), needed)
        for block in seq.state:
            fill[block] = need[block] = bs
    token = sum(fill.values())
    reserved = sum(max(0, need[b] - fill[b]) for b in fill)
    return MemoryBreakdown(
        token_slots=token,
        reserved_slots=reserved,
        internal_frag_slots=gpu.num_used_blocks * bs - token - reserved,
        external_frag_slots=0,
        free_slots=gpu.num_free_blocks * bs,
    )

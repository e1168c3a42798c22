"""One sequence's record in the paged KV cache: its block table and the counts of its slots.

A block table maps a sequence's logical block i (its tokens i·block_size .. (i+1)·block_size − 1)
to a physical block: a GPU block, or a CPU one while the sequence is swapped out. Plain data: the
cache (`paged_slots`, `paged_cache`) and its audits (`paged_audit`) read and change it, some of it
through the walks over tables below (blocks handed out, blocks counted by holder).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(slots=True)
class BlockTable:
    block_table: list[int]  # logical block i -> physical block (GPU, or CPU while swapped)
    num_tokens: int  # slots appended
    num_computed_tokens: int  # leading slots whose KV is written
    num_registered_blocks: int  # leading blocks already offered to the prefix cache
    final_len: int | None  # slots it will hold when finished (memory accounting only)
    is_swapped: bool = False
    # Whether the cache's per-block computed-slot list holds this sequence's full computed
    # blocks (bs each). False: a private sequence (no block shared, hit, registered or
    # swapped), whose full computed blocks hold 0 there, their slots read off
    # num_computed_tokens (PagedSlots._keep_slots; paged_audit.py checks it)
    slots_kept: bool = True


def unique_blocks(seqs: Iterable[BlockTable]) -> dict[int, int]:
    """Each block the sequences reference (first-seen order) -> references among them."""
    counts: dict[int, int] = {}
    for seq in seqs:
        for block in seq.block_table:
            counts[block] = counts.get(block, 0) + 1
    return counts


def clamp_fill(num_tokens: int, block_index: int, block_size: int) -> int:
    """How many of block `block_index`'s slots lie below position `num_tokens`."""
    return min(block_size, max(0, num_tokens - block_index * block_size))


def hand_out(blocks: Sequence[int], grown: list[tuple[BlockTable, int, int]]) -> None:
    """Give each (sequence, new blocks, tokens after) of `grown` its blocks, taken in order
    from `blocks`, and its new slot count."""
    at = 0
    for seq, num_new_blocks, num_tokens in grown:
        seq.num_tokens = num_tokens
        if num_new_blocks == 1:
            seq.block_table.append(blocks[at])
            at += 1
        elif num_new_blocks:
            seq.block_table.extend(blocks[at : at + num_new_blocks])
            at += num_new_blocks

"""Block tables for hybrid models: full-attention and sliding-window layer groups over one block
pool, with the blocks that fall wholly out of a window freed as vLLM's hybrid KV-cache manager
frees them.

vLLM V1 keeps one block table per request per KV-cache group of layers. For a sliding-window
group, before each allocation `SlidingWindowManager.remove_skipped_blocks(request_id,
num_computed_tokens)` (vllm/v1/core/single_type_kv_cache_manager.py, as read at
vllm-project/vllm commit 002f349) computes

    last_useful_token = num_computed_tokens - sliding_window + 1
    last_useful_block = last_useful_token // block_size

and frees every block before `last_useful_block`, leaving the null block in its table slot:

    window W = 5, block size 4, 13 tokens computed: tokens 9..12 (+ the next) are attended
    table  [ null ][ null ][ b7 ][ b8 ]      last_useful_token = 13 - 5 + 1 = 9 -> block 2
             0..3    4..7   8..11  12..

so a window group holds at most cdiv(W - 1 + n, block_size) + 1 blocks after a step that adds
n tokens (one block more than the window for decode). Full-attention groups never free early.

Every group's block is `block_size` tokens of `layers_per_group` layers, so one pool serves all
groups (vLLM likewise gives every group one page size). Mechanism only: which request to run or
preempt is the policy's business.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pagesim.simulator.core.errors import KVCacheError
from pagesim.simulator.core.model_spec import LayerKind, ModelSpec
from pagesim.simulator.kv.block_pool import BlockPool, invariant


@dataclass(frozen=True, slots=True)
class KVGroup:
    """Layers sharing one block table per request: full attention (window None) or one window."""

    window: int | None

    @property
    def is_sliding(self) -> bool:
        return self.window is not None


def kv_groups(model: ModelSpec) -> tuple[tuple[KVGroup, ...], int]:
    """The model's KV layers in groups of equal size (the gcd of the full and sliding layer
    counts, so no group is padded), and that size. State layers keep no per-token KV."""
    num_full = model.num_layers_of(LayerKind.FULL)
    num_sliding = model.num_layers_of(LayerKind.SLIDING)
    size = math.gcd(num_full, num_sliding) or 1
    groups = [KVGroup(None)] * (num_full // size)
    groups += [KVGroup(model.sliding_window)] * (num_sliding // size)
    return tuple(groups), size


def max_window_blocks(window: int, num_new_tokens: int, block_size: int) -> int:
    """The most blocks a window group holds after a step adding `num_new_tokens`."""
    return -(-(window - 1 + num_new_tokens) // block_size) + 1


class HybridBlockTables:
    """Per request, one block table per group; None marks a slot freed out of its window."""

    def __init__(self, pool: BlockPool, groups: Sequence[KVGroup], block_size: int) -> None:
        if block_size <= 0 or not groups:
            raise KVCacheError("hybrid block tables need block_size > 0 and at least one group")
        for group in groups:
            if group.window is not None and group.window <= 0:
                raise KVCacheError(f"a sliding window must be > 0 tokens, got {group.window}")
        self.pool = pool
        self.groups = tuple(groups)
        self.block_size = block_size
        self._tables: dict[int, list[list[int | None]]] = {}

    def blocks_held(self, request_id: int, group: int) -> int:
        """Live (not freed) blocks of one request in one group."""
        table = self._tables.get(request_id)
        return 0 if table is None else sum(b is not None for b in table[group])

    def num_new_blocks(self, request_id: int, num_tokens: int) -> int:
        """Blocks `allocate` would take to hold `num_tokens` tokens in every group."""
        table = self._tables.get(request_id)
        have = 0 if table is None else len(table[0])
        return max(0, -(-num_tokens // self.block_size) - have) * len(self.groups)

    def remove_skipped_blocks(self, request_id: int, num_computed_tokens: int) -> None:
        """Free each window group's blocks wholly before its window (vLLM's rule, above)."""
        table = self._tables.get(request_id)
        if table is None:
            return
        for group, blocks in zip(self.groups, table, strict=True):
            if group.window is None:
                continue
            last_useful_block = (num_computed_tokens - group.window + 1) // self.block_size
            freed: list[int] = []
            for i in range(min(last_useful_block, len(blocks)) - 1, -1, -1):
                block = blocks[i]
                if block is None:
                    break  # everything before it was freed by an earlier call
                freed.append(block)
                blocks[i] = None
            for block in freed:
                self.pool.decref(block)

    def allocate(self, request_id: int, num_computed_tokens: int, num_new_tokens: int) -> bool:
        """Room for `num_new_tokens` after `num_computed_tokens`: first free what left the
        windows, then take the new blocks in every group, or nothing (False) if the pool is
        short."""
        self.remove_skipped_blocks(request_id, num_computed_tokens)
        total = num_computed_tokens + num_new_tokens
        needed = self.num_new_blocks(request_id, total)
        if needed > self.pool.num_free_blocks:
            return False
        table = self._tables.setdefault(request_id, [[] for _ in self.groups])
        per_group = needed // len(self.groups)
        for blocks in table:
            blocks.extend(self.pool.allocate_many(per_group))
        return True

    def free(self, request_id: int) -> None:
        """Free a finished or preempted request's blocks, tail blocks first."""
        for blocks in self._tables.pop(request_id, []):
            for block in reversed(blocks):
                if block is not None:
                    self.pool.decref(block)

    def check_invariants(self) -> None:
        """The pool's own, plus: the tables hold exactly the pool's used blocks, each once."""
        self.pool.check_invariants()
        live = [b for table in self._tables.values() for g in table for b in g if b is not None]
        invariant(len(live) == len(set(live)), "a block is in two table slots")
        invariant(len(live) == self.pool.num_used_blocks, "tables and pool disagree on use")

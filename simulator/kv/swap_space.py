"""CPU swap space: the CPU block pool, the prefix hashes swapped blocks carry, the swap copy.

Swapping a set of sequences copies each block they reference once, whatever the number of them
sharing it: the copy gets as many references as the block had among them, so sharing survives
the trip. A GPU block's prefix hash travels with its copy and comes back with it, so a swapped-in
block can be hit again. Which sequences move, and when, is the caller's (the cache's) business.
"""

from __future__ import annotations

from pagesim.simulator.core.errors import KVCacheError
from pagesim.simulator.kv.block_pool import BlockPool


class SwapSpace:
    """`num_cpu_blocks` CPU blocks and the prefix hash each swapped-out copy carries."""

    __slots__ = ("hashes", "pool")

    def __init__(self, num_cpu_blocks: int) -> None:
        self.pool = BlockPool(num_cpu_blocks)
        self.hashes: dict[int, int] = {}  # CPU block -> prefix hash its GPU original held

    def copy_blocks(
        self, blocks: dict[int, int], gpu: BlockPool, *, to_cpu: bool
    ) -> dict[int, int]:
        """Allocate a copy of each of `blocks` (block -> references among the sequences moved)
        in the other pool, with those references; returns block -> its copy. The originals are
        untouched: the caller releases them. Raises when the destination lacks free blocks."""
        src_name, dst, dst_name = ("GPU", self.pool, "CPU") if to_cpu else ("CPU", gpu, "GPU")
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
                block_hash = gpu.block_hash(block)
                if block_hash is not None:
                    self.hashes[copy] = block_hash
            elif (block_hash := self.hashes.get(block)) is not None:
                gpu.cache_block(copy, block_hash)
            copy_of[block] = copy
        return copy_of

    def release(self, block: int) -> None:
        """Drop one reference to a CPU block; its hash goes with its last reference."""
        if self.pool.decref(block) == 0:
            self.hashes.pop(block, None)

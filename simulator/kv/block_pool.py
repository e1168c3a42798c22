"""Physical KV blocks of one device: reference counts, a FIFO free list, a content-hash cache.

A block is in exactly one of three states:

    used       ref_count > 0; may also hold a content hash (cached and in use)
    free       ref_count == 0, no hash: in the FIFO free list
    evictable  ref_count == 0, holds a hash: in the LRU queue; can still be hit by `lookup`

    allocate():  free head ──▶ used           (else evictable LRU head, its hash dropped)
    decref → 0:  used ──▶ free tail            (no hash)
                 used ──▶ evictable tail       (hash kept: a later request may still hit it)
    touch():     evictable ──▶ used            (a prefix-cache hit)

Plain blocks are reused before cached ones so that cached prefixes survive as long as possible;
among cached blocks the least recently freed goes first. Every operation is O(1): a deque for the
free list, an OrderedDict (O(1) removal from the middle, on a hit) for the LRU queue.
"""

from __future__ import annotations

from collections import OrderedDict, deque

from pagesim.simulator.core.errors import KVCacheError


class BlockPool:
    """Blocks 0..num_blocks-1 with reference counts and a hash -> block prefix cache."""

    __slots__ = ("_block_of_hash", "_evictable", "_free", "_hashes", "_num_used", "_ref_counts")

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 0:
            raise KVCacheError(f"a block pool needs num_blocks >= 0, got {num_blocks}")
        self._ref_counts = [0] * num_blocks
        self._hashes: list[int | None] = [None] * num_blocks
        self._free: deque[int] = deque(range(num_blocks))  # uncached, ref 0; lowest ids first
        self._evictable: OrderedDict[int, None] = OrderedDict()  # cached, ref 0; LRU first
        self._block_of_hash: dict[int, int] = {}
        self._num_used = 0

    # -- queries -------------------------------------------------------------------------------

    @property
    def num_blocks(self) -> int:
        return len(self._ref_counts)

    @property
    def num_free_blocks(self) -> int:
        """Blocks `allocate` can hand out now: plain free ones plus evictable cached ones."""
        return len(self._free) + len(self._evictable)

    @property
    def num_used_blocks(self) -> int:
        return self._num_used

    @property
    def num_cached_blocks(self) -> int:
        """Blocks holding a hash, referenced or evictable."""
        return len(self._block_of_hash)

    @property
    def num_evictable_blocks(self) -> int:
        return len(self._evictable)

    def ref_count(self, block: int) -> int:
        self._check_block(block)
        return self._ref_counts[block]

    @property
    def ref_counts(self) -> list[int]:
        """The live per-block reference counts, for callers' hot paths (read them, never write):
        `ref_count` validates its argument, which costs more than the lookup itself."""
        return self._ref_counts

    def block_hash(self, block: int) -> int | None:
        self._check_block(block)
        return self._hashes[block]

    def lookup(self, block_hash: int) -> int | None:
        """The block cached under `block_hash`, if any (referenced or evictable)."""
        return self._block_of_hash.get(block_hash)

    # -- mutators ------------------------------------------------------------------------------

    def allocate(self) -> int:
        """A block with ref_count 1: a plain free one if any, else evict the LRU cached one."""
        if self._free:
            block = self._free.popleft()
        elif self._evictable:
            block, _ = self._evictable.popitem(last=False)
            self._drop_hash(block)
        else:
            raise KVCacheError(f"no free block: all {self.num_blocks} blocks are referenced")
        self._ref_counts[block] = 1
        self._num_used += 1
        return block

    def allocate_many(self, num_blocks: int) -> list[int]:
        """`num_blocks` calls of `allocate`, in order: a prompt chunk takes many blocks at once."""
        free = self._free
        if len(free) < num_blocks:
            return [self.allocate() for _ in range(num_blocks)]
        popleft = free.popleft
        ref_counts = self._ref_counts
        blocks: list[int] = []
        for _ in range(num_blocks):
            block = popleft()
            ref_counts[block] = 1
            blocks.append(block)
        self._num_used += num_blocks
        return blocks

    def free_unshared(self, blocks: list[int]) -> bool:
        """`decref` of each of `blocks` in order, done at once, if each holds one reference and
        no hash (a finished sequence without sharing or prefix cache: the usual case); then
        True. Otherwise nothing changes and False: the caller decrefs them one by one."""
        if not blocks:
            return True
        ref_counts = self._ref_counts
        if set(map(ref_counts.__getitem__, blocks)) != {1}:
            return False  # shared: decref one by one (a table never lists a block twice)
        # With no cached block anywhere (no prefix cache: always) no hash needs looking at.
        if self._block_of_hash and set(map(self._hashes.__getitem__, blocks)) != {None}:
            return False
        for block in blocks:
            ref_counts[block] = 0
        self._num_used -= len(blocks)
        self._free.extend(blocks)
        return True

    def incref(self, block: int) -> None:
        """One more reference to a block in use (a fork). Free blocks come from `allocate`."""
        self._check_block(block)
        if self._ref_counts[block] == 0:
            raise KVCacheError(f"incref of free block {block}: allocate or touch it instead")
        self._ref_counts[block] += 1

    def decref(self, block: int) -> int:
        """Drop one reference; at 0 the block becomes free (or evictable if cached).

        Returns the new ref_count.
        """
        self._check_block(block)
        ref_count = self._ref_counts[block]
        if ref_count == 0:
            raise KVCacheError(f"decref of free block {block} (double free?)")
        ref_count -= 1
        self._ref_counts[block] = ref_count
        if ref_count == 0:
            self._num_used -= 1
            if self._hashes[block] is None:
                self._free.append(block)
            else:
                self._evictable[block] = None  # tail: evicted after everything freed earlier
        return ref_count

    def touch(self, block: int) -> None:
        """Take a reference on a cached block (a prefix hit), reviving it if evictable."""
        self._check_block(block)
        if self._hashes[block] is None:
            raise KVCacheError(f"touch of uncached block {block}: only cached blocks can be hit")
        if self._ref_counts[block] == 0:
            del self._evictable[block]
            self._num_used += 1
        self._ref_counts[block] += 1

    def cache_block(self, block: int, block_hash: int) -> bool:
        """Register a referenced, fully written block under its content hash.

        If another block already holds `block_hash`, that mapping stays and this block stays
        uncached (two copies of one content: only one is findable). Returns whether `block` is
        cached under `block_hash` afterwards. A block holds at most one hash: registering a
        different hash for an already cached block is a bug (its content cannot change).
        """
        self._check_block(block)
        if self._ref_counts[block] == 0:
            raise KVCacheError(f"cache_block of free block {block}: only written blocks are cached")
        current = self._hashes[block]
        if current is not None:
            if current != block_hash:
                raise KVCacheError(
                    f"block {block} is cached under hash {current}, not {block_hash}: "
                    "a block's content cannot change while it is referenced"
                )
            return True
        if block_hash in self._block_of_hash:
            return False
        self._block_of_hash[block_hash] = block
        self._hashes[block] = block_hash
        return True

    def evict_one(self) -> int | None:
        """Drop the hash of the LRU evictable block, making it a plain free block (tail)."""
        if not self._evictable:
            return None
        block, _ = self._evictable.popitem(last=False)
        self._drop_hash(block)
        self._free.append(block)
        return block

    # -- checks --------------------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Raise AssertionError if the pool's bookkeeping is inconsistent (O(num_blocks), with
        the per-block loops left to C where the pool is large and mostly idle: a CPU swap pool)."""
        refs, hashes = self._ref_counts, self._hashes
        num_blocks = self.num_blocks
        invariant(not refs or min(refs) >= 0, "negative ref_count")
        num_used = num_blocks - refs.count(0)
        invariant(num_used == self._num_used, "used counter disagrees with ref_counts")
        invariant(len(set(self._free)) == len(self._free), "a block is twice in the free list")
        invariant(
            len(self._free) + len(self._evictable) + num_used == num_blocks,
            "free + evictable + used != total",
        )
        free = self._free
        if sum(map(refs.__getitem__, free)) or set(map(hashes.__getitem__, free)) - {None}:
            block = next(b for b in free if refs[b] or hashes[b] is not None)
            raise AssertionError(f"free block {block} is referenced or holds a hash")
        for block in self._evictable:
            invariant(refs[block] == 0, f"evictable block {block} is referenced")
            invariant(hashes[block] is not None, f"evictable block {block} has no hash")
        for block_hash, block in self._block_of_hash.items():
            invariant(hashes[block] == block_hash, f"hash {block_hash} -> block {block}")
        num_hashed = num_blocks - hashes.count(None)
        invariant(num_hashed == len(self._block_of_hash), "a block holds a hash not in the map")

    # -- internals -----------------------------------------------------------------------------

    def _check_block(self, block: int) -> None:
        if not 0 <= block < len(self._ref_counts):
            raise KVCacheError(f"unknown block {block}: the pool has {self.num_blocks} blocks")

    def _drop_hash(self, block: int) -> None:
        block_hash = self._hashes[block]
        assert block_hash is not None
        del self._block_of_hash[block_hash]
        self._hashes[block] = None


def invariant(condition: bool, message: str) -> None:
    """Like assert, but kept under `python -O`: invariant checks are what tests run."""
    if not condition:
        raise AssertionError(message)

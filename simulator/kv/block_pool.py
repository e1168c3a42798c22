"""Physical KV blocks of one device: reference counts, free blocks in eviction order, a content-hash
cache.

A block is in exactly one of three states:

    used       ref_count > 0; may also hold a content hash (cached and in use)
    free       ref_count == 0, no hash
    evictable  ref_count == 0, holds a hash: can still be hit by `lookup` until reused

Which free block `allocate` takes is the eviction order, chosen per engine era:

    PLAIN_FIRST (vLLM V0's evictor)  plain free blocks first, FIFO; then cached ones, least
                                     recently freed first: cached prefixes live as long as
                                     possible
    LRU (vLLM V1, v1/core/kv_cache_utils.py FreeKVCacheBlockQueue)  one queue of every free
                                     block, cached or not, least recently freed first
                                     (kv/lru_queue.py); a cached block taken loses its hash

    allocate():  head of the order ──▶ used   (a cached block's hash is dropped)
    decref → 0:  used ──▶ tail of the order   (its hash, if any, kept: it can still be hit)
    touch():     evictable ──▶ used           (a prefix-cache hit)

`reuse_unhashed_first` (vLLM V1 from v0.24.0, v1/core/block_pool.py `free_blocks`): a block freed
without a hash, which no lookup can find, goes to the head instead, to be reused first; the
blocks of one `free_blocks` call (`decref_many`, `free_table`) go there together, in the order
given (FreeKVCacheBlockQueue.prepend_n), and its hashed ones to the tail:

    free queue   head [ a b c ] tail          a sequence frees x (partly filled, no hash), y (hash)
    after        head [ x a b c y ] tail      x is reused first; y waits behind everything

Duplicate content: V1 caches a block under its hash even when another block already holds that
hash (`allow_duplicates`; v1/core/block_pool.py cache_full_blocks, BlockHashToBlockMap), and a
lookup finds the oldest; V0 keeps the first and leaves the copy uncached. Allocating, freeing,
caching, looking up and hitting a block are O(1) (amortized): deques and insertion-ordered dicts
(`evict_one` and `num_evictable_blocks` walk the free blocks).

Sharing saves memory: a block with ref_count r stands in for r copies, r - 1 of them saved. The
pool counts the saved copies by cause, as references are taken: a prefix-cache hit on a block in
use (`touch`) saves one for the prefix cache, a fork or a shared swap-in (`incref`) one for forks
(`_fork_shares` says how many of a block's references came that way). When a shared block loses
a reference, a fork's share goes first. A hit on an evictable block saves recomputation, not
memory: that block had no other holder.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from enum import Enum
from itertools import filterfalse, islice, repeat, starmap

from pagesim.simulator.core.errors import KVCacheError
from pagesim.simulator.kv.lru_queue import LruQueue
from pagesim.simulator.kv.pool_audit import PoolParts, check_pool_invariants


class EvictionOrder(Enum):
    PLAIN_FIRST = "plain-first"  # vLLM V0
    LRU = "lru"  # vLLM V1


class BlockPool:
    """Blocks 0..num_blocks-1 with reference counts and a hash -> block prefix cache."""

    __slots__ = (
        "_allow_duplicates",
        "_evictable",
        "_first_of_hash",
        "_fork_shares",
        "_free",
        "_hash_epoch",
        "_hashes",
        "_is_lru",
        "_last_run",
        "_later_of_hash",
        "_lru",
        "_num_free_hashed",
        "_ref_counts",
        "_unhashed_first",
        "num_fork_saved_blocks",
        "num_prefix_saved_blocks",
        "num_used_blocks",
    )

    def __init__(
        self,
        num_blocks: int,
        *,
        eviction: EvictionOrder = EvictionOrder.PLAIN_FIRST,
        allow_duplicates: bool = False,
        reuse_unhashed_first: bool = False,
    ) -> None:
        if num_blocks < 0:
            raise KVCacheError(f"a block pool needs num_blocks >= 0, got {num_blocks}")
        self._ref_counts = [0] * num_blocks
        self._hashes: list[int | None] = [None] * num_blocks
        self._is_lru = eviction is EvictionOrder.LRU
        self._allow_duplicates = allow_duplicates
        self._unhashed_first = reuse_unhashed_first
        # PLAIN_FIRST: `_free` holds the uncached free blocks (FIFO, lowest ids first at the
        # start), `_evictable` the cached ones (LRU first), `_lru` stays empty. LRU: `_lru` holds
        # every free block, cached or not, in one order, and the other two stay empty.
        lru = self._is_lru
        self._free: deque[int] = deque() if lru else deque(range(num_blocks))
        self._evictable: OrderedDict[int, None] = OrderedDict()
        self._lru = LruQueue(range(num_blocks), num_blocks) if lru else LruQueue((), 0)
        # hash -> the oldest block cached under it, and (V1's duplicates) the later ones in
        # order: one plain int per hash in the usual case, no container to build and drop
        self._first_of_hash: dict[int, int] = {}
        self._later_of_hash: dict[int, dict[int, None]] = {}
        # Free blocks that hold a hash (evictable ones), kept as blocks enter and leave the
        # free order: while it is 0, the blocks V1's `allocate_many` takes need no look at
        # their hashes (most of a loaded replica's allocations, though hashed blocks are in use)
        self._num_free_hashed = 0
        # `lookup_run`'s last answer and what it depends on: the hashes asked (a hasher's own
        # list, which only grows), their count, the cap, and the map's epoch, bumped wherever
        # a hash's oldest block changes (a preempted waiting head's prefix is asked again and
        # again, step after step, while the map stays as it was)
        self._hash_epoch = 0
        self._last_run: tuple[Sequence[int], int, int, int, list[int]] = ((), 0, 0, -1, [])
        # The counts below are the pool's own, kept as it goes; read them, never write. They
        # are plain attributes, not properties: every step's memory row reads them.
        self.num_used_blocks = 0  # blocks with ref_count > 0
        self._fork_shares = [0] * num_blocks  # references taken by incref, per block
        # copies of blocks that forks (parallel samples, beams) share: the sum of the above
        self.num_fork_saved_blocks = 0
        # copies of blocks that prefix-cache hits on blocks in use share instead of holding
        self.num_prefix_saved_blocks = 0

    # -- queries -------------------------------------------------------------------------------

    @property
    def num_blocks(self) -> int:
        return len(self._ref_counts)

    @property
    def num_free_blocks(self) -> int:
        """Blocks `allocate` can hand out now: plain free ones plus evictable cached ones."""
        if self._is_lru:
            return len(self._lru)
        return len(self._free) + len(self._evictable)

    @property
    def reuses_unhashed_first(self) -> bool:
        return self._unhashed_first

    @property
    def num_cached_blocks(self) -> int:
        """Blocks holding a hash, referenced or evictable."""
        return self.num_blocks - self._hashes.count(None) if self._first_of_hash else 0

    @property
    def num_evictable_blocks(self) -> int:
        """Free blocks that hold a hash."""
        if not self._is_lru:
            return len(self._evictable)
        return sum(self._hashes[b] is not None for b in self._lru)

    def ref_count(self, block: int) -> int:
        self._check_block(block)
        return self._ref_counts[block]

    @property
    def ref_counts(self) -> list[int]:
        """The live per-block reference counts, for callers' hot paths (read them, never write):
        `ref_count` validates its argument, which costs more than the lookup itself."""
        return self._ref_counts

    @property
    def block_hashes(self) -> list[int | None]:
        """The live per-block content hashes (None: uncached), read like `ref_counts` (never
        write): a block map reads every block's state at once (simulator/metrics/block_map.py)."""
        return self._hashes

    def block_hash(self, block: int) -> int | None:
        self._check_block(block)
        return self._hashes[block]

    def lookup(self, block_hash: int) -> int | None:
        """The oldest block cached under `block_hash`, if any (referenced or evictable)."""
        return self._first_of_hash.get(block_hash)

    def lookup_run(self, block_hashes: Sequence[int], max_blocks: int) -> list[int]:
        """`lookup` of each of the first `max_blocks` hashes in turn, up to the first miss: a
        prompt's cached prefix (dozens of blocks, asked at each admission). The hashes must
        never change once given (SequenceHasher.block_hashes: a list that only grows): the
        last answer is given again, copied, while neither they, nor their count, nor the
        map has changed."""
        last = self._last_run
        epoch = self._hash_epoch
        if (
            last[0] is block_hashes
            and last[3] == epoch
            and last[2] == max_blocks
            and last[1] == len(block_hashes)
        ):
            return last[4].copy()
        get = self._first_of_hash.get
        hits: list[int] = []
        for block_hash in islice(block_hashes, max_blocks):
            block = get(block_hash)
            if block is None:
                break
            hits.append(block)
        self._last_run = (block_hashes, len(block_hashes), max_blocks, epoch, hits.copy())
        return hits

    # -- mutators ------------------------------------------------------------------------------

    def allocate(self) -> int:
        """A block with ref_count 1, from the head of the eviction order (its hash dropped)."""
        if self._free:
            block = self._free.popleft()
        elif self._evictable or self._lru:
            block = self._lru.popleft() if self._is_lru else self._evictable.popitem(last=False)[0]
            if self._hashes[block] is not None:
                self._drop_hash(block)
        else:
            raise KVCacheError(f"no free block: all {self.num_blocks} blocks are referenced")
        self._ref_counts[block] = 1
        self.num_used_blocks += 1
        return block

    def allocate_many(self, num_blocks: int) -> list[int]:
        """`num_blocks` calls of `allocate`, in order: a prompt chunk takes many blocks at once."""
        ref_counts = self._ref_counts
        if self._is_lru:  # one queue of every free block, cached or not
            lru = self._lru
            entries = lru.entries
            if not lru.num_stale and num_blocks <= len(entries):
                # `pop_many`'s usual case inlined (hot: a call saved a prompt chunk or a run's
                # crossings), one alone cheaper without starmap
                if num_blocks == 1:
                    blocks = [entries.popleft()]
                else:
                    blocks = list(starmap(entries.popleft, repeat((), num_blocks)))
            else:
                try:
                    blocks = lru.pop_many(num_blocks)
                except IndexError:  # fewer free blocks: none taken
                    raise KVCacheError(
                        f"no free block: all {self.num_blocks} blocks are referenced"
                    ) from None
            if not self._num_free_hashed:  # no free block holds a hash: none to drop
                for block in blocks:
                    ref_counts[block] = 1
            elif self._later_of_hash:  # some hash has duplicates: the general way
                hashes = self._hashes
                for block in blocks:
                    if hashes[block] is not None:
                        self._drop_hash(block)
                    ref_counts[block] = 1
            else:  # `_drop_hash`, inlined: each cached block is its hash's only holder
                hashes, first_of_hash = self._hashes, self._first_of_hash
                num_hashed = len(first_of_hash)
                for block in blocks:
                    block_hash = hashes[block]
                    if block_hash is not None:
                        del first_of_hash[block_hash]
                        hashes[block] = None
                    ref_counts[block] = 1
                num_dropped = num_hashed - len(first_of_hash)
                self._num_free_hashed -= num_dropped
                self._hash_epoch += num_dropped
            self.num_used_blocks += num_blocks
            return blocks
        free = self._free
        if len(free) < num_blocks:
            return [self.allocate() for _ in range(num_blocks)]
        blocks = list(starmap(free.popleft, repeat((), num_blocks)))  # popped in C
        for block in blocks:
            ref_counts[block] = 1
        self.num_used_blocks += num_blocks
        return blocks

    def free_table(
        self,
        table: list[int],
        num_hashed_like: int = 0,
        slot_counts: list[int] | None = None,
        *,
        hashless: bool = False,
    ) -> bool:
        """`decref_many(table[::-1], frozenset(table[:num_hashed_like]))` done at once, if each
        block holds one reference (a finished sequence that shares nothing: the usual case),
        then True; otherwise nothing changes and False (the caller decrefs them one by one).
        Every block must be held (a table's). The table is freed tail first, its first
        `num_hashed_like` blocks placed as hashed ones, without that set and the per-block
        tests (a finished request's hundred blocks, each step or two of a loaded replica: only
        the blocks past those can go to the head). `slot_counts`: a per-block list of the
        caller's (the cache's computed slots) whose entries for the table are zeroed too, in
        the same pass, when True is returned. `hashless`: the caller knows that no block of the
        table holds a hash (a private sequence's), so none is looked at to count the hashed
        blocks it frees."""
        ref_counts = self._ref_counts
        # Hot (a finished request's table, each step or two): plain loops, which Python 3.11
        # runs in fewer instructions than map over the list's methods.
        if not (self.num_fork_saved_blocks or self.num_prefix_saved_blocks):
            # No block has a second holder (these count every reference past a block's first):
            # each block of the table, held, holds one reference.
            if slot_counts is None:
                for block in table:
                    ref_counts[block] = 0
            else:
                for block in table:
                    ref_counts[block] = 0
                    slot_counts[block] = 0
        else:  # a shared block (a table never lists a block twice) puts back those cleared
            for block in table:
                if ref_counts[block] != 1:
                    for cleared in table:
                        if cleared == block:
                            return False
                        ref_counts[cleared] = 1
                ref_counts[block] = 0
            if slot_counts is not None:
                for block in table:
                    slot_counts[block] = 0
        self.num_used_blocks -= len(table)
        if num_hashed_like >= len(table) or not self._unhashed_first:
            # every block to the tail, tail first (a private request's table, all its blocks
            # full: every one placed as a hashed one)
            if self._is_lru:
                self._lru.entries.extend(reversed(table))  # LruQueue.extend, inlined
                if not hashless:
                    self._num_free_hashed += self._num_hashed(table)
            else:
                self._place([], table[::-1])
            return True
        if self._is_lru and num_hashed_like == len(table) - 1:
            # One block past the hashed-like ones (a private request's partly filled last
            # block: the usual case), placed without lists: the head unless it holds a hash
            # (`prepend` of it, inlined unless a stale entry may need a rebuild), then the
            # hashed-like ones at the tail, as below.
            lru = self._lru
            last = table[-1]
            if self._hashes[last] is not None:
                lru.entries.append(last)
                self._num_free_hashed += 1
            elif lru.num_stale:
                lru.prepend([last])
            else:
                lru.entries.appendleft(last)
            if num_hashed_like:
                lru.entries.extend(table[num_hashed_like - 1 :: -1])
                if not hashless:
                    self._num_free_hashed += self._num_hashed(table[:num_hashed_like])
            return True
        # The blocks freed first, tail first (V0's order, or several past the hashed-like
        # ones): those without a hash to the head, the others to the tail.
        rest = table[num_hashed_like:][::-1]
        head, tail = rest, []  # no block holds a hash: all of `rest` to the head
        if self._first_of_hash:
            # Usually `rest` (tail first) starts with the blocks without a hash and ends with
            # the hashed ones (a preempted request's table: its registered prefix, then the
            # blocks it took since): one scan finds where, another checks the rest, and two
            # slices split it; else block by block.
            hashes = self._hashes
            num_head = 0
            for block in rest:
                if hashes[block] is not None:
                    break
                num_head += 1
            head, tail = rest[:num_head], rest[num_head:]
            for block in tail:
                if hashes[block] is None:  # mixed: split block by block
                    head = [b for b in rest if hashes[b] is None]
                    tail = [b for b in rest if hashes[b] is not None]
                    break
        if not self._is_lru:
            tail += table[:num_hashed_like][::-1]
            self._place(head, tail)
            return True
        lru = self._lru  # `_place`, inlined: the hashed-like blocks need no list of their own
        if head:
            lru.prepend(head)
        if tail:  # every one holds a hash
            lru.entries.extend(tail)  # LruQueue.extend, inlined (and below)
            self._num_free_hashed += len(tail)
        if num_hashed_like:
            lru.entries.extend(table[num_hashed_like - 1 :: -1])
            if not hashless:
                self._num_free_hashed += self._num_hashed(table[:num_hashed_like])
        return True

    def decref_many(
        self, blocks: list[int], hashed_like: AbstractSet[int] = frozenset()
    ) -> list[int]:
        """`decref` of each of `blocks` in order, as one vLLM `free_blocks` call: those whose
        last reference went join the free blocks together (`reuse_unhashed_first`: the ones
        without a hash, and not in `hashed_like`, at the head in this order; the rest at the
        tail). Returns those, in order. `hashed_like`: blocks vLLM would have hashed though
        pagesim did not (policies/group_hashes.py), placed as hashed ones."""
        freed = [block for block in blocks if not self._drop_reference(block)]
        self.num_used_blocks -= len(freed)
        self._put_free(freed, hashed_like)
        return freed

    def incref(self, block: int) -> None:
        """One more reference to a block in use (a fork). Free blocks come from `allocate`."""
        self._check_block(block)
        if self._ref_counts[block] == 0:
            raise KVCacheError(f"incref of free block {block}: allocate or touch it instead")
        self._ref_counts[block] += 1
        self._fork_shares[block] += 1
        self.num_fork_saved_blocks += 1

    def decref(self, block: int) -> int:
        """Drop one reference; at 0 the block joins the free blocks (`decref_many` of it alone:
        the tail, or the head for an unhashed block under `reuse_unhashed_first`).

        Returns the new ref_count.
        """
        ref_count = self._drop_reference(block)
        if not ref_count:
            self.num_used_blocks -= 1
            self._put_free([block])
        return ref_count

    def _drop_reference(self, block: int) -> int:
        """One reference fewer, the saved copies recounted; the new ref_count. A block reaching
        0 is the caller's to count and place (`_put_free`)."""
        self._check_block(block)
        ref_count = self._ref_counts[block]
        if ref_count == 0:
            raise KVCacheError(f"decref of free block {block} (double free?)")
        ref_count -= 1
        self._ref_counts[block] = ref_count
        if ref_count:  # a shared block lost a holder: one saved copy fewer, a fork's first
            if self._fork_shares[block]:
                self._fork_shares[block] -= 1
                self.num_fork_saved_blocks -= 1
            else:
                self.num_prefix_saved_blocks -= 1
        return ref_count

    def _put_free(self, blocks: list[int], hashed_like: AbstractSet[int] = frozenset()) -> None:
        """Blocks just freed (ref_count 0, uncounted as used already), in the order given, into
        the free blocks: see the module docstring for where."""
        if not blocks:
            return
        hashes = self._hashes
        tail = blocks
        head: list[int] = []
        if self._unhashed_first:
            if not self._first_of_hash:  # no block holds a hash: only `hashed_like` are tail
                head = list(filterfalse(hashed_like.__contains__, blocks))
                if len(head) < len(blocks):
                    tail = list(filter(hashed_like.__contains__, blocks))
                else:
                    tail = []
            else:
                head = [b for b in blocks if hashes[b] is None and b not in hashed_like]
                if head:
                    tail = [b for b in blocks if hashes[b] is not None or b in hashed_like]
        self._place(head, tail)

    def _place(self, head: list[int], tail: list[int]) -> None:
        """Freed blocks into the free order: `head` (unhashed, under `reuse_unhashed_first`) at
        its head in this order, `tail` at its tail (`_put_free` says which go where)."""
        if self._is_lru:
            if head:
                self._lru.prepend(head)
            self._lru.extend(tail)
            self._num_free_hashed += self._num_hashed(tail)
            return
        if head:  # uncached: the plain free blocks' head
            self._free.extendleft(reversed(head))
        hashes = self._hashes
        if not self._first_of_hash or set(map(hashes.__getitem__, tail)) == {None}:
            self._free.extend(tail)  # no prefix cache: never a hash to look at
            return
        free, evictable = self._free, self._evictable
        num_evictable = len(evictable)
        for block in tail:
            if hashes[block] is None:
                free.append(block)
            else:
                evictable[block] = None  # tail: reused after everything freed earlier
        self._num_free_hashed += len(evictable) - num_evictable

    def touch(self, block: int) -> None:
        """Take a reference on a cached block (a prefix hit), reviving it if evictable."""
        self._check_block(block)
        if self._hashes[block] is None:
            raise KVCacheError(f"touch of uncached block {block}: only cached blocks can be hit")
        if self._ref_counts[block] == 0:
            if self._is_lru:
                self._lru.remove(block)
            else:
                del self._evictable[block]
            self.num_used_blocks += 1
            self._num_free_hashed -= 1
        else:
            self.num_prefix_saved_blocks += 1  # another holder of a block in use: one copy saved
        self._ref_counts[block] += 1

    def touch_run(self, blocks: list[int]) -> None:
        """`touch` of each of `blocks` in order, cached blocks found by `lookup_run` (a prompt's
        prefix hits, dozens at an admission): the checks and the calls left out."""
        refs = self._ref_counts
        revived: list[int] = []  # free ones, out of the free order below (no other effect)
        for block in blocks:
            if refs[block]:
                self.num_prefix_saved_blocks += 1  # another holder: one copy saved
            else:
                revived.append(block)
            refs[block] += 1
        if revived:  # cached (hits), so each held a hash
            self.num_used_blocks += len(revived)
            self._num_free_hashed -= len(revived)
            if self._is_lru:
                self._lru.remove_many(revived)
            else:
                evictable = self._evictable
                for block in revived:
                    del evictable[block]

    def requeue(self, blocks: list[int]) -> None:
        """`touch` of each of `blocks` (cached and free) in order, then `free_table(blocks)`:
        each goes to the tail of the free order, the last first (a refused admission's prefix
        hits: PagedKVCache.refuse_hits). Nothing else those leave changes."""
        if self._is_lru:
            lru = self._lru
            for block in blocks:
                lru.remove(block)
            lru.extend(reversed(blocks))
            return
        evictable = self._evictable
        for block in reversed(blocks):
            evictable.move_to_end(block)

    def ends_free_order(self, blocks: list[int]) -> bool:
        """Whether free, cached `blocks` are the last of V1's free order, the last of them first
        (as `requeue` leaves them), each its hash's only holder (False in V0's order)."""
        if not self._is_lru:
            return False
        later, hashes = self._later_of_hash, self._hashes
        if later and any(hashes[block] in later for block in blocks):
            return False
        return self._lru.ends_with(blocks)

    def cache_block(self, block: int, block_hash: int) -> bool:
        """Register a referenced, fully written (or, in V1, fully scheduled) block under its
        content hash.

        If another block already holds `block_hash`, this one joins it as a duplicate when
        duplicates are allowed (V1), else stays uncached (V0: only one copy is findable).
        Returns whether `block` is cached under `block_hash` afterwards. A block holds at most
        one hash: registering a different hash for a cached block is a bug.
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
        if block_hash not in self._first_of_hash:
            self._first_of_hash[block_hash] = block
            self._hash_epoch += 1
        elif self._allow_duplicates:
            self._later_of_hash.setdefault(block_hash, {})[block] = None
        else:
            return False
        self._hashes[block] = block_hash
        return True

    def cache_many(self, blocks: Sequence[int], block_hashes: Sequence[int]) -> None:
        """`cache_block` of each (block, hash) pair in order, results unused: a prompt chunk
        registers dozens of blocks at once. The usual case (V1's duplicates allowed, a held block
        with no hash yet) is inlined; anything else goes through `cache_block` and its checks.
        Lists of different lengths are refused (ValueError) before any block is cached."""
        refs, hashes, first_of_hash = self._ref_counts, self._hashes, self._first_of_hash
        if len(blocks) != len(block_hashes):
            raise ValueError(f"{len(blocks)} blocks, {len(block_hashes)} hashes")
        # The usual case needs every block in range (else a list index wraps round), checked
        # once for all of them; duplicates are allowed (V1). Anything else: cache_block.
        if not blocks or not (
            self._allow_duplicates and min(blocks) >= 0 and max(blocks) < len(refs)
        ):
            for block, block_hash in zip(blocks, block_hashes):  # noqa: B905 (checked above)
                self.cache_block(block, block_hash)
            return
        self._hash_epoch += 1  # (a hash's first block is mapped below, most likely)
        for block, block_hash in zip(blocks, block_hashes):  # noqa: B905 (checked above)
            if refs[block] and hashes[block] is None and block_hash not in first_of_hash:
                first_of_hash[block_hash] = block
                hashes[block] = block_hash
            else:  # free, cached already, or a duplicate: checks, or the duplicates' way
                self.cache_block(block, block_hash)

    def evict_one(self) -> int | None:
        """Drop the hash of the least recently freed cached block, making it plain free."""
        queue = self._lru if self._is_lru else self._evictable
        block = next((b for b in queue if self._hashes[b] is not None), None)
        if block is None:
            return None
        self._drop_hash(block)
        if not self._is_lru:
            del self._evictable[block]
            self._free.append(block)
        return block

    # -- checks --------------------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Raise AssertionError if the pool's bookkeeping is inconsistent (kv/pool_audit.py)."""
        check_pool_invariants(
            PoolParts(
                self._ref_counts,
                self._hashes,
                self._free,
                self._evictable,
                self._lru,
                self._first_of_hash,
                self._later_of_hash,
                self._fork_shares,
                self.num_used_blocks,
                self.num_fork_saved_blocks,
                self.num_prefix_saved_blocks,
                self._num_free_hashed,
                self._is_lru,
                self._allow_duplicates,
            )
        )

    # -- internals -----------------------------------------------------------------------------

    def _check_block(self, block: int) -> None:
        if not 0 <= block < len(self._ref_counts):
            raise KVCacheError(f"unknown block {block}: the pool has {self.num_blocks} blocks")

    def _num_hashed(self, blocks: list[int]) -> int:
        """How many of `blocks` hold a hash."""
        if not self._first_of_hash:
            return 0
        hashes = self._hashes
        return sum(hashes[block] is not None for block in blocks)

    def _drop_hash(self, block: int) -> None:
        """A free block taken (allocated or evicted) loses its hash: one free hashed block
        fewer."""
        self._num_free_hashed -= 1
        block_hash = self._hashes[block]
        assert block_hash is not None
        self._hash_epoch += 1  # the hash's first block goes, or one of its later ones
        later = self._later_of_hash.get(block_hash)
        if self._first_of_hash[block_hash] == block:  # the oldest goes: the next takes its place
            if later is None:
                del self._first_of_hash[block_hash]
            else:
                self._first_of_hash[block_hash] = next(iter(later))
                del later[self._first_of_hash[block_hash]]
        else:
            assert later is not None
            del later[block]
        if later is not None and not later:
            del self._later_of_hash[block_hash]
        self._hashes[block] = None

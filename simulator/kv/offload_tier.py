"""A KV offload tier in CPU memory behind the GPU prefix cache: blocks by content hash, LRU.

vLLM's native KV offloading (the OffloadingConnector, vllm/distributed/kv_transfer/kv_connector/
v1/offloading_connector.py, with v1/kv_offload/lru_manager.py LRUOffloadingManager in v0.11.0;
v1/kv_offload/cpu/ with its "lru" policy, the default, in v0.34.0) keeps blocks of a request's
KV in pinned CPU memory, keyed by the same block hashes as the GPU prefix cache:

    lookup(hashes)   the run of leading hashes held and ready (a store still in flight is not)
    store(hashes)    new ones join at the most recent end, evicting from the least recent end
                     blocks neither in flight nor being loaded; when not enough can go, the
                     store is refused whole (prepare_store returns None: "Cannot store")
    touch(hashes)    a lookup's blocks become the most recent (the request's own, last first)
    load(hashes)     pins them until the load ends (ref_cnt: not evictable meanwhile)

A block here is one GPU block's KV (the connector's default offloaded block size is the GPU's:
kv_offload/spec.py `block_size` in extra_config). Time is explicit: a store or load says when it
ends, and a block is ready (a store) or free to evict again (a load) from then on, which is what
vLLM's completion callbacks (`complete_store`, `complete_load`) mark.

    most recent ─▶ [ h9 h8 (h7 storing) h3 (h2 loading) h1 ] ◀─ least recent: evicted first
                                                     h1 goes first; h2 and h7 cannot go yet
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(slots=True)
class _Entry:
    ready_s: float  # its store ends then (a lookup misses it before)
    pinned_until_s: float  # a load reads it until then (it cannot be evicted before)


class OffloadTier:
    """`num_blocks` blocks of CPU memory keyed by block hash, least recently used first out."""

    __slots__ = ("_entries", "num_blocks", "num_evicted", "num_refused", "num_stored")

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"an offload tier holds at least one block, got {num_blocks}")
        self.num_blocks = num_blocks
        self._entries: OrderedDict[int, _Entry] = OrderedDict()  # least recent first
        self.num_stored = 0  # blocks written
        self.num_evicted = 0  # blocks dropped to make room
        self.num_refused = 0  # blocks of stores refused for want of room

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._entries

    def lookup(self, block_hashes: Iterable[int], now_s: float) -> int:
        """How many of `block_hashes`, from the first, the tier holds ready at `now_s`."""
        hits = 0
        for block_hash in block_hashes:
            entry = self._entries.get(block_hash)
            if entry is None or entry.ready_s > now_s:
                break
            hits += 1
        return hits

    def touch(self, block_hashes: Sequence[int]) -> None:
        """Those held become the most recent, the first of them last (most recent of all)."""
        entries = self._entries
        for block_hash in reversed(block_hashes):
            if block_hash in entries:
                entries.move_to_end(block_hash)

    def load(self, block_hashes: Sequence[int], until_s: float) -> None:
        """Pin held blocks a load reads until `until_s` (they must be held)."""
        for block_hash in block_hashes:
            entry = self._entries[block_hash]
            entry.pinned_until_s = max(entry.pinned_until_s, until_s)

    def store(self, block_hashes: Sequence[int], now_s: float, ready_s: float) -> list[int] | None:
        """Write the blocks not held yet, ready at `ready_s`, evicting what must go at `now_s`.
        Returns the hashes written (maybe none), or None when there is no room for them: then
        nothing changes."""
        entries = self._entries
        new = list(dict.fromkeys(h for h in block_hashes if h not in entries))
        excess = len(entries) + len(new) - self.num_blocks
        victims: list[int] = []
        if excess > 0:
            for block_hash, entry in entries.items():  # least recent first
                if entry.ready_s <= now_s and entry.pinned_until_s <= now_s:
                    victims.append(block_hash)
                    if len(victims) == excess:
                        break
            else:
                self.num_refused += len(new)
                return None
        for block_hash in victims:
            del entries[block_hash]
        self.num_evicted += len(victims)
        for block_hash in new:
            entries[block_hash] = _Entry(ready_s, 0.0)
        self.num_stored += len(new)
        return new

    def check_invariants(self) -> None:
        assert len(self._entries) <= self.num_blocks, "the tier holds more than it can"
        assert self.num_stored - self.num_evicted == len(self._entries)

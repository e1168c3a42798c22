"""A buddy allocator of token slots: where the vLLM paper's Orca baselines put each reservation.

Kwon et al., "Efficient Memory Management for Large Language Model Serving with PagedAttention"
(SOSP 2023), §6.1: "We assume Orca uses the buddy allocation algorithm to determine the memory
address to store KV cache"; §3.1 names the allocator as the source of external fragmentation.
A request asking for n slots gets a block of 2^k >= n slots (the smallest such k). A free block
of a larger order is split in halves, the upper half going back to the free lists, until a block
of order k remains; the lowest-addressed block of the smallest sufficient order is used. A freed
block merges with its buddy (the other half of the block it was split from) while the buddy is
free and whole, up to the block it started from:

    16 slots; seq 1 asks 5 (order 3), then seq 2 asks 3 (order 2):
    [               0..16               ]   one free block of order 4
    [     0..8      |      8..16        ]   split for seq 1
    [ seq 1: 5 + 3  |  8..12  | 12..16  ]   seq 1 holds 0..8 (3 slots of rounding); 8..16 split
    [ seq 1: 5 + 3  | seq 2: 3 + 1 | 12 ]   seq 2 holds 8..12
    free seq 1: 0..8 stays apart (its buddy 8..16 is split); free seq 2: 8..12 + 12..16 -> 8..16,
    then 0..8 + 8..16 -> 0..16: one block again.

A capacity that is not a power of two is cut into its binary digits, largest first (15,728 slots
= 8,192 + 4,096 + 2,048 + 1,024 + 256 + 64 + 32 + 16): each piece starts at a multiple of its
size, so `offset ^ size` finds a buddy, and pieces never merge with each other.

How the rounding is counted: as **external** fragmentation, not internal. The paper's Fig. 2
splits Orca's KV memory into token states, reservation, internal fragmentation and "external
fragmentation & others", and shows Orca (Oracle), which reserves exactly each request's final
length, with no internal fragmentation and a large external share: the waste of the allocator's
power-of-two rounding is external there (§3.1 and Fig. 3 define internal fragmentation as
over-reservation for a request's own potential length, external as the allocator's). So a
region's slots split: token states and reservation up to the request's final length, internal
fragmentation from there to what its reservation policy asked for (Max, Pow2), and the rounding
from the ask to the block's power of two counts as external, with the free slots stranded in
blocks too small for the next waiting request (simulator/kv/contiguous.py `memory_breakdown`).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort

from pagesim.simulator.core.errors import KVCacheError
from pagesim.simulator.kv.contiguous import RegionCache
from pagesim.simulator.kv.pool_audit import invariant


def block_order(num_slots: int) -> int:
    """The k of the smallest block 2^k that holds `num_slots` slots."""
    if num_slots < 1:
        raise KVCacheError(f"a reservation needs num_slots >= 1, got {num_slots}")
    return (int(num_slots) - 1).bit_length()  # int(): NumPy integers have no bit_length


class BuddyKVCache(RegionCache):
    """`num_slots` token slots placed by a binary buddy allocator (see the module docstring).

    Free blocks are kept per order as sorted offsets [num_free_blocks of that order]; an
    allocation or a free touches at most one block per order.
    """

    def __init__(self, num_slots: int) -> None:
        super().__init__(num_slots)
        self._tops: list[tuple[int, int]] = []  # (offset, order) of each piece, by address
        self._free: list[list[int]] = [[] for _ in range(num_slots.bit_length())]  # by order
        offset = 0
        for order in range(num_slots.bit_length() - 1, -1, -1):
            if num_slots >> order & 1:
                self._tops.append((offset, order))
                self._free[order].append(offset)
                offset += 1 << order
        self._top_offsets = [offset for offset, _ in self._tops]

    def holes(self) -> list[tuple[int, int]]:
        """(offset, length) of each free block, by address. Neighbours that are not buddies
        stay apart: together they cannot serve a request that neither serves alone."""
        return sorted((o, 1 << order) for order, offsets in enumerate(self._free) for o in offsets)

    @property
    def largest_hole(self) -> int:
        orders = [order for order, offsets in enumerate(self._free) if offsets]
        return 1 << orders[-1] if orders else 0

    def _fit(self, num_slots: int) -> tuple[int, int] | None:
        """(order, offset) of the free block `reserve` would split: the smallest order that
        holds `num_slots`, its lowest address."""
        for order in range(block_order(num_slots), len(self._free)):
            if self._free[order]:
                return order, self._free[order][0]
        return None

    def find_fit(self, num_slots: int) -> int | None:
        fit = self._fit(num_slots)
        return None if fit is None else fit[1]

    def can_ever_hold(self, num_slots: int, num_regions: int) -> bool:
        order = block_order(num_slots)
        return sum((1 << top) >> order for _, top in self._tops) >= num_regions

    def reserve(self, seq_id: int, num_slots: int) -> int:
        if seq_id in self._regions:
            raise KVCacheError(f"seq {seq_id} already holds a region")
        fit = self._fit(num_slots)
        want = block_order(num_slots)
        if fit is None:
            raise KVCacheError(
                f"seq {seq_id}: no free block of {1 << want} slots for {num_slots} "
                f"(largest {self.largest_hole}, {self._num_free_slots} free)"
            )
        order, offset = fit
        del self._free[order][0]
        while order > want:  # split: keep the lower half, free the upper one
            order -= 1
            insort(self._free[order], offset + (1 << order))
        self._regions[seq_id] = (offset, 1 << want, num_slots)
        self._computed[seq_id] = 0
        self._num_free_slots -= 1 << want
        return offset

    def free(self, seq_id: int) -> None:
        """Release the block, merging it with its buddy while the buddy is free and whole."""
        offset, held, _ = self._regions.pop(self._check_seq(seq_id))
        del self._computed[seq_id]
        self._num_free_slots += held
        order = held.bit_length() - 1
        top = self._top_order(offset)
        while order < top:
            buddy = offset ^ (1 << order)
            offsets = self._free[order]
            i = bisect_left(offsets, buddy)
            if i == len(offsets) or offsets[i] != buddy:
                break
            del offsets[i]
            offset = min(offset, buddy)
            order += 1
        insort(self._free[order], offset)

    def _top_order(self, offset: int) -> int:
        """The order of the piece of the capacity that holds `offset`."""
        return self._tops[bisect_right(self._top_offsets, offset) - 1][1]

    def check_invariants(self) -> None:
        """Regions and free blocks tile the space; every block is aligned to its size inside
        its piece; no free block has its buddy free (merging is complete); each region holds
        the smallest power of two that holds its ask."""
        self._check_regions()
        for order, offsets in enumerate(self._free):
            invariant(offsets == sorted(set(offsets)), f"free list of order {order} not sorted")
            for offset in offsets:
                top = self._top_order(offset)
                invariant(order <= top, f"free block {offset} of order {order} spans pieces")
                invariant(offset % (1 << order) == 0, f"free block {offset} is misaligned")
                buddy = offset ^ (1 << order)
                invariant(
                    order == top or buddy not in offsets, f"free buddies {offset} and {buddy}"
                )
        for seq_id, (offset, held, asked) in self._regions.items():
            invariant(held == 1 << block_order(asked), f"seq {seq_id}: {held} held for {asked}")
            invariant(offset % held == 0, f"seq {seq_id}: region at {offset} is misaligned")
            invariant(held <= 1 << self._top_order(offset), f"seq {seq_id}: region spans pieces")

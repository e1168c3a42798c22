"""Contiguous per-request KV reservation, as static batching (FasterTransformer) and Orca do.

One address space of token slots; each sequence reserves one contiguous region when admitted,
sized by a `Reservation` policy. `RegionCache` keeps what every such allocator shares (regions,
computed tokens, how the slots split); `ContiguousKVCache` places regions first-fit at the lowest
address and merges adjacent holes when freeing; simulator/kv/buddy.py places them as the vLLM
paper's Orca does, with a buddy allocator. These are the allocators whose internal fragmentation
(over-reservation) and external fragmentation (free slots in holes too small for the next
request, and a buddy allocator's rounding) the vLLM paper measures:

    offset 0                                                          num_slots
    [ seq 1: computed | reserved | frag ][  hole  ][ seq 3 ... ][    hole    ]
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from bisect import bisect_left
from collections.abc import Mapping

from pagesim.simulator.core.config import Reservation
from pagesim.simulator.core.errors import KVCacheError
from pagesim.simulator.core.memory import MemoryBreakdown
from pagesim.simulator.kv.pool_audit import invariant


def reservation_slots(policy: Reservation, prompt_len: int, output_len: int, max_len: int) -> int:
    """Slots reserved for a request of `prompt_len` + `output_len` tokens.

    MAX: the model's maximum length. POW2: the prompt plus the output rounded up to a power of
    two (Orca's over-reservation of up to 2x), capped at max_len. ORACLE: exactly what it needs.
    A request longer than max_len gets a region too small for it under MAX and POW2 (ORACLE
    is not capped): callers reject such requests; this only sizes.
    """
    if prompt_len < 0 or output_len < 0:
        raise KVCacheError(f"negative length: prompt {prompt_len}, output {output_len}")
    needed = prompt_len + output_len
    if policy is Reservation.MAX:
        return max_len
    if policy is Reservation.POW2:
        rounded = 1 << max(0, output_len - 1).bit_length()  # next power of two >= output_len
        return min(prompt_len + rounded, max_len)
    if policy is Reservation.ORACLE:
        return needed
    raise KVCacheError(f"unknown reservation policy {policy!r}")


class RegionCache(ABC):
    """What every contiguous allocator shares: one region per sequence, and how its slots split.

    A region is (offset, held, asked): the allocator holds `held` slots at `offset` for a
    reservation of `asked` slots. First fit holds exactly what is asked; a buddy allocator
    (simulator/kv/buddy.py) holds the next power of two. Subclasses place and free regions and
    keep the free space (`find_fit`, `reserve`, `free`, `holes`, `can_ever_hold`).
    """

    def __init__(self, num_slots: int) -> None:
        if num_slots < 1:
            raise KVCacheError(f"a contiguous KV cache needs num_slots >= 1, got {num_slots}")
        self._num_slots = num_slots
        self._regions: dict[int, tuple[int, int, int]] = {}  # seq_id -> (offset, held, asked)
        self._computed: dict[int, int] = {}  # seq_id -> tokens whose KV is written
        self._num_free_slots = num_slots

    @property
    def num_slots(self) -> int:
        return self._num_slots

    @property
    def num_free_slots(self) -> int:
        return self._num_free_slots

    @property
    def largest_hole(self) -> int:
        return max((length for _, length in self.holes()), default=0)

    @abstractmethod
    def holes(self) -> list[tuple[int, int]]:
        """(offset, length) of each free region, by address."""

    @abstractmethod
    def find_fit(self, num_slots: int) -> int | None:
        """The offset `reserve` would use for `num_slots` slots, or None when nothing fits."""

    @abstractmethod
    def reserve(self, seq_id: int, num_slots: int) -> int:
        """Reserve a contiguous region of at least `num_slots` for a new sequence; its offset."""

    @abstractmethod
    def free(self, seq_id: int) -> None:
        """Release the sequence's region."""

    @abstractmethod
    def can_ever_hold(self, num_slots: int, num_regions: int) -> bool:
        """Whether `num_regions` regions of `num_slots` fit together in the empty cache."""

    def has_seq(self, seq_id: int) -> bool:
        return seq_id in self._regions

    def seq_ids(self) -> tuple[int, ...]:
        return tuple(self._regions)

    def region(self, seq_id: int) -> tuple[int, int]:
        """(offset, slots held) of the sequence's region."""
        offset, held, _ = self._regions[self._check_seq(seq_id)]
        return offset, held

    def asked_slots(self, seq_id: int) -> int:
        """Slots the reservation asked for (`held` minus the allocator's rounding)."""
        return self._regions[self._check_seq(seq_id)][2]

    def num_computed_tokens(self, seq_id: int) -> int:
        return self._computed[self._check_seq(seq_id)]

    def can_reserve(self, num_slots: int) -> bool:
        return self.find_fit(num_slots) is not None

    def set_computed(self, seq_id: int, num_tokens: int) -> None:
        """The first `num_tokens` slots of the region now hold KV."""
        asked = self.asked_slots(seq_id)
        if not 0 <= num_tokens <= asked:
            raise KVCacheError(
                f"seq {seq_id}: {num_tokens} computed tokens do not fit its {asked} slots"
            )
        self._computed[seq_id] = num_tokens

    def memory_breakdown(
        self, final_lens: Mapping[int, int], next_request_slots: int | None
    ) -> MemoryBreakdown:
        """Split the slots (docs/design.md, "Memory"). O(sequences + holes).

        `final_lens[seq_id]`: tokens the sequence holds when it finishes. Reserved: slots it will
        still fill; internal fragmentation: slots of its reservation past its final length (the
        policy's over-reservation). External fragmentation: an allocator's rounding (held minus
        asked: see simulator/kv/buddy.py for why it is external), and, when the next waiting
        request (`next_request_slots`) fits nowhere, every free slot (all in holes too small for
        it) as stranded; otherwise no free slot is.
        """
        token = reserved = internal = rounding = 0
        for seq_id, (_, held, asked) in self._regions.items():
            final_len = final_lens.get(seq_id)
            if final_len is None:
                raise KVCacheError(f"memory_breakdown: no final length for seq {seq_id}")
            computed = self._computed[seq_id]
            used = max(computed, min(final_len, asked))
            token += computed
            reserved += used - computed
            internal += asked - used
            rounding += held - asked
        stranded = 0
        if next_request_slots is not None and self.find_fit(next_request_slots) is None:
            stranded = self._num_free_slots
        return MemoryBreakdown(
            token_slots=token,
            reserved_slots=reserved,
            internal_frag_slots=internal,
            external_frag_slots=rounding + stranded,
            free_slots=self._num_free_slots - stranded,
        )

    @abstractmethod
    def check_invariants(self) -> None:
        """Raise when the allocator's state is inconsistent (tests call it after every step)."""

    def _check_regions(self) -> None:
        """Regions and holes tile the address space; counters agree."""
        spans = [(offset, length, "hole") for offset, length in self.holes()]
        spans += [(offset, held, f"seq {s}") for s, (offset, held, _) in self._regions.items()]
        spans.sort()
        position = 0
        for offset, length, name in spans:
            invariant(length >= 1, f"{name} is empty")
            invariant(offset == position, f"{name} at {offset}, expected {position}")
            position += length
        invariant(position == self._num_slots, "regions and holes do not cover the space")
        free = sum(length for _, length in self.holes())
        invariant(free == self._num_free_slots, "free slot counter disagrees")
        for seq_id, (_, held, asked) in self._regions.items():
            invariant(1 <= asked <= held, f"seq {seq_id}: asked {asked} of {held} held")
            invariant(0 <= self._computed[seq_id] <= asked, f"seq {seq_id}: computed > region")

    def _check_seq(self, seq_id: int) -> int:
        if seq_id not in self._regions:
            raise KVCacheError(f"unknown seq {seq_id}")
        return seq_id


class ContiguousKVCache(RegionCache):
    """`num_slots` token slots; one contiguous region per sequence; first-fit allocation.

    Holes are kept sorted by offset and maximal (never two adjacent). Lookups scan the holes,
    whose number is at most the number of sequences + 1.
    """

    def __init__(self, num_slots: int) -> None:
        super().__init__(num_slots)
        self._hole_offsets: list[int] = [0]  # sorted
        self._hole_lengths: list[int] = [num_slots]  # parallel to _hole_offsets

    @property
    def largest_hole(self) -> int:
        return max(self._hole_lengths, default=0)

    def holes(self) -> list[tuple[int, int]]:
        return list(zip(self._hole_offsets, self._hole_lengths, strict=True))

    def find_fit(self, num_slots: int) -> int | None:
        """The lowest hole of at least `num_slots` slots."""
        if num_slots < 1:
            raise KVCacheError(f"a reservation needs num_slots >= 1, got {num_slots}")
        for offset, length in zip(self._hole_offsets, self._hole_lengths, strict=True):
            if length >= num_slots:
                return offset
        return None

    def can_ever_hold(self, num_slots: int, num_regions: int) -> bool:
        return num_slots * num_regions <= self._num_slots

    def reserve(self, seq_id: int, num_slots: int) -> int:
        if seq_id in self._regions:
            raise KVCacheError(f"seq {seq_id} already holds a region")
        offset = self.find_fit(num_slots)
        if offset is None:
            raise KVCacheError(
                f"seq {seq_id}: no hole of {num_slots} slots (largest {self.largest_hole}, "
                f"{self._num_free_slots} free)"
            )
        i = bisect_left(self._hole_offsets, offset)
        if self._hole_lengths[i] == num_slots:
            del self._hole_offsets[i], self._hole_lengths[i]
        else:
            self._hole_offsets[i] += num_slots
            self._hole_lengths[i] -= num_slots
        self._regions[seq_id] = (offset, num_slots, num_slots)
        self._computed[seq_id] = 0
        self._num_free_slots -= num_slots
        return offset

    def free(self, seq_id: int) -> None:
        """Release the region, merging it with the holes on either side."""
        offset, length, _ = self._regions.pop(self._check_seq(seq_id))
        del self._computed[seq_id]
        self._num_free_slots += length
        i = bisect_left(self._hole_offsets, offset)
        offsets, lengths = self._hole_offsets, self._hole_lengths
        if i > 0 and offsets[i - 1] + lengths[i - 1] == offset:  # merge with the hole before
            i -= 1
            lengths[i] += length
        else:
            offsets.insert(i, offset)
            lengths.insert(i, length)
        if i + 1 < len(offsets) and offsets[i] + lengths[i] == offsets[i + 1]:  # and after
            lengths[i] += lengths.pop(i + 1)
            del offsets[i + 1]

    def check_invariants(self) -> None:
        """Regions and holes tile the address space; holes are sorted and maximal."""
        self._check_regions()
        invariant(self._hole_offsets == sorted(self._hole_offsets), "holes not sorted")
        for (a, a_len), (b, _) in zip(self.holes(), self.holes()[1:], strict=False):
            invariant(a + a_len < b, f"holes at {a} and {b} are adjacent: not merged")

"""How KV capacity splits at one instant, in token slots (docs/design.md, "Memory")."""

from __future__ import annotations

from dataclasses import dataclass, field

# A MemoryBreakdown's seven fields in order, as a plain tuple (a step record's columns).
MemoryRow = tuple[int, int, int, int, int, int, int]


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    """KV capacity in token slots; the five parts sum to `total_slots`. Shared blocks count once.

    Beside the split, what sharing saved (in slots: the blocks' copies that sharing avoided, x
    block size; not part of the capacity, and not compared by ==, which is about the split):
    prefix_saved_slots by prefix-cache hits on blocks in use, fork_saved_slots by forked
    sequences (parallel samples, beams). Contiguous allocators share nothing: 0.

    token_slots: hold KV of tokens already computed.
    reserved_slots: held for tokens a request will still produce (or scheduled, not yet computed).
    internal_frag_slots: held but never to be used (past a request's final length, the unused tail
        of its last block, over-reservation of contiguous allocators).
    external_frag_slots: free but unusable by the next waiting request because not contiguous,
        and a buddy allocator's power-of-two rounding of a region past what its reservation
        asked for, as the vLLM paper counts it (contiguous allocators only; always 0 for paging).
    free_slots: the rest (cached-but-unreferenced prefix blocks count as free: they are reusable).
    """

    token_slots: int
    reserved_slots: int
    internal_frag_slots: int
    external_frag_slots: int
    free_slots: int
    prefix_saved_slots: int = field(default=0, compare=False)
    fork_saved_slots: int = field(default=0, compare=False)

    @property
    def row(self) -> MemoryRow:
        """The fields in order (`MemoryRow`)."""
        return (
            self.token_slots,
            self.reserved_slots,
            self.internal_frag_slots,
            self.external_frag_slots,
            self.free_slots,
            self.prefix_saved_slots,
            self.fork_saved_slots,
        )

    @property
    def total_slots(self) -> int:
        return (
            self.token_slots
            + self.reserved_slots
            + self.internal_frag_slots
            + self.external_frag_slots
            + self.free_slots
        )

"""Typed messages between the scheduler, the execution model and the recorder.

The scheduler hands the engine one frozen `StepPlan` per iteration; the execution model prices it
(`StepCost`); the recorder records both. No tuples of magic positions, no sentinel values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from functools import partial
from operator import itemgetter
from typing import Any, NamedTuple, Protocol


class PreemptionMode(Enum):
    """How a preempted request gives back its KV blocks."""

    SWAP = "swap"  # copy its blocks to CPU memory over the host link, copy back later
    RECOMPUTE = "recompute"  # drop its blocks, re-prefill prompt + generated tokens later


class SeqWork(NamedTuple):
    """One sequence's work in a step. A NamedTuple: built once per sequence per step (hot path)."""

    request_id: int
    seq_id: int
    num_new_tokens: int  # tokens computed this step: a prefill chunk, or 1 when decoding
    context_len: int  # tokens in this sequence's KV after the step, the new ones included
    is_prefill: bool  # computing prompt tokens (or recomputing prompt + generated after preemption)


# SeqWork(...) runs a Python-level __new__; this builds the same NamedTuple in C from one tuple of
# its five fields, for the schedulers' hot paths (a SeqWork per sequence per step).
seq_work_of = partial(tuple.__new__, SeqWork)


class Preemption(NamedTuple):
    request_id: int
    mode: PreemptionMode


class BlockCopy(NamedTuple):
    """A copy-on-write copy of one physical KV block before a write into a shared block."""

    src_block: int
    dst_block: int


@dataclass(frozen=True, slots=True)
class StepPlan:
    """What one engine iteration does. Aggregates are computed once by `build`."""

    work: tuple[SeqWork, ...]
    preemptions: tuple[Preemption, ...]
    num_swap_out_blocks: int
    num_swap_in_blocks: int
    copies: tuple[BlockCopy, ...]
    num_prefill_tokens: int
    num_decode_tokens: int
    num_prefill_seqs: int
    num_decode_seqs: int

    @classmethod
    def build(
        cls,
        work: tuple[SeqWork, ...] | list[SeqWork],
        preemptions: tuple[Preemption, ...] | list[Preemption] = (),
        num_swap_out_blocks: int = 0,
        num_swap_in_blocks: int = 0,
        copies: tuple[BlockCopy, ...] | list[BlockCopy] = (),
    ) -> StepPlan:
        prefill_tokens = decode_tokens = prefill_seqs = 0
        for item in work:
            if item.is_prefill:
                prefill_tokens += item.num_new_tokens
                prefill_seqs += 1
            else:
                decode_tokens += item.num_new_tokens
        return cls(
            tuple(work),
            tuple(preemptions),
            num_swap_out_blocks,
            num_swap_in_blocks,
            tuple(copies),
            prefill_tokens,
            decode_tokens,
            prefill_seqs,
            len(work) - prefill_seqs,
        )

    @property
    def num_tokens(self) -> int:
        return self.num_prefill_tokens + self.num_decode_tokens

    @property
    def listed_work(self) -> tuple[SeqWork, ...]:
        """The entries listed one by one: all of them here (a `GroupedStepPlan` sums its decode
        group instead). Every prefill entry is listed."""
        return self.work

    @property
    def num_context_tokens(self) -> int:
        """KV tokens of all sequences after the step (sum of `context_len`): attention reads."""
        return sum(map(_CONTEXT_LEN, self.work))

    @property
    def num_seqs(self) -> int:
        """Sequences in `work` (from the counts: a `GroupedStepPlan` builds `work` lazily)."""
        return self.num_prefill_seqs + self.num_decode_seqs

    @property
    def is_empty(self) -> bool:
        """Nothing to compute and nothing to move: the engine idles until an arrival."""
        return not (
            self.num_prefill_seqs
            or self.num_decode_seqs
            or self.num_swap_out_blocks
            or self.num_swap_in_blocks
        )


_CONTEXT_LEN = itemgetter(3)  # SeqWork.context_len


class GroupedStepPlan(StepPlan):
    """A StepPlan whose decode group (lone sequences decoding one token each, see
    `simulator.policies.decode_group`) is summed rather than listed: building a SeqWork per member
    per step is the per-sequence cost the group exists to avoid. `work` is rebuilt on first use, in
    the order the scheduler visited the sequences, equal to the plain plan's.

    `running`: the running groups as the step visited them; `bases`: member -> KV tokens before
    this step; a member's entry is SeqWork(request_id, seq_id, 1, base + 1, False).
    """

    __slots__ = ("_bases", "_listed", "_num_context_tokens", "_running", "_seq_work_of", "_work")
    _listed: tuple[SeqWork, ...]
    _running: tuple[Any, ...]  # the scheduler's groups (each has .request.request_id)
    _bases: Mapping[Any, int]
    _seq_work_of: Callable[[Any, int], SeqWork]
    _num_context_tokens: int
    _work: tuple[SeqWork, ...] | None

    def __init__(
        self,
        listed: tuple[SeqWork, ...],
        running: tuple[Any, ...],
        bases: Mapping[Any, int],
        seq_work_of_member: Callable[[Any, int], SeqWork],
        num_context_tokens: int,
        *,
        preemptions: tuple[Preemption, ...],
        num_swap_out_blocks: int,
        num_swap_in_blocks: int,
        copies: tuple[BlockCopy, ...],
        num_prefill_tokens: int,
        num_decode_tokens: int,
        num_prefill_seqs: int,
        num_decode_seqs: int,
    ) -> None:
        # The base is a frozen dataclass whose `work` slot this class replaces by a property.
        # One plan per engine step: the fields are set one by one, without a loop or a dict.
        set_field = object.__setattr__
        set_field(self, "preemptions", preemptions)
        set_field(self, "num_swap_out_blocks", num_swap_out_blocks)
        set_field(self, "num_swap_in_blocks", num_swap_in_blocks)
        set_field(self, "copies", copies)
        set_field(self, "num_prefill_tokens", num_prefill_tokens)
        set_field(self, "num_decode_tokens", num_decode_tokens)
        set_field(self, "num_prefill_seqs", num_prefill_seqs)
        set_field(self, "num_decode_seqs", num_decode_seqs)
        set_field(self, "_listed", listed)
        set_field(self, "_running", running)
        set_field(self, "_bases", bases)
        set_field(self, "_seq_work_of", seq_work_of_member)
        set_field(self, "_num_context_tokens", num_context_tokens)
        set_field(self, "_work", None)

    @property  # type: ignore[override]
    def work(self) -> tuple[SeqWork, ...]:
        work = self._work
        if work is None:
            work = self._merge()
            object.__setattr__(self, "_work", work)
        return work

    @property
    def listed_work(self) -> tuple[SeqWork, ...]:
        return self._listed

    @property
    def num_context_tokens(self) -> int:
        return self._num_context_tokens

    def _merge(self) -> tuple[SeqWork, ...]:
        listed = self._listed
        make = self._seq_work_of
        out: list[SeqWork] = []
        i = 0
        for group in self._running:
            base = self._bases.get(group)
            if base is not None:
                out.append(make(group, base))
                continue
            # A listed group's entries are consecutive and carry its request id.
            rid = group.request.request_id
            while i < len(listed) and listed[i].request_id == rid:
                out.append(listed[i])
                i += 1
        out.extend(listed[i:])  # swapped back in or admitted after the running ones
        return tuple(out)


class StepCost(NamedTuple):
    """What a step costs. Seconds of simulated time; FLOPs and bytes for MFU / MBU."""

    compute_s: float  # model forward (linear layers, attention, overhead, all-reduce)
    swap_s: float  # KV blocks moved over the host link (swap in + out), serialized on one link
    copy_s: float  # copy-on-write block copies on the GPU
    flops: float  # model FLOPs of the step (for MFU)
    bytes_moved: float  # HBM bytes of the step: weights + KV read/written + activations (for MBU)

    @property
    def duration_s(self) -> float:
        return self.compute_s + self.swap_s + self.copy_s


# Like `seq_work_of`: a StepCost from one tuple of its five fields, built in C (one per step).
step_cost_of = partial(tuple.__new__, StepCost)


class TransferPricer:
    """Prices a plan's KV moves, which every execution model prices alike: swapped blocks queue
    on the host link; a copy-on-write copy reads its source block and writes the copy in HBM at
    `copy_bps`."""

    __slots__ = ("block_bytes", "copy_bytes_per_copy", "copy_s_per_copy", "host_link_bps")

    def __init__(self, block_bytes: int, host_link_bps: float, copy_bps: float) -> None:
        self.block_bytes = block_bytes
        self.host_link_bps = host_link_bps
        self.copy_bytes_per_copy = 2 * block_bytes
        self.copy_s_per_copy = self.copy_bytes_per_copy / copy_bps

    def price(self, plan: StepPlan) -> tuple[float, float, float]:
        """(swap_s, copy_s, copy_bytes) of `plan`; zeros at once for the common step that moves
        no block."""
        num_copies = len(plan.copies)
        num_swap_blocks = plan.num_swap_in_blocks + plan.num_swap_out_blocks
        if not (num_copies or num_swap_blocks):
            return _NO_TRANSFER
        return (
            num_swap_blocks * self.block_bytes / self.host_link_bps,
            num_copies * self.copy_s_per_copy,
            float(num_copies * self.copy_bytes_per_copy),
        )


_NO_TRANSFER = (0.0, 0.0, 0.0)


class ExecutionModel(Protocol):
    """Prices a StepPlan. Implementations: roofline (analytic) and profile (measured)."""

    name: str

    def price(self, plan: StepPlan) -> StepCost: ...

    def describe(self) -> dict[str, object]:
        """Provenance for reports: kind, device, date, efficiency factors, extrapolation notes."""
        ...

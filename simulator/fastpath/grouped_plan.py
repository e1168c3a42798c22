"""The plan of a step in which the decode group's members take part (decode_group.py
`DecodeGroup.plan`): its members summed, not listed, and the listed work of everyone else."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pagesim.simulator.core.plan import BlockCopy, Preemption, SeqWork, StepPlan, seq_work_of
from pagesim.simulator.policies.seq_group import SeqGroup


class GroupedStepPlan(StepPlan):
    """A StepPlan whose decode group is summed rather than listed: building a SeqWork per
    member per step is the per-sequence cost the group exists to avoid. `work` is rebuilt on
    first use, in the order the scheduler visited the sequences, equal to the plain plan's.

    `running`: the running groups as the step visited them; `bases`: member -> KV tokens minus
    the group step; a member's entry is SeqWork(request_id, seq_id, 1, base + step + 1, False).
    """

    __slots__ = ("_bases", "_group_step", "_running", "_work")
    _running: tuple[Any, ...]
    _bases: Mapping[Any, int]
    _group_step: int
    _work: tuple[SeqWork, ...] | None

    def __init__(
        self,
        listed: tuple[SeqWork, ...],
        running: tuple[SeqGroup, ...],
        bases: Mapping[SeqGroup, int],
        group_step: int,
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
        num_requests: int,
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
        set_field(self, "num_requests", num_requests)
        set_field(self, "num_padding_seqs", 0)
        set_field(self, "num_context_tokens", num_context_tokens)
        set_field(self, "listed_work", listed)
        set_field(self, "num_tokens", num_prefill_tokens + num_decode_tokens)
        set_field(self, "num_seqs", num_prefill_seqs + num_decode_seqs)
        set_field(self, "moves_blocks", bool(copies or num_swap_out_blocks or num_swap_in_blocks))
        empty = not (
            num_prefill_seqs or num_decode_seqs or num_swap_out_blocks or num_swap_in_blocks
        )
        set_field(self, "is_empty", empty)
        set_field(self, "_running", running)
        set_field(self, "_bases", bases)
        set_field(self, "_group_step", group_step)
        set_field(self, "_work", None)

    @property
    def work(self) -> tuple[SeqWork, ...]:
        work = self._work
        if work is None:
            work = self._merge()
            object.__setattr__(self, "_work", work)
        return work

    @property
    def num_grouped_members(self) -> int:
        """Members decoding in the step, summed rather than listed: one sequence each."""
        return len(self._bases)

    def _merge(self) -> tuple[SeqWork, ...]:
        listed = self.listed_work
        step = self._group_step
        out: list[SeqWork] = []
        i = 0
        for group in self._running:
            base = self._bases.get(group)
            if base is not None:
                rid, seq_id = group.request.request_id, group.seq_ids[0]
                out.append(seq_work_of((rid, seq_id, 1, base + step + 1, False)))
                continue
            # A listed group's entries are consecutive and carry its request id.
            rid = group.request.request_id
            while i < len(listed) and listed[i].request_id == rid:
                out.append(listed[i])
                i += 1
        out.extend(listed[i:])  # swapped back in or admitted after the running ones
        return tuple(out)

"""The plan of a step in which the decode group's members take part (decode_group.py
`DecodeGroup.plan`): its members summed, not listed, and the listed work of everyone else."""

from __future__ import annotations

from collections.abc import Callable, Mapping
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
    _work: tuple[SeqWork, ...]

    def __init__(
        self,
        listed: tuple[SeqWork, ...],
        running: tuple[SeqGroup, ...],
        bases: Mapping[SeqGroup, int],
        group_step: int,
        num_context_tokens: int,
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
        # Its arguments are given in order: a class called with keywords packs them in a dict
        # (`type.__call__`), about 0.15 us each, where a function's call passes their names.
        # The base is a frozen dataclass whose `work` slot this class replaces by a property.
        # One plan per planned engine step: each slot is set through its descriptor, bound
        # once (`_SET`), which skips the frozen class's `__setattr__` lookup.
        (
            set_preemptions,
            set_swap_out,
            set_swap_in,
            set_copies,
            set_prefill_tokens,
            set_decode_tokens,
            set_prefill_seqs,
            set_decode_seqs,
            set_requests,
            set_context_tokens,
            set_listed_work,
            set_tokens,
            set_seqs,
            set_moves_blocks,
            set_is_empty,
            set_running,
            set_bases,
            set_group_step,
        ) = _SET
        set_preemptions(self, preemptions)
        set_swap_out(self, num_swap_out_blocks)
        set_swap_in(self, num_swap_in_blocks)
        set_copies(self, copies)
        set_prefill_tokens(self, num_prefill_tokens)
        set_decode_tokens(self, num_decode_tokens)
        set_prefill_seqs(self, num_prefill_seqs)
        set_decode_seqs(self, num_decode_seqs)
        set_requests(self, num_requests)
        set_context_tokens(self, num_context_tokens)
        set_listed_work(self, listed)
        set_tokens(self, num_prefill_tokens + num_decode_tokens)
        set_seqs(self, num_prefill_seqs + num_decode_seqs)
        set_moves_blocks(self, bool(copies or num_swap_out_blocks or num_swap_in_blocks))
        set_is_empty(
            self,
            not (num_prefill_seqs or num_decode_seqs or num_swap_out_blocks or num_swap_in_blocks),
        )
        set_running(self, running)
        set_bases(self, bases)
        set_group_step(self, group_step)  # (`_work` is left unset until `work` is read)

    num_padding_seqs = 0  # (the base's slot, shadowed: no member is padding)

    @property
    def work(self) -> tuple[SeqWork, ...]:
        try:
            return self._work
        except AttributeError:  # first read: merged once
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


# The slots' setters, in `__init__`'s order (a slot's descriptor lives on the class that
# declares it: the base's fields, then this class's own).
_SET: tuple[Callable[[object, object], None], ...] = tuple(
    vars(cls)[name].__set__
    for cls, names in (
        (
            StepPlan,
            (
                "preemptions",
                "num_swap_out_blocks",
                "num_swap_in_blocks",
                "copies",
                "num_prefill_tokens",
                "num_decode_tokens",
                "num_prefill_seqs",
                "num_decode_seqs",
                "num_requests",
                "num_context_tokens",
                "listed_work",
                "num_tokens",
                "num_seqs",
                "moves_blocks",
                "is_empty",
            ),
        ),
        (GroupedStepPlan, ("_running", "_bases", "_group_step")),
    )
    for name in names
)

"""The plan of a step in which the decode group's members take part (decode_group.py
`DecodeGroup.plan`): its members summed, not listed, and the listed work of everyone else."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from pagesim.simulator.core.plan import BlockCopy, Preemption, SeqWork, StepPlan, seq_work_of
from pagesim.simulator.policies.seq_group import SeqGroup


class GroupedStepPlan(StepPlan):
    """A StepPlan whose decode group is summed rather than listed: building a SeqWork per
    member per step is the per-sequence cost the group exists to avoid. `work` is rebuilt on
    first use, in the order the scheduler visited the sequences, equal to the plain plan's.

    `running`: the running groups as the step visited them; `bases`: member -> KV tokens minus
    the group step; a member's entry is SeqWork(request_id, seq_id, 1, base + step + 1, False).
    Made by `grouped_step_plan` (not by calling the class).
    """

    __slots__ = ("_bases", "_group_step", "_running", "_work")
    _running: tuple[Any, ...]
    _bases: Mapping[Any, int]
    _group_step: int
    _work: tuple[SeqWork, ...]

    # The frozen base's guards taken off for its maker's stores (`grouped_step_plan`): object's
    # `__setattr__` and `__delattr__` give the type CPython's generic attribute setter, which
    # the interpreter specialises to a slot store.
    __setattr__ = object.__setattr__
    __delattr__ = object.__delattr__

    num_padding_seqs = 0  # (the base's slot, shadowed: no member is padding)

    @property
    def work(self) -> tuple[SeqWork, ...]:
        try:
            return self._work
        except AttributeError:  # first read: merged once
            work = self._merge()
            self._work = work
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


_new_plan = partial(object.__new__, GroupedStepPlan)


def grouped_step_plan(
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
) -> GroupedStepPlan:
    """A GroupedStepPlan (its only maker): made with no class call, whose dispatch to a Python
    `__init__` costs more than its stores (one plan every planned step)."""
    # Its arguments are given in order (named ones cost a call more). The base's fields are
    # set by plain stores into their slots: the class's `__setattr__` and `__delattr__` are
    # object's (above), so the interpreter stores straight into a slot (0.35 us a plan,
    # against 3 us through the slots' descriptors' setters). Its readers hold it frozen all
    # the same: the type checker sees the base's read-only fields (`plan` is Any here).
    plan: Any = _new_plan()
    plan.preemptions = preemptions
    plan.num_swap_out_blocks = num_swap_out_blocks
    plan.num_swap_in_blocks = num_swap_in_blocks
    plan.copies = copies
    plan.num_prefill_tokens = num_prefill_tokens
    plan.num_decode_tokens = num_decode_tokens
    plan.num_prefill_seqs = num_prefill_seqs
    plan.num_decode_seqs = num_decode_seqs
    plan.num_requests = num_requests
    plan.num_context_tokens = num_context_tokens
    plan.listed_work = listed
    plan.num_tokens = num_prefill_tokens + num_decode_tokens
    plan.num_seqs = num_prefill_seqs + num_decode_seqs
    plan.moves_blocks = bool(copies or num_swap_out_blocks or num_swap_in_blocks)
    plan.is_empty = not (
        num_prefill_seqs or num_decode_seqs or num_swap_out_blocks or num_swap_in_blocks
    )
    plan._running = running
    plan._bases = bases
    plan._group_step = group_step  # (`_work` is left unset until `work` is read)
    result: GroupedStepPlan = plan
    return result

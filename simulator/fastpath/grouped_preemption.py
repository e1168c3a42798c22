"""vLLM V1's running phase when a step is short of blocks, with the decode group's members kept
summed (DecodeGroup.schedule_running hands a step here instead of releasing every member).

A step whose blocks do not all fit preempts (policies/v1_running.py: FCFS, the victim the last
of the requests not yet visited by the victim policy, else the request itself). Releasing every
member and visiting them one by one cost a hundred catch-ups, allocations and rejoins a step,
yet only a few of the visits do anything: a member whose token fits in its last block takes no
block and cannot fail. This replays the per-step loop in the same visiting order, with the same
budget and the same allocations and preemptions in the same order, but a member not crossing a
block boundary costs one test; a crossing member takes its block (`DecodeGroup.grow_one`), and
a member preempted leaves the group first, caught up, exactly as the per-step path holds it.

Where the replay would read a member's progress, which the group holds in closed form, it is not
used: the caller passes a `Preempter` only for the last-arrived victim policy (whose key reads
arrival times and ids only) under FCFS admission. The budget reaches every group (the caller
checked: `left >= 0`), as preemption only takes groups not yet visited, so no group visited
after a victim sees less budget than the check gave it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Protocol

from pagesim.simulator.kv.paged_cache import PagedKVCache
from pagesim.simulator.policies.grouping import Preempter
from pagesim.simulator.policies.seq_group import AddToStep, Demand, SeqGroup, StepBuilder


class Members(Protocol):
    """What the replay asks of the decode group (decode_group.py `DecodeGroup`)."""

    kv: PagedKVCache

    @property
    def members(self) -> Mapping[int, object]:
        """The members by seq id."""
        ...

    def grow_one(self, seq_id: int) -> bool:
        """The member takes its crossing's block if the pool has one (True)."""
        ...

    def release(self, group: SeqGroup) -> None:
        """The member leaves, brought up to date."""
        ...


def preempting_running_phase(
    group_of: Members,
    running: list[SeqGroup],
    step: StepBuilder,
    budget: int,
    demand: Demand,
    add_to_step: AddToStep,
    preempter: Preempter,
    crossing: set[int],
    now_s: float,
) -> int:
    """The running phase of policies/v1_running.py `schedule_running_v1` (FCFS), members summed:
    `crossing` are the members whose token needs a new block this step. `running` is updated in
    place (victims out); returns the budget left."""
    members = group_of.members  # by seq id; a member leaving is popped from it
    allocate_slots = group_of.kv.allocate_slots
    remaining: deque[SeqGroup] = deque(running)
    kept: list[SeqGroup] = []
    while remaining and budget > 0:
        group = remaining.popleft()
        seq_id = group.seq_ids[0]
        if seq_id in members:
            if seq_id in crossing:
                while not group_of.grow_one(seq_id):
                    if not _make_room(group_of, preempter, group, remaining, step, now_s):
                        break  # it preempted itself
                else:
                    kept.append(group)
                    budget -= 1
                continue
            kept.append(group)  # its slot lies in its last block: nothing to do
            budget -= 1
            continue
        asked = demand(group, budget)
        if asked is None:
            kept.append(group)  # no room this step; it keeps its blocks
            continue
        num_new, tokens, is_prefill = asked
        while (copies := allocate_slots(group.seq_ids, num_new)) is None:
            if not _make_room(group_of, preempter, group, remaining, step, now_s):
                break
        if copies is None:
            continue  # it preempted itself
        add_to_step(step, group, num_new, is_prefill, copies)
        kept.append(group)
        budget -= tokens
    running[:] = kept + list(remaining)
    if members:
        step.num_decode_tokens += len(members)
        step.is_grouped = True
    return budget


def _make_room(
    group_of: Members,
    preempter: Preempter,
    group: SeqGroup,
    remaining: deque[SeqGroup],
    step: StepBuilder,
    now_s: float,
) -> bool:
    """PagedState.preempt_for with the members in mind: the victim among `remaining` (else
    `group` itself) leaves the group, caught up, then is preempted. False if `group` went."""
    if remaining:
        victim = preempter.victim_of(remaining)
        remaining.remove(victim)
    else:
        victim = group
    if victim.seq_ids[0] in group_of.members:
        group_of.release(victim)
    preempter.preempt(victim, step, now_s)
    return victim is not group

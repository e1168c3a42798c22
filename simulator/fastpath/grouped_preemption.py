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

from collections.abc import Mapping
from itertools import compress, filterfalse
from operator import not_, or_
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

    @property
    def bases(self) -> Mapping[SeqGroup, int]:
        """The members by group."""
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
    crossing: set[SeqGroup],
    now_s: float,
) -> int:
    """The running phase of policies/v1_running.py `schedule_running_v1` (FCFS), members summed:
    `crossing` are the members whose token needs a new block this step. `running` is updated in
    place (victims out); returns the budget left.

    The groups are visited in order, but the members in between those that may act (the
    others and the crossing members, found in C) are taken a slice at a time, each one budget
    token, as far as the budget reaches, as the one-by-one loop takes them. Victims taken out
    of the groups not yet visited (`preempted`) are skipped when reached."""
    members = group_of.members  # by seq id; a member leaving is popped from it
    allocate_slots = group_of.kv.allocate_slots
    num_running = len(running)
    is_member = map(group_of.bases.__contains__, running)
    acting = list(
        compress(
            range(num_running), map(or_, map(crossing.__contains__, running), map(not_, is_member))
        )
    )
    acting.append(num_running)  # the members after the last of them
    preempted: set[SeqGroup] = set()
    kept: list[SeqGroup] = []
    cut: list[SeqGroup] = []  # members the budget did not reach
    at = 0  # running[at:] are not yet visited (less those preempted)
    for pos in acting:
        if at < pos:  # members whose slot lies in their last block: nothing to do
            plain = running[at:pos]
            if preempted:
                plain = list(filterfalse(preempted.__contains__, plain))
            if budget < len(plain):
                taken = budget if budget > 0 else 0
                kept += plain[:taken]
                budget -= taken
                cut = plain[taken:]
                at = pos
                break
            kept += plain
            budget -= len(plain)
        at = pos
        if pos == num_running or budget <= 0:
            break
        group = running[pos]
        at = pos + 1
        if group in preempted:
            continue
        if group in crossing:
            seq_id = group.seq_ids[0]
            while not group_of.grow_one(seq_id):
                if not _make_room(group_of, preempter, group, running, at, preempted, step, now_s):
                    break  # it preempted itself
            else:
                kept.append(group)
                budget -= 1
            continue
        asked = demand(group, budget)
        if asked is None:
            kept.append(group)  # no room this step; it keeps its blocks
            continue
        num_new, tokens, is_prefill = asked
        while (copies := allocate_slots(group.seq_ids, num_new)) is None:
            if not _make_room(group_of, preempter, group, running, at, preempted, step, now_s):
                break
        if copies is None:
            continue  # it preempted itself
        add_to_step(step, group, num_new, is_prefill, copies)
        kept.append(group)
        budget -= tokens
    rest = running[at:]
    if preempted:
        rest = list(filterfalse(preempted.__contains__, rest))
    running[:] = kept + cut + rest
    if members:
        step.num_decode_tokens += len(members)
        step.is_grouped = True
    return budget


def _make_room(
    group_of: Members,
    preempter: Preempter,
    group: SeqGroup,
    running: list[SeqGroup],
    at: int,
    preempted: set[SeqGroup],
    step: StepBuilder,
    now_s: float,
) -> bool:
    """PagedState.preempt_for with the members in mind: the victim among the groups not yet
    visited (`running[at:]` less those `preempted`; else `group` itself) leaves the group,
    caught up, then is preempted. False if `group` went."""
    remaining = running[at:]
    if preempted:
        remaining = list(filterfalse(preempted.__contains__, remaining))
    if remaining:
        victim = preempter.victim_of(remaining)
        preempted.add(victim)
    else:
        victim = group
    if victim.seq_ids[0] in group_of.members:
        group_of.release(victim)
    preempter.preempt(victim, step, now_s)
    return victim is not group

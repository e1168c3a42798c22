"""Runs of pure decode-group steps, settled ahead: many engine steps for one SimPy event.

Most steps of a long run are *pure*: every running request is a decode-group member
(simulator/policies/decode_group.py), nothing is swapped out or landing, the step's token budget
holds every member, and nothing waits that the step could admit (nothing waits, or the batch is
full: max_num_seqs, or the budget is spent). Such a step is the same function of the group's state
whatever the clock says, and so is the next one, until something changes that state from
outside (an arrival) or from inside (a member finishes, or the crossing members need more
blocks than are free). `pure_run` says how many of the next steps are fixed that way and what
each one is (its sequences and context tokens, all the price and the step record need). The
replica (simulator/cluster/pure_runs.py) prices them at once and waits for the last one's end,
applying each step's schedule (crossing members take their blocks: `start_pure_step` for the
first, `DecodeGroup.grow_ahead` for the later ones, several at once) and completion
(`PagedScheduler.complete_pure_steps`) as late as nobody has looked, and cutting the run short
when a request arrives. `tests/simulator/cluster/test_windows.py` compares such runs
with the per-step loop's, row for row.

A run stops at the step in which the first member finishes (its completion changes the running
set), and before the step whose crossing members would not find their blocks free (that step
releases the group: the per-step path handles it). Blocks are only taken in a run, never
freed (nobody leaves before its last step), so the free count at its start bounds them all.
"""

from __future__ import annotations

import heapq

from pagesim.simulator.policies.decode_group import DecodeGroup
from pagesim.simulator.policies.paged_state import PagedState


class PureRun:
    """The next `num_steps` pure steps: `num_members` sequences decode in each; step i (from
    0) is the group's step `first_step + i` and reads `contexts(i, i + 1)[0]` KV tokens."""

    __slots__ = ("_sum_base", "first_step", "num_members", "num_steps")

    def __init__(self, group: DecodeGroup, num_steps: int) -> None:
        self.num_steps = num_steps
        self.num_members = len(group.bases)
        self.first_step = group.step
        self._sum_base = group.sum_base

    def contexts(self, first: int, stop: int) -> range:
        """DecodeGroup.num_context_tokens (the plan's context tokens) at steps first..stop - 1
        of the run: each step adds a token a member (a run has members, so a range)."""
        s = self.num_members
        at = self._sum_base + s * (self.first_step + 1)
        return range(at + s * first, at + s * stop, s)


def pure_run(state: PagedState, limit: int) -> PureRun | None:
    """The next pure steps (at most `limit`), or None when the next step is not pure."""
    group = state.decode_group
    if group is None or state.spec is not None:
        return None
    num_members = len(group.bases)
    if not num_members or len(state.running) != num_members:
        return None
    if state.swapped or state.receiving or state.landed:
        return None
    knobs = state.knobs
    budget_left = knobs.max_num_batched_tokens - num_members
    if budget_left < 0:
        return None  # the budget reaches only some members: the per-step path decides who
    if len(state.waiting) and budget_left > 0:
        # V1 admits the head unless the batch is full (vllm_v1.admit_chunks): then it waits,
        # and keeps waiting while nobody finishes, which ends the run. Otherwise not pure.
        head = state.waiting.peek()
        if state.num_running_seqs + head.request.num_seqs <= knobs.max_num_seqs:
            return None
    num_steps = _steps_before_change(group, limit)
    if not num_steps:
        return None
    return PureRun(group, num_steps)


def start_pure_step(state: PagedState) -> None:
    """A run's first step's schedule: its crossing members take their blocks (the step's only
    change to the state before it completes; `pure_run` counted them as free)."""
    group = state.decode_group
    assert group is not None
    group.grow_ahead(1)  # `grow(crossing())`, a block each in one allocation


def _steps_before_change(group: DecodeGroup, limit: int) -> int:
    """Steps the members can take alone: through the first in which one finishes, and short of
    the first whose crossing members would not all find a free block."""
    calendar = group.finish_calendar
    members = group.members
    while calendar and members.get(calendar[0][1]) is not calendar[0][3]:
        heapq.heappop(calendar)  # stale: that member left (advance would drop it too)
    if calendar:
        limit = min(limit, calendar[0][0] - group.step)
    sizes = list(map(len, group.crossing_calendar))  # members crossing at K % block_size
    at = group.step % group.block_size
    return steps_that_fit(sizes[at:] + sizes[:at], group.kv.num_free_blocks, limit)


def steps_that_fit(due: list[int], free: int, limit: int) -> int:
    """The first i < `limit` such that steps 0..i take more than `free` blocks, step j taking
    `due[j % len(due)]` (the members crossing then: the pattern repeats every block_size
    steps, each period a block per member); `limit` if none. Whole periods that fit are
    skipped, not walked step by step."""
    per_period = sum(due)
    if not per_period:
        return limit
    periods = free // per_period
    free -= periods * per_period
    period = len(due)
    for i in range(periods * period, limit):
        free -= due[i % period]
        if free < 0:
            return i
    return limit

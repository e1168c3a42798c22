"""Runs of pure decode-group steps, settled ahead: many engine steps for one SimPy event.

Most steps of a long run are *pure*: every running request is a decode-group member
(decode_group.py), nothing is swapped out or landing, the step's token budget holds every member,
and nothing waits that the step could admit (the step policy's `pure_step_lookups`; V1: nothing
waits, or the batch is full, the budget spent or the head's blocks do not fit; V0: nothing waits,
or the head's batch, token cap or blocks above the watermark refuse it). Such a step is the same
function of the group's state whatever the clock says, and so is the next one, until something
changes that state from outside (an arrival) or from inside (a member finishes, or the crossing
members need more blocks than are free). `pure_run` says how many of the next steps are fixed that
way and what each one is (its sequences and context tokens, all the price and the step record
need). The replica's runs (pure_runs.py) price them at once and waits for the last one's end,
applying each step's schedule (crossing members take their blocks: `DecodeGroup.grow_ahead`,
several steps' at once; `start_pure_step` for the step in flight when someone looks before it is
applied) and completion (`complete_pure_steps`: what `PagedScheduler.complete` would do with their
plans) as late as nobody has looked, and cutting the run short when a request arrives.
`tests/simulator/cluster/test_windows.py` compares such runs with the per-step loop's, row for row.

A run stops at the step in which the first member finishes (its completion changes the running
set), and before the step whose crossing members would not find their blocks free (that step
releases the group: the per-step path handles it; under V0, which decodes only while a block
per sequence is free, before the step that would leave none free). Blocks are only taken in a
run, never freed (nobody leaves before its last step), so the free count at its start bounds
them all.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence, Sized
from typing import TypeVar

from pagesim.simulator.core.memory import MemoryRow
from pagesim.simulator.fastpath.decode_group import DecodeGroup
from pagesim.simulator.fastpath.run_rows import RunMemory, run_memory_of
from pagesim.simulator.policies.paged import PagedScheduler


class PureRun:
    """The next `num_steps` pure steps: `num_members` sequences decode in each; step i (from
    0) is the group's step `first_step + i` and reads `first_context + num_members * i` KV
    tokens (DecodeGroup.num_context_tokens, the plan's: each step adds a token a member). Each
    step's schedule counts `query_tokens` as looked up in the prefix cache (a waiting head
    refused: the step policy's `pure_step_lookups`) and, for a head whose prefix hits were
    `num_hit_blocks` free blocks at the tail of the free order (admission.RefusedHits), the
    tokens of those hits that the crossing members' blocks, taken from the head of that order
    first, have not reached by then (`hit_tokens`). Made by `pure_run` (not by calling the
    class)."""

    __slots__ = (
        "_hit_tokens",
        "first_context",
        "first_step",
        "num_members",
        "num_steps",
        "query_tokens",
    )

    num_steps: int
    query_tokens: int
    num_members: int
    first_step: int
    first_context: int
    _hit_tokens: list[int] | tuple[()]  # by step of the run (none: no list made)

    def hit_tokens(self, first: int, num_steps: int) -> int:
        """Prefix-hit tokens of the refused admissions of steps first..first + num_steps - 1."""
        return sum(self._hit_tokens[first : first + num_steps]) if self._hit_tokens else 0


R = TypeVar("R", bound=PureRun)


def pure_run(paged: PagedScheduler, group: DecodeGroup, limit: int, kind: type[R]) -> R | None:
    """The next steps that only `group`'s members (the scheduler's decode group) take, fixed
    now: at most `limit`, None when the next step is not such a step. They are then completed
    and recorded in order, as the per-step loop would, a few at a time (`complete_pure_steps`,
    which starts each one first, unless `start_pure_step` started it when someone looked).
    The run is a `kind`: PureRun, or a subclass that keeps more of it (pure_runs.py's window)."""
    if paged.unrecorded_preemptions:  # the next step records them: it must be a planned one
        return None
    state = paged.state
    if state.spec is not None:
        return None
    num_members = len(group.bases)
    if not num_members or len(state.running) != num_members:
        return None
    if state.swapped or state.receiving or state.landed:
        return None
    lookups = paged.policy.pure_step_lookups(state)
    if lookups is None:
        return None  # the budget or an admission: the per-step path decides
    num_steps = _steps_before_change(group, limit)
    if not num_steps:
        return None
    # The run, made with no class call (its dispatch to a Python __init__ cost more than the
    # stores, one a run): PureRun's fields in order.
    run = object.__new__(kind)
    run.num_steps = num_steps
    run.num_members = num_members
    run.first_step = step = group.step
    run.first_context = group.sum_base + num_members * (step + 1)
    run._hit_tokens = ()
    if isinstance(lookups, int):
        run.query_tokens = lookups
    else:
        run.query_tokens = lookups.query_tokens
        if lookups.num_hit_blocks:
            run._hit_tokens = _hit_tokens(group, num_steps, lookups.num_hit_blocks)
    return run


def _hit_tokens(group: DecodeGroup, num_steps: int, num_hit_blocks: int) -> list[int]:
    """A run's prefix-hit tokens by step (PureRun's): a refused head's `num_hit_blocks` free
    hits, less those the crossing members' blocks have taken by each step."""
    hits = []
    crossing_at, bs = group.crossing_calendar, group.block_size
    spare = group.kv.num_free_blocks - num_hit_blocks  # taken before any hit is
    taken = 0
    for i in range(num_steps):
        taken += len(crossing_at[(group.step + i) % bs])
        hits.append((num_hit_blocks - max(0, taken - spare)) * bs)
    return hits


def start_pure_step(group: DecodeGroup, run: PureRun) -> None:
    """The schedule of a run's step in flight not yet started (its first, when someone looks
    before it is applied), what `PagedScheduler.schedule` would change: its crossing members
    take their blocks (`pure_run` counted them as free)."""
    group.grow_ahead(1)  # `grow(crossing())`, a block each in one allocation
    if run.query_tokens:
        note_refusals(group, run, 0, 1)


def note_refusals(group: DecodeGroup, run: PureRun, first: int, num_steps: int) -> None:
    """The prefix-cache lookups of the refused admissions of the run's steps first..first +
    num_steps - 1 (their hit blocks requeued where they lie: nothing moves)."""
    group.kv.note_prefix_query(run.query_tokens * num_steps, run.hit_tokens(first, num_steps))


def complete_pure_steps(
    paged: PagedScheduler,
    group: DecodeGroup,
    num_steps: int,
    end_s: float,
    queues: tuple[int, int, int],
    start_next: bool = False,
    live_tail: bool = False,
    first_started: bool = True,
) -> RunMemory:
    """Complete the next `num_steps` of `pure_run`'s steps in order, the last ending at
    `end_s`, the first already started (unless not `first_started`: its blocks are then
    taken with the later steps', nobody having looked meanwhile), each later one started
    first, and then (if `start_next`) start the one after them: what `PagedScheduler.complete`
    and `start_pure_step` do with their plans, which list nothing. Returns what a step record reads
    after each (the queue lengths, then `memory_breakdown()`'s row), in closed form: the queue
    lengths are the run's `queues` (as it opened: nothing joins or leaves a pure run), but
    those after the last step that finishes nobody are read now if `live_tail` (that step was
    in flight when a request arrived: queued now, it ended after it)."""
    state = paged.state
    num_members = len(group.bases)
    paged.num_output_tokens += num_steps * num_members  # one token each a step
    # The run's first finish (pure_run dropped the calendar's stale head; nobody joins or
    # leaves before it, so only the run's last step can reach it): the steps before it
    # advance the group without looking.
    calendar = group.finish_calendar
    first_finish = calendar[0][0] if calendar else None
    finishes = first_finish is not None and group.step + num_steps >= first_finish
    assert not finishes or group.step + num_steps == first_finish, "a run ends at a finish"
    plain = num_steps - finishes  # steps that advance without looking
    first: MemoryRow | None = None
    tail_queues = queues
    gains: list[int] = []
    takes: list[int] = []
    if plain:
        group.step += 1  # the first step (started already)
        # The row after it, as `memory_breakdown` takes the group alone; the later steps'
        # rows follow in closed form (RunMemory) from their blocks, taken at once now.
        first = group.memory_row()
        if live_tail and not finishes:
            tail_queues = (len(state.running), len(state.waiting), len(state.swapped))
        if not first_started:  # its blocks with the later steps': one allocation
            group.step -= 1
            gains, takes = group.grow_ahead(num_steps + start_next)
            group.step += 1
        elif num_steps > 1 or start_next:
            gains, takes = group.grow_ahead(num_steps - 1 + start_next)
            gains.insert(0, 0)  # the first step's, in `first`
            takes.insert(0, 0)
        else:
            gains = takes = [0]
        group.step += plain - 1
    last = None
    if finishes:
        assert not start_next, "no step follows a run's finish"
        if not plain and not first_started:  # a run of one step: its blocks taken now
            group.grow_ahead(1)  # (`start_pure_step`'s, its lookups noted by the caller)
        # Someone is due: pure_run dropped the calendar's stale head, and nobody has left.
        finished = group.advance()  # members whose last token appeared now
        assert finished, "a run's finish finishes someone"
        for member in finished:
            member.request.last_token_s = end_s
        state.finish(finished, end_s)
        others = len(state.running) - len(group.bases) or state.receiving or state.landed
        # `memory_breakdown()`'s row where the group is all that holds blocks, in closed form
        # as `first`'s (walking nobody), else where the last members finished (a walk of
        # nobody, but the waiting's)
        row = group.memory_row() if group.bases and not others else paged.memory_row()
        last = (*paged.queue_lengths(), *row)
    return run_memory_of(
        (plain, num_members, group.block_size, queues, tail_queues, first, gains, takes, last)
    )


def _steps_before_change(group: DecodeGroup, limit: int) -> int:
    """Steps the members can take alone: through the first in which one finishes, and short of
    the first whose crossing members would not all find a free block."""
    calendar = group.finish_calendar
    members = group.members
    while calendar and members.get(calendar[0][1]) is not calendar[0][3]:
        heapq.heappop(calendar)  # stale: that member left (advance would drop it too)
    if calendar:
        limit = min(limit, calendar[0][0] - group.step)
    free = group.kv.num_free_blocks
    if group.keeps_block_per_seq:  # V0: a block stays free after each step's crossings
        free -= 1
        if free < 0:
            return 0
    bs = group.block_size
    # Each member crosses once a period of block_size steps (the calendar's sets hold every
    # member once: DecodeGroup.check_invariants), so `steps_that_fit` skips free // members
    # whole periods first: where they reach the limit, it is the answer (the calendar unread).
    num_members = len(group.bases)
    if free // num_members * bs >= limit:
        return limit
    # members crossing at K % block_size, read in place (not listed and rotated)
    return steps_that_fit(group.crossing_calendar, group.step, num_members, free, limit)


def steps_that_fit(due: Sequence[Sized], first: int, per_period: int, free: int, limit: int) -> int:
    """The first i < `limit` such that steps 0..i take more than `free` blocks, step j taking
    `len(due[(first + j) % len(due)])` (the members crossing then: the pattern repeats every
    block_size steps, each period a block per member; `per_period` their sum); `limit` if none.
    Whole periods that fit are skipped, not walked step by step."""
    if not per_period:
        return limit
    periods = free // per_period
    period = len(due)
    skipped = periods * period
    if skipped >= limit:
        return limit
    free -= periods * per_period
    for i in range(skipped, limit):
        free -= len(due[(first + i) % period])
        if free < 0:
            return i
    return limit

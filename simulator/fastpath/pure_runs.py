"""A replica's runs of pure decode steps, settled in one SimPy event (simulator/cluster/replica.py
owns one `PureRuns` when they are on: attach.py).

When the next steps are pure (decode_window.py: only decode-group members, their outcome
fixed now), the replica's loop prices them (`open`), waits for the last priced one's end
(`woken`) and applies each step as late as it can: when that timeout fires, or earlier when
someone looks (`catch_up`: a router's KV read, a stop). A request that arrives (`cut`) ends the
run with the step in flight (then the loop plans again, as it would have), applied with the
steps before it when it ends: an arrival only queues a request, which those steps do not read,
but for the queue lengths recorded after each (the run's own until the arrival, read afresh
after the step in flight). Every step keeps its own start and end times, price and record:
the run is the per-step loop's (tests/simulator/cluster/test_windows.py compares the two).

Ties: an outside look at the very instant a step ends sees it in flight, as the per-step loop's
SimPy order has it for a stop (`env.run(until=...)`, urgent), a session turn's start (urgent)
and an arrival whose timer was set before that step started (the usual case). Only an arrival
whose timer was set while that step ran, landing exactly (to the last bit) on its end, may be
ordered otherwise: the per-step loop completes the step first, and so does a run whose wake-up
was set at that end before the timer (the step was the last priced, or a cut set it), but not
one that wakes later. Arrival times and step ends are floats from different sums; the tests
pin the ties that do order alike.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

import simpy

from pagesim.simulator.execution.roofline import RooflineModel
from pagesim.simulator.fastpath.decode_costs import DecodeTerms, decode_terms, price_steps
from pagesim.simulator.fastpath.decode_group import DecodeGroup
from pagesim.simulator.fastpath.decode_window import (
    PureRun,
    complete_pure_steps,
    note_refusals,
    pure_run,
    start_pure_step,
)
from pagesim.simulator.fastpath.run_rows import RunRecorder
from pagesim.simulator.policies.paged import PagedScheduler

# Most pure decode steps a replica settles ahead in one run, and how many it prices first (then
# twice as many each time those end uncut): a cut wastes the pricing of the steps past it, and
# each chunk costs an event. On the 8-replica Azure bench's first 2,000 requests (runs of 12
# steps on average, half of them cut), 16 first took 3.2% fewer instructions than 4, 1.3% fewer
# than 8, and 0.3% fewer than 32 (valgrind, 7 December 2026). Once a step's price took fewer
# instructions (`price_steps` multiplying floats), 24 took 0.33% fewer than 16 and 0.15% fewer
# than 32 on its first 4,000 requests; the Azure trace on one replica (runs of 3 steps) did not
# move.
WINDOW_STEPS = 64
FIRST_PRICED = 24


class PureRuns:
    """The runs of one replica: its paged scheduler and that scheduler's decode group, its
    execution model (one that prices statelessly) and the recorder of the runs' rows into its
    step log; `process` is the replica's loop, whose wake-up a cut moves earlier."""

    def __init__(
        self,
        env: simpy.Environment,
        paged: PagedScheduler,
        group: DecodeGroup,
        execution: RooflineModel,
        rows: RunRecorder,
    ) -> None:
        self._env, self._paged, self._group = env, paged, group
        self._execution, self._rows = execution, rows
        self.process: simpy.Process | None = None
        self._window: _Window | None = None
        self.num_steps_ahead = 0  # steps applied from runs (the rest one by one)
        self.num_cuts = 0  # runs an arrival ended early
        # Whether a run's step finished members since the replica's loop last cleared it
        # (nobody else ends a request during a run, and each arrival adds what it queues to
        # the replica's count `_settle` tests: the loop may skip telling the fleet).
        self.has_finished = False
        self._terms: dict[int, DecodeTerms] = {}  # decode price terms by sequence count

    def open(self, now: float) -> simpy.Timeout | None:
        """A run starting `now` (the clock, which the loop knows), its first steps priced and the
        first one scheduled: the event the loop waits on (then `woken`); None if the next step
        is not pure or none would survive SimPy's clock. A run of one step (the next finishes a
        member) is still cheaper than planning it: no plan, its price and memory row in closed
        form."""
        paged = self._paged
        window = pure_run(paged, self._group, WINDOW_STEPS, _Window)
        if window is None:
            return None
        num_members = window.num_members
        terms = self._terms.get(num_members)
        if terms is None:
            terms = self._terms[num_members] = decode_terms(self._execution, num_members)
        env = self._env
        # The window's fields (`_Window`'s, set here: no second object a run). The queue
        # lengths (`queue_lengths()`, inlined): the members run, nothing is swapped out
        # (`pure_run` checked both).
        window.terms, window.queues = terms, (num_members, len(paged.state.waiting), 0)
        window.durations, window.times = [], [now]
        window.num_priced = window.num_started = window.num_done = 0
        window.is_cut = False
        window.wake = None
        if not self._price_more(window, FIRST_PRICED, now):
            return None
        self._window = window
        # The first step is scheduled now, as the per-step loop would, but its blocks are
        # taken (`num_started`) when it is applied, with the later steps' (or when someone
        # looks: `catch_up`): nothing reads them before. The loop wakes at the end of the last
        # priced step (a cut moves it earlier).
        window.wake = wake = env.timeout(window.times[window.num_priced] - now)
        return wake

    def woken(self) -> simpy.Timeout | None:
        """The open run's wake-up came: the next one while its priced steps ended uncut and more
        are left (priced now, twice as many each time), else None, every step left applied.
        (The loop waits on these itself: a generator a run cost more.)"""
        window = self._window
        assert window is not None
        env = self._env
        # The clock (not the property): the wake-up is set to land on the last priced step's
        # end exactly (`_price_more`), a cut's too (`cut`).
        now = window.times[window.num_priced]
        num_priced = len(window.durations)
        more = not window.is_cut and num_priced < window.num_steps
        if more and self._price_more(window, num_priced, now):
            window.wake = wake = env.timeout(window.times[window.num_priced] - now)  # (`open`'s)
            return wake
        self.catch_up(False, now)  # its own timeout: the step ending now is done
        self._window = None
        return None

    def extra_output_tokens(self) -> int:
        """Tokens of the open run's steps that ended before now, counted, not applied: each
        gives every member one."""
        window = self._window
        if window is None:
            return 0
        done = window.num_done  # (step i ends at times[i + 1])
        stop = bisect_left(window.times, self._env.now, done + 1, window.num_priced + 1) - 1
        return (stop - done) * window.num_members

    def catch_up(self, before_now: bool = True, now: float | None = None) -> None:
        """Apply the open run's steps up to now (`now`, if the caller has read it): those that
        ended are completed and recorded (`before_now`: only those that ended before this
        instant, as an outside look sees them), the one in flight is started (its blocks
        taken)."""
        window = self._window
        if window is None:
            return
        if now is None:
            now = self._env.now
        paged = self._paged
        done = window.num_done
        started = window.num_started
        assert done <= started <= done + 1  # the step in flight's blocks taken, or not yet
        find = bisect_left if before_now else bisect_right
        times = window.times  # (step i ends at times[i + 1])
        stop = find(times, now, done + 1, window.num_priced + 1) - 1
        if stop == done and started == done:  # someone looks at the step in flight
            start_pure_step(self._group, window)
            window.num_started = done + 1
        elif stop > done:
            start_next = stop < window.num_priced  # the step in flight now: started with them
            memory = complete_pure_steps(
                paged,
                self._group,
                stop - done,
                times[stop],
                window.queues,
                start_next,
                live_tail=window.is_cut and stop == window.num_priced,  # the step in flight at it
                first_started=started > done,
            )
            if window.query_tokens:  # the lookups of the steps started now
                # (steps started..: the first one's too when it was not started before)
                note_refusals(self._group, window, started, stop + start_next - started)
            if memory.last is not None:  # its last step finished members
                self.has_finished = True
            rows = self._rows  # (their rows, into the step log)
            rows.add_parts(
                times[done:stop],  # their starts (`durations` has the step in flight's too)
                window.durations[done:stop],
                window.first_context + window.num_members * done,
                window.terms,
                memory,
                memory.num_members / paged.batch_capacity,  # slot use: no padding, all useful
                rows.peak_flops,
                rows.bandwidth,
            )
            window.num_done = stop
            window.num_started = stop + start_next
            self.num_steps_ahead += stop - done

    def cut(self, now: float | None = None) -> int:
        """Something arrives (now, `now` if the caller has read it): the open run ends with
        the step in flight (the next one may admit it). Its steps are applied when that step
        ends, not now (module docstring). Returns `extra_output_tokens()`, the arrival's count
        (one search for both)."""
        window = self._window
        if window is None:
            return 0
        # the step in flight: the first that has not ended before now (as `catch_up` has it)
        if now is None:
            now = self._env.now
        done = window.num_done
        in_flight = bisect_left(window.times, now, done + 1, window.num_priced + 1) - 1
        ended_tokens = (in_flight - done) * window.num_members
        if window.is_cut:
            return ended_tokens
        assert self._env.active_process is not self.process, "a replica cannot cut its own run"
        window.is_cut = True  # no more steps priced
        if in_flight + 1 < window.num_priced:
            window.num_priced = in_flight + 1
            self.num_cuts += 1
            # The loop now wakes at that step's end: the run's timeout hands its callbacks (the
            # loop's resumption) to one set now, and fires later with none. (An interrupt, which
            # the loop answered with that timeout, cost two more events and a thrown exception.)
            wake = window.wake
            assert wake is not None and wake.callbacks, "the loop waits on the run's timeout"
            earlier = self._env.timeout(window.times[in_flight + 1] - now)
            earlier.callbacks, wake.callbacks = wake.callbacks, []
            window.wake = earlier
        return ended_tokens

    def _price_more(self, window: _Window, count: int, now: float) -> int:
        """Price up to `count` more of the run's steps, from the last priced one's end (`now`);
        returns how many. Priced a chunk at a time: an arrival usually cuts a run short, and
        the steps priced past the cut are wasted."""
        durations, times = window.durations, window.times
        first = len(durations)
        count = min(count, window.num_steps - first)
        # The one timeout, set at `now` (or at a cut, later), must land exactly on a step's end:
        # `now + (end - now) == end` holds for end <= 2 * now (Sterbenz's lemma). Each end is
        # what `env.timeout(duration)` at its start reaches.
        context = window.first_context + window.num_members * first
        num_priced = price_steps(window.terms, context, count, times[-1], 2 * now, times, durations)
        window.num_priced = len(durations)
        return num_priced


class _Window(PureRun):
    """An open run of pure steps (the `PureRun` itself: one object a run, not two): its price
    terms, the queue lengths throughout, its start and the times of those priced so far
    (`num_priced` of them, fewer once a cut ends the run early), how many have been started
    (scheduled) and done (completed and recorded). `PureRuns.open` sets these fields as soon as
    `pure_run` has made it."""

    __slots__ = (
        "durations",
        "is_cut",
        "num_done",
        "num_priced",
        "num_started",
        "queues",
        "terms",
        "times",
        "wake",
    )
    durations: list[float]
    # The run's start, then each priced step's end (the next one's start): step i runs from
    # times[i] to times[i + 1], so the starts of steps i..j - 1 are one slice.
    times: list[float]
    is_cut: bool
    num_done: int
    num_priced: int
    num_started: int
    queues: tuple[int, int, int]
    terms: DecodeTerms
    wake: simpy.Timeout | None  # the loop waits on it (`PureRuns.open`, `woken`)

"""The one bisection behind the studies' searches: the boundary of a yes/no that is monotone over
an ordered range, found by bracketing (doubling or halving from a start) and then bisecting, and
many such searches run side by side in lockstep rounds of simulated points.

capacity_search.py looks for the highest request rate a configuration sustains (yes below the
boundary, `RateSearch`: float rates, settled within a relative tolerance); fleet_search.py for
the fewest replicas that meet an SLO (yes above it, `ReplicaSearch`: whole sizes, settled at
adjacent sizes). A search is driven one value at a time (`next_value`, `record`), so a round can
hold one point of every search and run them all at once on the sweep's executors, through its
point cache (a rerun, or a wider search, resumes).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pagesim.simulator.core.errors import InputError
from pagesim.simulator.studies.executors import PointExecutor
from pagesim.simulator.studies.point_cache import PointCache
from pagesim.simulator.studies.points import Point
from pagesim.simulator.studies.sweep import PointRecord, run_points

N = TypeVar("N", int, float)
S = TypeVar("S")  # what a search sizes: a configuration, a fleet shape

MAX_ROUNDS = 1000  # a search halves its bracket each round: far more than any range needs


class Bisection(ABC, Generic[N]):
    """Bracket, then bisect, the boundary in [low, high] of a yes/no monotone in the value: yes
    below it (`yes_below`) or above it. `ok` is the value seen passing nearest the boundary,
    `bad` the one seen failing nearest it; the search ends when they are close enough
    (`_settled`), or when the range ends before a bracket is found."""

    yes_below: bool

    def __init__(self, start: N, low: N, high: N) -> None:
        self.start: N = min(max(start, low), high)
        self.low: N = low
        self.high: N = high
        self.ok: N | None = None
        self.bad: N | None = None
        self.num_evaluations = 0

    @abstractmethod
    def _halve(self, value: N) -> N: ...

    @abstractmethod
    def _midpoint(self, ok: N, bad: N) -> N: ...

    @abstractmethod
    def _settled(self, ok: N, bad: N) -> bool:
        """Whether the bracket is narrow enough (also True when `bad` lies on `ok`'s side: the
        yes/no was not monotone here)."""

    def next_value(self) -> N | None:
        """The value to try next, or None when the search is over."""
        ok, bad = self.ok, self.bad
        if ok is None and bad is None:
            return self.start
        if ok is not None and bad is not None:
            return None if self._settled(ok, bad) else self._midpoint(ok, bad)
        seen = ok if ok is not None else bad
        assert seen is not None
        if (ok is not None) == self.yes_below:  # the boundary lies above what was seen
            return None if seen >= self.high else min(seen * 2, self.high)
        return None if seen <= self.low else max(self._halve(seen), self.low)

    def record(self, value: N, passes: bool) -> None:
        """The outcome at `value`."""
        self.num_evaluations += 1
        if passes:
            nearer = max if self.yes_below else min
            self.ok = value if self.ok is None else nearer(self.ok, value)
        else:
            nearer = min if self.yes_below else max
            self.bad = value if self.bad is None else nearer(self.bad, value)

    @property
    def is_monotone(self) -> bool:
        """False when a value failed on the passing side of one that passed."""
        if self.ok is None or self.bad is None:
            return True
        return self.ok < self.bad if self.yes_below else self.bad < self.ok


class RateSearch(Bisection[float]):
    """The highest rate in [low, high] that passes, to within `rel_tol` of the lowest that
    fails."""

    yes_below = True

    def __init__(
        self, start: float, *, min_rate: float, max_rate: float, rel_tol: float = 0.02
    ) -> None:
        if not 0 < min_rate <= max_rate:
            raise InputError(
                f"rates: need 0 < --min-rate <= --max-rate, got {min_rate}, {max_rate}"
            )
        if not 0 < rel_tol < 1:
            raise InputError(f"--rel-tol: must be in (0, 1), got {rel_tol}")
        super().__init__(start, min_rate, max_rate)
        self.rel_tol = rel_tol

    def _halve(self, value: float) -> float:
        return value / 2

    def _midpoint(self, ok: float, bad: float) -> float:
        return (ok + bad) / 2

    def _settled(self, ok: float, bad: float) -> bool:
        return bad - ok <= self.rel_tol * bad


class ReplicaSearch(Bisection[int]):
    """The fewest replicas in [low, high] that pass: settled when it and the most that failed are
    adjacent."""

    yes_below = False

    def __init__(self, start: int, low: int, high: int) -> None:
        if not 1 <= low <= high:
            raise InputError(f"replicas: need 1 <= min_replicas <= max_replicas, got {low}, {high}")
        super().__init__(start, low, high)

    def _halve(self, value: int) -> int:
        return value // 2

    def _midpoint(self, ok: int, bad: int) -> int:
        return (ok + bad) // 2

    def _settled(self, ok: int, bad: int) -> bool:
        return ok - bad <= 1


@dataclass
class Rounds(Generic[S]):
    """What lockstep rounds simulated: every (subject, point's record, passed), in order."""

    evaluations: list[tuple[S, PointRecord, bool]] = field(default_factory=list)
    num_cached: int = 0
    num_computed: int = 0


def search_in_rounds(
    searches: Sequence[tuple[S, Bisection[N]]],
    point_at: Callable[[S, N], Point],
    passes: Callable[[Mapping[str, Any]], bool],
    executor: PointExecutor,
    *,
    cache: PointCache | None = None,
    use_cache: bool = True,
    on_round: Callable[[int, int], None] | None = None,
) -> Rounds[S]:
    """Run every search to its end: each round simulates the next value of every search not
    over (`point_at(subject, value)`), all at once, and records whether its summary `passes`.
    `on_round(round, points)` is told each round's size as it starts."""
    done: Rounds[S] = Rounds()
    for round_number in range(1, MAX_ROUNDS):
        todo = [
            (subject, search, value)
            for subject, search in searches
            if (value := search.next_value()) is not None
        ]
        if not todo:
            break
        if on_round is not None:
            on_round(round_number, len(todo))
        points = [point_at(subject, value) for subject, _, value in todo]
        ran = run_points(points, executor, cache=cache, use_cache=use_cache)
        done.num_cached += ran.num_cached
        done.num_computed += ran.num_computed
        for (subject, search, value), record in zip(todo, ran.records, strict=True):
            verdict = passes(record.summary)
            search.record(value, verdict)
            done.evaluations.append((subject, record, verdict))
    return done

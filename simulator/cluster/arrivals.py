"""The one arrival process of every run, and the run's request bookkeeping above its replicas.

engine.simulate's single replica, a fleet (fleet.py), a disaggregated fleet (disagg.py) and a DP
group (dp_group.py) are all fed here; only what `send` does with a request differs (hand it to
the replica, route it to a replica or a DP rank, send its prompt to a prefill replica):

    workload stream ──▶ wait for its arrival time ──▶ send(request)
      (sessions: first turns)
    an answer ended ──▶ the session's next turn, a think time later ──▶ send(request)
    stream exhausted, no session open ──▶ end()    (replicas may stop once idle)

A request past the scenario's stop time is not sent (the stream stops there; a later session
turn closes its session). The bookkeeping kept here: the workload's statistics (the run's
provenance) and, for a fleet, the arrival window's edges over all its replicas' output tokens
(`window_tokens`: the token rate counts what was produced between the first in-window arrival
and the last arrival; a single replica's recorder marks its own, as each fleet replica's does).

`run` starts the arrival process before any replica's loop: SimPy orders events that fall at
one instant by creation, so every kind of run orders them alike, and a fleet of one replica is
the single run event for event (tests/simulator/cluster/test_fleet.py pins it).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Protocol

import numpy as np
import simpy

from pagesim.simulator.core.config import Scenario
from pagesim.simulator.core.request import Request
from pagesim.simulator.workload.sessions import SessionSource
from pagesim.simulator.workload.stream import WorkloadStats, iter_requests


class Arrivals:
    """The workload's requests (and sessions' later turns), each sent at its arrival time.

    `send(request)`: where a request goes; `end()`: called once, when no request will come any
    more; `count_tokens()`: the output tokens produced so far by the replicas whose arrival
    window this run reports (a fleet's; None for a single replica, which marks its own).
    """

    def __init__(
        self,
        env: simpy.Environment,
        scenario: Scenario,
        send: Callable[[Request], None],
        end: Callable[[], None],
        *,
        count_tokens: Callable[[], int] | None = None,
    ) -> None:
        self._env, self._send, self._end, self._count_tokens = env, send, end, count_tokens
        # Each arrival goes to `send`, through `_mark_window` when a fleet's window is counted.
        self._arrive = send if count_tokens is None else self._mark_window
        self._max_time_s = scenario.stop.max_time_s
        self._warmup_s = scenario.stop.warmup_s
        self.stats = WorkloadStats()
        rng = np.random.default_rng(scenario.seed)
        max_seq_len = scenario.model.max_seq_len
        self.sessions: SessionSource | None = None
        self._stream: Iterator[Request]
        # Without sessions the stream alone says which arrival is the last (`_Lookahead`).
        self._lookahead: _Lookahead | None = None
        if scenario.workload.sessions is not None:
            self.sessions = SessionSource(
                scenario.workload, max_seq_len, rng, scenario.seed, self.stats
            )
            self._stream = self.sessions.first_turns
        else:
            stream = iter_requests(scenario.workload, max_seq_len, rng, self.stats)
            self._stream = self._lookahead = _Lookahead(stream)
        self.is_exhausted = False  # the stream has ended (later session turns may follow)
        # Output tokens at the first in-window arrival and at the last arrival (`count_tokens`).
        self.window_tokens: tuple[int | None, int | None] = (None, None)

    def process(self) -> Generator[simpy.Event, None, None]:
        """The arrival process: each request of the stream at its time, then the end."""
        env, max_time_s, sessions = self._env, self._max_time_s, self.sessions
        for request in self._stream:
            if max_time_s is not None and request.arrival_s > max_time_s:
                break
            now_s = env.now
            if request.arrival_s > now_s:
                yield env.timeout(request.arrival_s - now_s)
            if sessions is not None:
                sessions.start(request)
            self._arrive(request)
        self.is_exhausted = True
        if sessions is None or sessions.num_open == 0:
            self._end()

    def answered(self, request: Request) -> None:
        """`request` ended (finished or rejected): its session's next turn follows, or the
        session closes, which may end the arrivals."""
        sessions = self.sessions
        if sessions is None:
            return
        turn = sessions.next_turn(request)
        if turn is not None:
            self._env.process(self._send_later(turn))
        elif self.is_exhausted and sessions.num_open == 0:
            self._end()

    def provenance(self) -> dict[str, object]:
        """How the requests were made (the workload's statistics, the sessions' counts)."""
        provenance = self.stats.provenance()
        if self.sessions is not None:
            provenance["num_sessions"] = self.sessions.num_sessions
            provenance["num_session_turns"] = self.sessions.num_turns
            provenance["num_sessions_ended_at_max_seq_len"] = self.sessions.num_ended_at_max_len
        return provenance

    def _send_later(self, turn: Request) -> Generator[simpy.Event, None, None]:
        """A session's next turn, sent at its arrival time unless that is past the stop time."""
        sessions, env = self.sessions, self._env
        assert sessions is not None
        if self._max_time_s is not None and turn.arrival_s > self._max_time_s:
            sessions.drop(turn)
            if self.is_exhausted and sessions.num_open == 0:
                self._end()
            return
        if turn.arrival_s > env.now:
            yield env.timeout(turn.arrival_s - env.now)
        self._arrive(turn)

    def _mark_window(self, request: Request) -> None:
        """The arrival window's edges over the fleet's tokens, then `send`. The tokens are
        counted at the first in-window arrival and at any arrival that may be the last: the
        count at an arrival another one surely follows would only be replaced (summing every
        replica's count at each arrival had cost the 8-replica Azure bench about 4% of its
        instructions)."""
        assert self._count_tokens is not None
        first, _ = self.window_tokens
        opens = first is None and request.arrival_s >= self._warmup_s
        if opens or not self._is_followed():
            tokens = self._count_tokens()
            self.window_tokens = (tokens if opens else first, tokens)
        self._send(request)

    def _is_followed(self) -> bool:
        """Whether another request of the stream will surely be sent after this one: one
        arrives before the stop time (one at the stop time itself is not sent: `env.run(until=
        max_time_s)` stops first). Unknown with sessions (a turn follows an answer): False."""
        if self._lookahead is None:
            return False
        next_s = self._lookahead.next_arrival_s()
        return next_s is not None and (self._max_time_s is None or next_s < self._max_time_s)


class _Lookahead:
    """A request stream that can say when its next request arrives, pulling it early (only
    when asked: a stream cut at the stop time pulls no more than it did). A stream's requests
    do not depend on the run (their own random stream), so pulling one early changes nothing."""

    __slots__ = ("_next", "_pulled", "_stream")

    def __init__(self, stream: Iterator[Request]) -> None:
        self._stream = stream
        self._pulled = False  # `_next` holds the stream's next request (None: it has ended)
        self._next: Request | None = None

    def __iter__(self) -> _Lookahead:
        return self

    def __next__(self) -> Request:
        if not self._pulled:
            return next(self._stream)
        self._pulled = False
        if self._next is None:
            raise StopIteration
        return self._next

    def next_arrival_s(self) -> float | None:
        """The next request's arrival time (None: no request follows)."""
        if not self._pulled:
            self._next = next(self._stream, None)
            self._pulled = True
        return None if self._next is None else self._next.arrival_s


class Loop(Protocol):
    """What runs beside the arrival process: a replica's step loop (replica.py), or a DP
    group's lock-stepped loop over its ranks (dp_group.py)."""

    def start(self) -> simpy.Process: ...


def run(
    env: simpy.Environment,
    arrivals: Arrivals,
    loops: Sequence[Loop],
    max_time_s: float | None,
) -> float:
    """Run `arrivals` into the replicas until every loop has ended (or the stop time); returns
    the end time. The arrival process is created first (module docstring)."""
    env.process(arrivals.process())
    done = env.all_of([loop.start() for loop in loops])
    env.run(until=done if max_time_s is None else max_time_s)
    return env.now

"""A fleet's arrival window (cluster/arrivals.py): its token count is taken only at the first
in-window arrival and at an arrival that may be the last, and must be what counting at every
arrival gives, whether the stream ends, is cut at a stop time between arrivals, or at a stop
time that is an arrival's own (that arrival is not sent); the stream is pulled no further."""

from __future__ import annotations

from dataclasses import replace

import pytest
import simpy

from pagesim.simulator.cluster.arrivals import Arrivals
from pagesim.simulator.cluster.fleet import FleetRun, run_fleet
from pagesim.simulator.core.cluster import ClusterConfig, PoolConfig, RouterConfig, RouterKind
from pagesim.simulator.core.config import (
    LengthDist,
    LengthKind,
    Policy,
    SessionConfig,
    StopConfig,
)
from pagesim.simulator.fastpath.pure_runs import PureRuns
from tests.sim_helpers import explicit_workload, poisson_workload, scenario, system

# (prompt, output, arrival_s): the stop times below fall between them and on one (3.0 s)
REQUESTS = [(200 + 40 * i, 30 + 7 * (i % 5), 0.25 * i) for i in range(40)]


def _run(
    max_time_s: float | None, every_arrival: bool, mp: pytest.MonkeyPatch
) -> tuple[FleetRun, list[float]]:
    """The fleet run and the times its window's count was taken at."""
    sc = scenario(explicit_workload(REQUESTS), system(Policy.VLLM_V1))
    sc = replace(sc, stop=StopConfig(max_time_s=max_time_s, warmup_s=1.1))
    pool = PoolConfig("pool", 3, sc.gpu, sc.tensor_parallel)
    cluster = ClusterConfig((pool,), RouterConfig(RouterKind.ROUND_ROBIN))
    if every_arrival:  # the count taken at every arrival, as before it was skipped
        mp.setattr(Arrivals, "_is_followed", lambda self: False)
    with mp.context() as inner:
        counted: list[float] = []
        original = Arrivals._mark_window

        def spy(self: Arrivals, request: object) -> None:
            before = self.window_tokens
            original(self, request)  # type: ignore[arg-type]
            if self.window_tokens is not before:
                counted.append(self._env.now)

        inner.setattr(Arrivals, "_mark_window", spy)
        run = run_fleet(sc, cluster)
    return run, counted


@pytest.mark.parametrize("max_time_s", [None, 3.0, 3.1, 9.6])
def test_the_window_counted_at_its_edges_only_is_the_count_at_every_arrival(
    monkeypatch: pytest.MonkeyPatch, max_time_s: float | None
) -> None:
    lazy, lazy_counts = _run(max_time_s, every_arrival=False, mp=monkeypatch)
    with monkeypatch.context() as mp:
        eager, eager_counts = _run(max_time_s, every_arrival=True, mp=mp)
    assert lazy.window_tokens == eager.window_tokens
    assert lazy.window_tokens[0] is not None and lazy.window_tokens[1] is not None
    assert lazy.results[0].provenance == eager.results[0].provenance  # the stream pulled alike
    assert [r.summary for r in lazy.results] == [r.summary for r in eager.results]
    # Counted at the first in-window arrival (1.25 s) and the last one sent, nowhere else.
    last_sent = max(a for _, _, a in REQUESTS if max_time_s is None or a < max_time_s)
    assert lazy_counts == [1.25, last_sent]
    assert len(eager_counts) > 2


def test_with_sessions_every_arrival_is_counted_as_any_may_be_the_last() -> None:
    # A session's next turn follows an answer: the stream alone cannot say which is the last.
    turns = LengthDist(LengthKind.FIXED, value=3)
    new_tokens = LengthDist(LengthKind.FIXED, value=20)
    workload = replace(poisson_workload(4, 2.0), sessions=SessionConfig(4, turns, new_tokens, 0.5))
    sc = scenario(workload, system(Policy.VLLM_V1))
    arrivals = Arrivals(simpy.Environment(), sc, lambda r: None, lambda: None, count_tokens=int)
    assert arrivals.sessions is not None and not arrivals._is_followed()


def test_an_arrivals_cut_counts_the_tokens_of_the_run_steps_that_ended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Replica.add_request takes a run's ended steps' tokens from its cut (one search for both):
    # before and after the cut, they are `extra_output_tokens()`, and some arrivals see some.
    seen: list[int] = []
    original = PureRuns.cut

    def spy(self: PureRuns, now: float | None = None) -> int:
        before = self.extra_output_tokens()
        got = original(self, now)
        assert got == before == self.extra_output_tokens()
        seen.append(got)
        return got

    monkeypatch.setattr(PureRuns, "cut", spy)
    sc = scenario(poisson_workload(60, 8.0), system(Policy.VLLM_V1))
    pool = PoolConfig("pool", 2, sc.gpu, sc.tensor_parallel)
    run_fleet(sc, ClusterConfig((pool,), RouterConfig(RouterKind.ROUND_ROBIN)))
    assert len(seen) == 60
    assert any(seen)

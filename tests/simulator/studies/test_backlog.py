"""The arrival window's backlog figures on requests frames built by hand: a server that keeps up
holds a steady number of requests, one that cannot keeps adding to them, and a rejected or
unfinished request leaves (or stays) as it should."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagesim.simulator.studies.backlog import backlog_figures


def frame(arrival: list[float], finish: list[float], **columns: list[object]) -> pd.DataFrame:
    """Requests admitted on arrival, finished at `finish` (NaN: not finished)."""
    n = len(arrival)
    data: dict[str, list[object]] = {
        "arrival_s": list(arrival),
        "admitted_s": list(arrival),
        "finish_s": list(finish),
        "status": ["finished" if f == f else "unfinished" for f in finish],
        "in_window": [True] * n,
    }
    data.update(columns)
    return pd.DataFrame(data)


def test_a_server_that_keeps_up_holds_a_steady_backlog() -> None:
    # One arrival a second, each served in 2 s: two in the system, first half and second.
    arrival = [float(t) for t in range(101)]
    figures = backlog_figures(frame(arrival, [t + 2.0 for t in arrival]))
    assert figures["window_s"] == 100.0
    assert figures["backlog_growth"] == pytest.approx(1.0, abs=0.03)
    assert figures["window_completed_share"] == pytest.approx(99 / 101)  # two still running
    assert figures["service_p50_s"] == 2.0


def test_a_server_that_cannot_keep_up_adds_to_its_backlog() -> None:
    # One arrival a second, one finish every 2 s, in order: the queue grows all window long.
    arrival = [float(t) for t in range(101)]
    finish = [2.0 * (i + 1) for i in range(101)]
    figures = backlog_figures(frame(arrival, finish))
    growth, completed = figures["backlog_growth"], figures["window_completed_share"]
    assert growth is not None and growth > 2.5  # linear growth from empty: about 3x
    assert completed == pytest.approx(50 / 101)


def test_rejected_requests_leave_at_once_and_unfinished_ones_stay() -> None:
    arrival = [0.0, 1.0, 2.0, 3.0]
    base = frame(arrival, [0.5, 1.5, 2.5, 3.5])
    rejected = base.assign(status=["finished", "rejected", "finished", "rejected"])
    rejected.loc[rejected["status"] == "rejected", "finish_s"] = np.nan
    assert backlog_figures(rejected)["backlog_growth"] == pytest.approx(1.0)
    stuck = frame(arrival, [0.5, float("nan"), 2.5, 3.5])  # the second never finishes
    assert backlog_figures(stuck)["backlog_growth"] == pytest.approx(2.0)


def test_a_run_with_nothing_after_the_warm_up_has_no_figures() -> None:
    requests = frame([0.0, 1.0], [0.5, 1.5], in_window=[False, False])
    assert set(backlog_figures(requests).values()) == {None}


@given(st.lists(st.floats(0.0, 100.0), min_size=2, max_size=40), st.floats(0.01, 10.0))
def test_the_figures_are_finite_and_in_range(arrivals: list[float], service_s: float) -> None:
    arrival = sorted(arrivals)
    figures = backlog_figures(frame(arrival, [t + service_s for t in arrival]))
    completed = figures["window_completed_share"]
    assert completed is not None and 0.0 <= completed <= 1.0
    assert figures["service_p50_s"] == pytest.approx(service_s)
    growth = figures["backlog_growth"]
    assert growth is None or (np.isfinite(growth) and growth >= 0.0)

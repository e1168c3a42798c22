"""The bounded step table and the compact request records: what a long run keeps in memory.

A long run's step table merges neighbouring rows once it passes `MAX_ROWS`; the summary comes
from exact totals of every step, so it must not change, and merged rows must add up to the steps
they stand for. Requests become compact rows once done; the frame is in arrival order.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_helpers import explicit_workload, poisson_workload, scenario, system

from pagesim.reports.render import write_report
from pagesim.simulator.core.config import SLO, Policy
from pagesim.simulator.core.request import Request, RequestStatus
from pagesim.simulator.engine import simulate
from pagesim.simulator.metrics import request_log, step_log
from pagesim.simulator.metrics.request_log import RequestLog
from pagesim.simulator.metrics.result import STEP_COLUMNS
from pagesim.simulator.metrics.step_log import SUMMED_COLUMNS, StepLog, merge_rows

COLUMNS = list(STEP_COLUMNS)


def _steps(num_steps: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, 50, size=(num_steps, len(COLUMNS))).astype(float)
    rows[:, COLUMNS.index("duration_s")] = rng.uniform(0.001, 0.05, num_steps)
    rows[:, COLUMNS.index("start_s")] = np.cumsum(rows[:, COLUMNS.index("duration_s")])
    rows[:, COLUMNS.index("row_steps")] = 1
    return rows


def test_merging_two_steps_sums_counts_and_weights_states_by_duration() -> None:
    rows = np.zeros((2, len(COLUMNS)))
    col = COLUMNS.index
    rows[:, col("start_s")] = [1.0, 1.5]
    rows[:, col("duration_s")] = [0.1, 0.3]
    rows[:, col("num_decode_tokens")] = [10, 30]
    rows[:, col("kv_token_slots")] = [100, 200]
    rows[:, col("mfu")] = [0.2, 0.6]
    rows[:, col("row_steps")] = 1
    (merged,) = merge_rows(rows, 2)
    assert merged[col("start_s")] == 1.0
    assert merged[col("duration_s")] == pytest.approx(0.4)
    assert merged[col("num_decode_tokens")] == 40
    assert merged[col("kv_token_slots")] == pytest.approx((100 * 0.1 + 200 * 0.3) / 0.4)
    assert merged[col("mfu")] == pytest.approx((0.2 * 0.1 + 0.6 * 0.3) / 0.4)
    assert merged[col("row_steps")] == 2


@settings(max_examples=30, deadline=None)
@given(
    num_steps=st.integers(0, 700),
    max_rows=st.integers(2, 64),
    chunk=st.integers(1, 100),
    seed=st.integers(0, 9),
)
def test_a_bounded_log_keeps_every_step_in_its_totals(
    num_steps: int, max_rows: int, chunk: int, seed: int
) -> None:
    rows = _steps(num_steps, seed)
    log = StepLog(max_rows=max_rows, chunk_steps=chunk)
    for row in rows:
        log.append(tuple(row))
    frame = log.frame()
    assert len(frame) <= max_rows + 1, "bounded: the row budget and the last partial row"
    assert int(frame["row_steps"].sum()) == num_steps == log.totals.num_steps
    for name in SUMMED_COLUMNS:
        assert frame[name].sum() == pytest.approx(rows[:, COLUMNS.index(name)].sum())
    if num_steps:
        durations = rows[:, COLUMNS.index("duration_s")]
        assert log.totals.busy_s == pytest.approx(durations.sum())
        mean = rows[:, COLUMNS.index("kv_free_slots")] @ durations / durations.sum()
        assert log.totals.time_average("kv_free_slots") == pytest.approx(mean)
        # The merged table's time average is the same one (weights are the rows' durations).
        table = frame["kv_free_slots"] @ frame["duration_s"] / frame["duration_s"].sum()
        assert table == pytest.approx(mean)
        assert frame["start_s"].is_monotonic_increasing
        assert frame["start_s"].iloc[0] == rows[0, COLUMNS.index("start_s")]


def test_a_long_run_merges_its_step_rows_and_keeps_its_summary(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = scenario(poisson_workload(60, 20.0), system(Policy.VLLM_V1))
    full = simulate(s)
    monkeypatch.setattr(step_log, "MAX_ROWS", 64)
    monkeypatch.setattr(step_log, "CHUNK_STEPS", 16)
    bounded = simulate(s)
    assert len(full.steps) > 300 and full.provenance["step_table_row_steps"] == 1
    assert len(bounded.steps) <= 64 + 16
    assert bounded.provenance["step_table_row_steps"] > 1
    # Totals come from every step in chunks: the summary is close to the row-per-step run's
    # (chunked sums round differently in the last bits) and the request frame identical.
    assert bounded.summary.keys() == full.summary.keys()
    for key, value in full.summary.items():
        expected = pytest.approx(value, rel=1e-12) if isinstance(value, float) else value
        assert bounded.summary[key] == expected, key
    pd.testing.assert_frame_equal(bounded.requests, full.requests, check_exact=True)
    assert bounded.steps["row_steps"].sum() == full.summary["num_steps"]
    for name in ("num_decode_tokens", "num_prefill_tokens", "num_preemptions"):
        assert bounded.steps[name].sum() == full.steps[name].sum()
    assert bounded.steps["duration_s"].sum() == pytest.approx(full.steps["duration_s"].sum())


def test_done_requests_become_rows_in_arrival_order_and_are_let_go() -> None:
    log = RequestLog(SLO(ttft_s=1.0, tpot_s=None), warmup_s=0.3)
    first, second, third = (Request(i, 0.2 * i, 10, 4) for i in range(3))
    for r in (first, second, third):
        log.add(r)
    second.reject("too long", 0.3)
    first.transition(RequestStatus.RUNNING, 0.1)
    first.first_token_s = 0.4
    log.settle()
    assert [r for _, r in log._live] == [first, third], "only the done one left the log"
    first.num_generated = 4
    first.last_token_s = 0.9
    first.transition(RequestStatus.FINISHED, 0.9)
    frame = log.frame()
    assert list(frame["request_id"]) == [0, 1, 2]
    assert list(frame["status"]) == ["finished", "rejected", "unfinished"]
    assert list(frame["rejection_reason"]) == ["", "too long", ""]
    row = frame.iloc[0]
    assert row["ttft_s"] == pytest.approx(0.4) and row["e2e_s"] == pytest.approx(0.9)
    assert row["tpot_s"] == pytest.approx(0.5 / 3) and bool(row["meets_slo"])
    assert list(frame["in_window"]) == [False, False, True]


def test_a_run_keeps_only_the_requests_still_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(request_log, "SETTLE_EVERY", 8)
    live_after_settling: list[int] = []
    original = RequestLog.settle

    def watching(self: RequestLog, *, everything: bool = False) -> None:
        original(self, everything=everything)
        if not everything:
            live_after_settling.append(len(self._live))

    monkeypatch.setattr(RequestLog, "settle", watching)
    # Forty short requests a second apart (each done long before the next), then forty that
    # are rejected without ever taking a step.
    served = [(20, 5, 1.0 * i) for i in range(40)]
    too_long = [(10_000_000, 5, 40.0 + i) for i in range(40)]
    result = simulate(scenario(explicit_workload(served + too_long), system(Policy.VLLM_V1)))
    assert result.summary["num_finished"] == 40 and result.summary["num_rejected"] == 40
    assert len(live_after_settling) >= 80 // 8
    assert max(live_after_settling) <= 1, "done requests were let go during the run"
    assert list(result.requests["request_id"]) == list(range(80))


def test_a_report_renders_from_merged_step_rows(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(step_log, "MAX_ROWS", 32)
    monkeypatch.setattr(step_log, "CHUNK_STEPS", 16)
    s = scenario(poisson_workload(40, 20.0), system(Policy.VLLM_V1))
    result = simulate(s)
    assert result.provenance["step_table_row_steps"] > 1
    write_report([result], tmp_path, title="merged", scenario_text="", provenance={})
    assert (tmp_path / "report.html").stat().st_size > 0


def test_the_table_takes_the_rows_and_the_totals_stay() -> None:
    # 5 steps, chunks of 2: the table gets all five rows once; the log keeps none (a fleet holds
    # one log per replica until its table is built) but still knows their totals.
    rows = _steps(5, 0)
    log = StepLog(chunk_steps=2)
    for row in rows:
        log.append(tuple(row))
    first = log.frame()
    assert len(first) == 5 and first["start_s"].tolist() == rows[:, 0].tolist()
    assert len(log.frame()) == 0 and log.totals.num_steps == 5


def test_a_row_of_the_wrong_length_is_refused_not_shifted() -> None:
    num_columns = len(STEP_COLUMNS)
    for lengths in ((num_columns + 1,), (num_columns - 1, num_columns + 1)):
        log = StepLog(chunk_steps=4)
        for length in lengths:
            log.append(tuple(float(i) for i in range(length)))
        with pytest.raises(ValueError, match="must hold"):
            log.flush()

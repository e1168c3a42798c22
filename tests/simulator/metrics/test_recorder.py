"""The recorder's typed step buffers give the frame the dtypes lists of numbers gave it."""

from __future__ import annotations

from sim_helpers import explicit_workload, scenario, system

from pagesim.simulator.core.config import Policy
from pagesim.simulator.engine import simulate
from pagesim.simulator.metrics.result import STEP_COLUMNS

FLOAT_COLUMNS = {"start_s", "duration_s", "compute_s", "swap_s", "slot_utilization", "mfu", "mbu"}


def test_step_frame_columns_and_dtypes() -> None:
    s = scenario(explicit_workload([(40, 5, 0.0), (30, 3, 0.01)]), system(Policy.VLLM_V1))
    steps = simulate(s).steps
    assert list(steps.columns) == list(STEP_COLUMNS)
    for name in STEP_COLUMNS:
        expected = "float64" if name in FLOAT_COLUMNS else "int64"
        assert steps[name].dtype == expected, name
    assert steps["start_s"].is_monotonic_increasing
    steps.loc[0, "num_seqs"] = 0  # a writable frame, not a view of the recorder's buffers


def test_a_run_without_steps_has_every_column() -> None:
    s = scenario(explicit_workload([(10_000_000, 5, 0.0)]), system(Policy.VLLM_V1))
    result = simulate(s)
    assert result.summary["num_rejected"] == 1
    assert list(result.steps.columns) == list(STEP_COLUMNS) and result.steps.empty

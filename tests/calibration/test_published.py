"""pagesim against vLLM's own CI benchmarks on real GPUs (calibration/published.py): the training
set's acceptance (issue 28), the rows' provenance, bad input, and the fit that sets the terms."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_cli

from pagesim.calibration.published import (
    MEASURED_CSV,
    CheckedRow,
    check,
    read_measured,
    run_benchmark,
    verdict,
)
from pagesim.calibration.published_fit import fit, microbenchmark_fit
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.hardware import CUSTOM_STAGE_S, DGX_H100
from pagesim.simulator.execution.frontend import V0_FRONTEND_S
from pagesim.simulator.execution.moe_cost import FUSED_MOE_BW_EFFICIENCY
from pagesim.simulator.execution.overhead import V0_FIXED_S


@pytest.fixture(scope="module")
def checked() -> list[CheckedRow]:
    return check(read_measured())


def test_every_judged_row_is_within_10_percent_and_their_median_within_5(
    checked: list[CheckedRow],
) -> None:
    """Issue 28's acceptance on the training set (vLLM CI builds 9523 and 9555)."""
    v = verdict(checked)
    assert v.num_judged == 8
    assert all(abs(c.error) <= 0.10 for c in checked if c.row.is_judged)
    assert v.median_abs_error <= 0.05 and v.is_met


def test_the_rows_are_the_published_builds_with_their_provenance() -> None:
    rows = read_measured()
    assert len(rows) == 15 and {r.source.split()[0] for r in rows} == {"B9523", "B9555"}
    assert {r.gpu for r in rows} == {"8xH100", "A100-SXM4-80GB"}
    text = (MEASURED_CSV.parent / "README.md").read_text()
    for needed in ("9523", "9555", "v0.6.3.post1", "v0.6.4", "benchmark_latency.py"):
        assert needed in text


def test_a_batch_latency_is_the_last_of_eight_requests_that_start_together() -> None:
    """benchmark_latency.py times LLM.generate() of the whole batch: 8 prompts of 32 tokens,
    128 output tokens each, offline (no front end): one prefill step, then 127 decodes."""
    result = run_benchmark("latency_llama8B_tp1", "8xH100")
    requests = result.requests
    assert (requests["arrival_s"] == 0).all() and len(requests) == 8
    assert (requests["prompt_len"] == 32).all() and (requests["output_len"] == 128).all()
    end = result.steps["start_s"].iloc[-1] + result.steps["duration_s"].iloc[-1]
    assert requests["e2e_s"].max() == pytest.approx(end, rel=1e-12)
    assert len(result.steps) == 128
    assert result.provenance["frontend"]["served"] is False  # type: ignore[index]


def test_a_bad_measured_file_is_one_clear_line(tmp_path: Path) -> None:
    header = "id,metric,measured,unit,gpu,judge,source\n"
    cases = {
        "latency_llama8B_tp1 median,batch_latency_ms,-1,ms,8xH100,yes,B\n": "positive number",
        "latency_llama8B_tp1 median,speed,1,ms,8xH100,yes,B\n": "metric 'speed'",
        "latency_llama8B_tp1 median,batch_latency_ms,1,ms,TPU,yes,B\n": "gpu 'TPU'",
        "unknown_test median,batch_latency_ms,1,ms,8xH100,yes,B\n": "unknown test",
        "latency_llama8B_tp1 median,batch_latency_ms,1,ms,8xH100,maybe,B\n": "judge 'maybe'",
    }
    for row, message in cases.items():
        path = tmp_path / "m.csv"
        path.write_text(header + row)
        with pytest.raises(InputError, match=message):
            read_measured(path)
    (tmp_path / "cols.csv").write_text("id,metric\n")
    with pytest.raises(InputError, match="missing column"):
        read_measured(tmp_path / "cols.csv")


def test_check_published_prints_the_table_and_writes_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    result = run_cli(capsys, "calibrate", "check-published", "--out", str(tmp_path))
    assert result.exit_code == 0, result.err
    assert "latency_llama70B_tp4 median" in result.out and ": met" in result.out
    payload = json.loads((tmp_path / "published_check.json").read_text())
    assert payload["judged"]["is_met"] and len(payload["rows"]) == 15
    assert (tmp_path / "published_check.csv").read_text().startswith("id,")


def test_the_kernel_bandwidths_are_vllms_own_microbenchmark() -> None:
    """hardware.py's NVLink 4 figures: the least squares of vLLM PR #24532's table."""
    bench = microbenchmark_fit()
    custom = DGX_H100.custom
    assert custom is not None
    assert custom.one_shot_bps == pytest.approx(bench["one_shot_bps"], rel=0.01)
    assert custom.two_shot_bps == pytest.approx(bench["two_shot_bps"], rel=0.01)
    assert bench["one_shot_intercept_s"] == pytest.approx(6.45e-6, rel=0.01)


def test_the_shipped_terms_are_the_fits_optimum() -> None:
    """`python -m pagesim.calibration.published_fit` gives the constants the code ships: from
    them, its next Gauss-Newton step moves none by more than 1%."""
    shipped = (V0_FIXED_S, CUSTOM_STAGE_S, V0_FRONTEND_S, FUSED_MOE_BW_EFFICIENCY)
    assert fit(iterations=1, start=shipped).values == pytest.approx(shipped, rel=0.01)

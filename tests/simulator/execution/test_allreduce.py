"""The all-reduce per call (roofline_terms.allreduce_call_s): the measured knots up to 4 MiB,
interpolated in log size, the fitted curve above; worked by hand, and never cheaper for a larger
message."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.simulator.core.catalog import get_gpu
from pagesim.simulator.core.config import ExecutionConfig
from pagesim.simulator.core.hardware import (
    ALLREDUCE_KNOT_BYTES,
    DGX_A100,
    DGX_H100,
    Interconnect,
)
from pagesim.simulator.execution.factors import resolve_link
from pagesim.simulator.execution.roofline_terms import allreduce_call_s

KIB, MIB = 1024, 1024 * 1024


def test_knots_every_half_octave_from_8_kib_to_4_mib() -> None:
    assert len(ALLREDUCE_KNOT_BYTES) == 19
    assert ALLREDUCE_KNOT_BYTES[0] == 8 * KIB and ALLREDUCE_KNOT_BYTES[-1] == 4 * MIB
    assert ALLREDUCE_KNOT_BYTES[2] == 16 * KIB


def test_two_h100s_by_hand() -> None:
    link = DGX_H100.at(2)
    # Vidur network/h100_dgx/all_reduce.csv, 2 GPUs: 7 us at 8 KiB, 11 us at 11.3 and 16 KiB.
    assert link.small_s[:3] == pytest.approx((7e-6, 11e-6, 11e-6))
    assert allreduce_call_s(8 * KIB, 2, link) == pytest.approx(7e-6)
    # Below the first knot: held at it (latency-bound).
    assert allreduce_call_s(2 * KIB, 2, link) == pytest.approx(7e-6)
    # 9.5 KiB, between 8 and 11.3 KiB: linear in log size.
    share = math.log(9.5 / 8) / math.log(math.sqrt(2))
    assert allreduce_call_s(9.5 * KIB, 2, link) == pytest.approx(7e-6 + share * 4e-6)
    # Above 4 MiB: latency + ring bytes (factor 1 at two GPUs) / bus bandwidth, fitted to the
    # larger sizes: 21.97 us + 32 MiB / 304.2 GB/s = 132 us.
    assert (link.allreduce_latency_s, link.allreduce_bw_bps) == (2.197e-05, 3.042e11)
    assert allreduce_call_s(32 * MIB, 2, link) == pytest.approx(2.197e-05 + 32 * MIB / 3.042e11)
    # Just above 4 MiB the curve (35.8 us) is below the last knot (43 us): held at the knot.
    assert allreduce_call_s(4.5 * MIB, 2, link) == pytest.approx(43e-6)
    # No tensor parallelism, no all-reduce.
    assert allreduce_call_s(64 * KIB, 1, link) == 0.0


def test_a_gpu_count_not_measured_takes_the_curve_over_all_counts() -> None:
    link = DGX_A100.at(16)
    assert link.small_s == ()
    ring = 2 * 15 / 16
    assert allreduce_call_s(64 * KIB, 16, link) == pytest.approx(
        3.848e-05 + ring * 64 * KIB / 1.543e11
    )


def test_a_scenario_that_sets_the_link_gets_its_formula_everywhere() -> None:
    config = ExecutionConfig(allreduce_latency_us=10.0, allreduce_bw_gbps=100.0)
    link = resolve_link(DGX_A100, config, 4)
    assert link.small_s == ()
    assert allreduce_call_s(8 * KIB, 4, link) == pytest.approx(10e-6 + 1.5 * 8 * KIB / 100e9)
    # Unset: the measured knots stay.
    assert resolve_link(DGX_A100, ExecutionConfig(), 4).small_s == DGX_A100.at(4).small_s


def test_pcie_links_have_no_measurements_and_use_the_estimate() -> None:
    link = get_gpu("l40s").interconnect.at(4)
    assert link.small_s == () and not link.is_fitted
    assert allreduce_call_s(16 * KIB, 4, link) == pytest.approx(30e-6 + 1.5 * 16 * KIB / 20e9)


@settings(max_examples=300, deadline=None)
@given(
    size=st.floats(1.0, 256.0 * MIB),
    factor=st.floats(1.0, 8.0),
    link=st.sampled_from([DGX_A100, DGX_H100]),
    workers=st.sampled_from([2, 4, 8, 3]),
)
def test_a_larger_message_never_costs_less(
    size: float, factor: float, link: Interconnect, workers: int
) -> None:
    at = link.at(workers)
    assert allreduce_call_s(size * factor, workers, at) >= allreduce_call_s(size, workers, at)
    if at.small_s:  # the knots themselves are non-decreasing
        assert list(at.small_s) == sorted(at.small_s)


def test_the_report_says_where_the_all_reduce_comes_from() -> None:
    from pagesim.simulator.core.catalog import get_model
    from pagesim.simulator.execution.roofline import RooflineModel

    llama = get_model("llama-2-7b")
    dgx = RooflineModel(llama, get_gpu("a100-80gb"), ExecutionConfig(), tensor_parallel=2)
    assert dgx.term_sources()["all_reduce"] == (
        "roofline (fitted: nvlink3 (DGX A100); measured medians up to 4 MiB)"
    )
    pcie = RooflineModel(llama, get_gpu("l40s"), ExecutionConfig(), tensor_parallel=2)
    assert pcie.term_sources()["all_reduce"] == "roofline (estimate: pcie4 (estimate))"

"""The all-reduce per call (roofline_terms.allreduce_call_s): the measured knots up to 4 MiB, as
measured (they fall with size where NCCL's measured regimes do: worked from Vidur's file for 4
A100s), interpolated in log size, the fitted curve above; worked by hand. A larger message never
costs less above the table nor on a link priced by its formula; within the table it may."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.simulator.core.catalog import get_gpu, get_model
from pagesim.simulator.core.config import ExecutionConfig
from pagesim.simulator.core.hardware import ALLREDUCE_KNOT_BYTES, Interconnect
from pagesim.simulator.core.preset_files import shipped_presets
from pagesim.simulator.execution.factors import resolve_link
from pagesim.simulator.execution.roofline import RooflineModel
from pagesim.simulator.execution.roofline_terms import allreduce_call_s

KIB, MIB = 1024, 1024 * 1024
DGX_A100 = shipped_presets().interconnects["dgx-a100"]
DGX_H100 = shipped_presets().interconnects["dgx-h100"]


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
def test_above_the_table_or_on_the_formula_a_larger_message_never_costs_less(
    size: float, factor: float, link: Interconnect, workers: int
) -> None:
    """Above the last knot (and for a GPU count nobody measured: the formula everywhere) the
    cost is non-decreasing in the message; and no message above the table costs less than any
    knot (the junction at 4 MiB never steps down: the last knot is each table's largest)."""
    at = link.at(workers)
    larger = allreduce_call_s(size * factor, workers, at)
    if not at.small_s or size > ALLREDUCE_KNOT_BYTES[-1]:
        assert larger >= allreduce_call_s(size, workers, at)
    if at.small_s and size * factor > ALLREDUCE_KNOT_BYTES[-1]:
        assert larger >= max(at.small_s)


@settings(max_examples=300, deadline=None)
@given(
    index=st.integers(0, len(ALLREDUCE_KNOT_BYTES) - 2),
    share=st.floats(0.0, 1.0),
    link=st.sampled_from([DGX_A100, DGX_H100]),
    workers=st.sampled_from([2, 4, 8]),
)
def test_within_the_table_the_call_follows_its_two_neighbouring_knots(
    index: int, share: float, link: Interconnect, workers: int
) -> None:
    """Between two knots, rising or falling, the call is their log-size interpolation: it stays
    between them, so the table adds no cost the measurements do not have."""
    at = link.at(workers)
    low, high = ALLREDUCE_KNOT_BYTES[index], ALLREDUCE_KNOT_BYTES[index + 1]
    size = low * (high / low) ** share
    a, b = at.small_s[index], at.small_s[index + 1]
    assert allreduce_call_s(size, workers, at) == pytest.approx(a + share * (b - a), rel=1e-9)
    assert min(a, b) * (1 - 1e-12) <= allreduce_call_s(size, workers, at) <= max(a, b) * (1 + 1e-12)


VIDUR_A100_DGX = (
    Path(__file__).resolve().parents[4] / "shared/vidur_profiling/network/a100_dgx/all_reduce.csv"
)


def test_four_a100s_pay_61_us_at_128_to_256_kib_and_26_us_at_512_kib() -> None:
    """NCCL's size regimes on a DGX A100 (Vidur network/a100_dgx/all_reduce.csv, 4 GPUs in one
    node; the knot is the median of the file's medians within x1.5 of the size). Worked from the
    file (rows every 8 KiB; checked below where ../shared has it):

    - 128 KiB, window 85.3-192 KiB: 13 rows; 90 and 98 KiB at 21 and 20 us, the 11 rows from
      106 to 186 KiB at 60-62 us: median 61 us.
    - 181 KiB (2^17.5 B), window 121-272 KiB: 19 rows, all at 60-63 us: median 62 us.
    - 256 KiB, window 171-384 KiB: 26 rows (178-378 KiB); 19 at >= 56 us, 5 at <= 26 us:
      median 61.5 us.
    - 512 KiB, window 341-768 KiB: 53 rows (346-762 KiB); 35 at <= 26 us, 5 at >= 56 us:
      median 26 us (the rows at 506-546 KiB themselves: 23-24 us).

    A non-decreasing table could not hold both 61 us at 128 KiB and 26 us at 512 KiB (ratio 2.3,
    beyond 1.15 / 0.85); the table follows them, so a Llama-2-7B decode step at TP 4 sends its
    64 all-reduces of 64 sequences x 4096 x 2 B = 512 KiB faster than those of 16 sequences
    (128 KiB)."""
    at = DGX_A100.at(4)
    knots = dict(zip(ALLREDUCE_KNOT_BYTES, at.small_s, strict=True))
    assert knots[128 * KIB] == pytest.approx(61e-6)
    assert knots[2**17.5] == pytest.approx(62e-6)
    assert knots[256 * KIB] == pytest.approx(61.5e-6)
    assert knots[512 * KIB] == pytest.approx(26e-6)
    assert allreduce_call_s(512 * KIB, 4, at) < allreduce_call_s(128 * KIB, 4, at) / 2
    roof = RooflineModel(
        get_model("llama-2-7b"), get_gpu("a100-80gb"), ExecutionConfig(), tensor_parallel=4
    )
    assert roof.allreduce_step_s(16) == pytest.approx(64 * 61e-6)  # 3.904 ms
    assert roof.allreduce_step_s(64) == pytest.approx(64 * 26e-6)  # 1.664 ms
    if not VIDUR_A100_DGX.is_file():
        return
    rows = pd.read_csv(VIDUR_A100_DGX)
    rows = rows[(rows.num_workers == 4) & (rows.devices_per_node == 4)]
    kib = rows["size"].to_numpy() / KIB
    median_us = np.round(rows["time_stats.all_reduce.median"].to_numpy() * 1e3, 1)  # file: ms

    def window(center_kib: float) -> np.ndarray:
        return np.sort(median_us[(kib >= center_kib / 1.5) & (kib <= center_kib * 1.5)])

    at_128 = window(128)
    assert len(at_128) == 13 and list(at_128[:2]) == [20, 21] and at_128[2:].min() >= 60
    assert at_128[2:].max() <= 62 and np.median(at_128) == 61
    at_181 = window(2**7.5)
    assert len(at_181) == 19 and at_181.min() >= 60 and at_181.max() <= 63
    at_256 = window(256)
    assert len(at_256) == 26 and (at_256 >= 56).sum() == 19 and (at_256 <= 26).sum() == 5
    assert np.median(at_256) == 61.5
    at_512 = window(512)
    assert len(at_512) == 53 and (at_512 <= 26).sum() == 35 and (at_512 >= 56).sum() == 5
    assert np.median(at_512) == 26
    assert set(median_us[(kib >= 506) & (kib <= 546)]) <= {23.0, 24.0}


def test_the_report_says_where_the_all_reduce_comes_from() -> None:
    llama = get_model("llama-2-7b")
    dgx = RooflineModel(llama, get_gpu("a100-80gb"), ExecutionConfig(), tensor_parallel=2)
    assert dgx.term_sources()["all_reduce"] == (
        "roofline (fitted: nvlink3 (DGX A100); measured medians up to 4 MiB, falling with size "
        "where NCCL's measured regimes do)"
    )
    pcie = RooflineModel(llama, get_gpu("l40s"), ExecutionConfig(), tensor_parallel=2)
    assert pcie.term_sources()["all_reduce"] == "roofline (estimate: pcie4 (estimate))"


@settings(max_examples=300, deadline=None)
@given(
    message=st.one_of(
        st.integers(0, 64 * MIB), st.floats(0.0, 64.0 * MIB, allow_nan=False), st.just(4 * MIB)
    ),
    gpus=st.sampled_from([2, 4, 8]),
    node=st.sampled_from([DGX_A100, DGX_H100]),
)
def test_one_message_costs_what_an_array_of_it_costs_to_the_last_bit(
    message: float, gpus: int, node: Interconnect
) -> None:
    # The simulator prices one message at a time without arrays; the fit and the reports price
    # arrays. The same operations either way: equal floats, not approximately equal ones (a
    # step's cost must not depend on which path priced it).
    link = node.at(gpus)
    scalar = allreduce_call_s(message, gpus, link)
    array = allreduce_call_s(np.array([float(message)]), gpus, link)
    assert isinstance(scalar, float) and scalar == float(array[0])

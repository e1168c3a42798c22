"""The linear layers GEMM by GEMM (execution/gemm.py): tile and wave quantization worked out by
hand, the stairs Vidur measured, and properties (never below the smooth curve, never cheaper
for more tokens)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.simulator.core.catalog import get_gpu, get_model
from pagesim.simulator.core.config import ExecutionConfig
from pagesim.simulator.core.plan import SeqWork, StepPlan
from pagesim.simulator.execution.gemm import (
    LinearCost,
    gemm_dims,
    gemm_time_s,
    is_dense,
    quantization,
)
from pagesim.simulator.execution.roofline import RooflineModel
from pagesim.simulator.execution.roofline_terms import LayerShapes

H100 = get_gpu("h100-sxm")
A100 = get_gpu("a100-80gb")
LLAMA_70B = get_model("llama-2-70b")


def test_the_presets_quantize_over_each_chips_sms() -> None:
    # NVIDIA's whitepapers: 132 SMs on H100 SXM5, 108 on A100; A40 datasheet: 84. The tiles are
    # the fit's choice (calibration/roofline_fit.py GEMM_TILES).
    h, a, a40 = H100.factors, A100.factors, get_gpu("a40").factors
    assert (h.gemm_tile_m, h.gemm_tile_n, h.gemm_num_sms) == (128, 128, 132)
    assert (a.gemm_tile_m, a.gemm_tile_n, a.gemm_num_sms) == (64, 128, 108)
    assert (a40.gemm_tile_m, a40.gemm_tile_n, a40.gemm_num_sms) == (64, 128, 84)
    # H200 is the H100's chip (132 SMs): it borrows the H100's factors whole.
    assert get_gpu("h200-sxm").factors.gemm_num_sms == 132


def test_llama_70b_mlp_down_on_h100_by_hand() -> None:
    f = H100.factors
    k, n = 28672, 8192  # MLP down at TP 1: 64 tiles of 128 features
    # 512 tokens: 4 x 64 = 256 tiles, 2 waves of 132 SMs: 264 tile slots for 256 tiles.
    assert quantization(512, n, f) == pytest.approx(264 / 256, rel=1e-12)
    # 536 tokens: 5 row tiles (640 rows for 536) x 64 = 320 tiles, 3 waves (396 slots).
    assert quantization(536, n, f) == pytest.approx(640 / 536 * 396 / 320, rel=1e-12)
    # 64 tokens: one short row tile, 64 tiles on 132 SMs (the library splits K): no loss.
    assert quantization(64, n, f) == 1.0
    # Off (no SM count): no loss anywhere.
    assert quantization(536, n, replace(f, gemm_num_sms=0)) == 1.0
    # The time: compute (2 M K N at the fitted efficiency, quantized) against the weight and
    # activation stream, overlapped.
    compute_s = 2 * 536 * k * n / (989e12 * f.gemm_efficiency) * (640 / 536 * 396 / 320)
    memory_s = (k * n + 536 * (k + n)) * 2 / (3350e9 * f.weight_bw_efficiency)
    expected = max(compute_s, memory_s) + f.gemm_overlap * min(compute_s, memory_s)
    assert gemm_time_s(536, k, n, 989e12, 3350e9, f) == pytest.approx(expected, rel=1e-12)


def test_the_stair_vidur_measured_at_512_tokens_on_h100() -> None:
    """Vidur compute/h100/meta-llama/Llama-2-70b-hf/mlp.csv, TP 1, QKV + O + up + down: 1.169 ms at
    512 tokens, 2.069 ms at 536 (1.77x for 5% more tokens). The quantized GEMMs step up there
    (1.29x: 1.343 ms, +15%, and 1.729 ms, -16%: the worst H100 prefill of the error table is this
    one); the smooth curve with the same factors would not (1.04x)."""
    roofline = RooflineModel(LLAMA_70B, H100, ExecutionConfig())
    smooth = RooflineModel(
        LLAMA_70B, replace(H100, factors=replace(H100.factors, gemm_num_sms=0)), ExecutionConfig()
    )

    def linear_s(model: RooflineModel, n: int) -> float:
        return model.breakdown(StepPlan.build([SeqWork(0, 0, n, n, True)]))["linear"] / 80

    assert linear_s(roofline, 512) == pytest.approx(1.169e-3, rel=0.16)
    assert linear_s(roofline, 536) == pytest.approx(2.069e-3, rel=0.17)
    assert linear_s(roofline, 536) / linear_s(roofline, 512) > 1.25
    assert linear_s(smooth, 536) / linear_s(smooth, 512) < 1.05


def test_the_four_gemms_hold_the_layers_weights_and_activations() -> None:
    for name in ("llama-2-7b", "llama-2-70b", "llama-3-8b", "opt-13b"):
        model = get_model(name)
        for t in (1, 2, 8):
            dims = gemm_dims(model, t)
            shapes = LayerShapes.of(model, t)
            assert sum(k * n for k, n in dims) * 2 == pytest.approx(shapes.gemm_weight_bytes)
            assert sum(k + n for k, n in dims) * 2 == pytest.approx(shapes.gemm_act_bytes_per_token)


def test_a_moe_model_is_priced_as_one_lumped_gemm_without_quantization() -> None:
    mixtral = get_model("mixtral-8x7b")
    assert not is_dense(mixtral)
    f = H100.factors
    s = LayerShapes.of(mixtral, 2)
    cost = LinearCost(mixtral, 2, 989e12, 3350e9, f)
    compute_s = 536 * s.gemm_flops_per_token / (989e12 * f.gemm_efficiency)
    memory_s = (s.gemm_weight_bytes + 536 * s.gemm_act_bytes_per_token) / (
        3350e9 * f.weight_bw_efficiency
    )
    expected = max(compute_s, memory_s) + f.gemm_overlap * min(compute_s, memory_s)
    assert cost.layers_s(536) == pytest.approx(mixtral.num_layers * expected, rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(
    tokens=st.integers(1, 16384),
    n=st.integers(64, 65536),
    tile=st.sampled_from([(64, 128), (128, 128), (128, 256), (256, 128)]),
    sms=st.integers(1, 160),
)
def test_quantization_never_helps_and_more_tokens_never_cost_less(
    tokens: int, n: int, tile: tuple[int, int], sms: int
) -> None:
    f = replace(H100.factors, gemm_tile_m=tile[0], gemm_tile_n=tile[1], gemm_num_sms=sms)
    assert quantization(tokens, n, f) >= 1.0 - 1e-12
    k = 4096.0
    now = gemm_time_s(tokens, k, n, 989e12, 3350e9, f)
    more = gemm_time_s(tokens + 1, k, n, 989e12, 3350e9, f)
    assert more >= now
    # Vectorised (the fit) and scalar (the simulator) agree.
    both = gemm_time_s(np.array([tokens, tokens + 1.0]), k, n, 989e12, 3350e9, f)
    assert both == pytest.approx([now, more], rel=1e-12)


@settings(max_examples=300, deadline=None)
@given(
    tokens=st.integers(0, 1 << 20),
    n=st.one_of(st.integers(1, 1 << 18), st.floats(1.0, 1e6, allow_nan=False)),
    tile=st.sampled_from([(64, 128), (128, 128), (128, 256), (256, 128)]),
    sms=st.integers(0, 160),
)
def test_the_scalar_quantization_is_the_array_ones_to_the_last_bit(
    tokens: int, n: float, tile: tuple[int, int], sms: int
) -> None:
    # The simulator prices one token count at a time on Python floats; the fit on arrays. The
    # two paths take the same float operations, so they agree exactly, not approximately (a
    # step's cost must not depend on which path priced it).
    f = replace(H100.factors, gemm_tile_m=tile[0], gemm_tile_n=tile[1], gemm_num_sms=sms)
    scalar = quantization(tokens, n, f)
    with np.errstate(divide="ignore", invalid="ignore"):  # 0 tokens: the array path's where
        array = quantization(np.array([float(tokens)]), np.array([n]), f)
    assert float(scalar) == float(array[0])

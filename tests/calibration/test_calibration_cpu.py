"""Calibration on the CPU: harness, grids, fits, calibrate --quick (NumPy).

The launch plan is tested in tests/calibration/test_launch_plan.py, the kernel's index math in
tests/kernels/test_kernel_emulation.py, the real kernel against the reference in
tests/calibration/test_gpu_kernel.py.
"""

from __future__ import annotations

import csv
import itertools
import json
import types
from pathlib import Path

import numpy as np
import pytest

from pagesim.calibration import fit, kernel
from pagesim.calibration.backends import NumpyBackend, table_for
from pagesim.calibration.harness import CudaEventTimer, PerfCounterTimer, Samples
from pagesim.calibration.measure import Point, context_mix, make_grid
from pagesim.calibration.run import calibrate
from pagesim.calibration.shapes import LayerShapes
from pagesim.simulator.core.catalog import ModelSpec, count_params, get_model
from pagesim.simulator.core.errors import InputError


def tiny_model(name: str = "tiny-llama") -> ModelSpec:
    params = count_params(2, 4, 2, 64, 256, 512, 1000, True)
    return ModelSpec(name, 2, 4, 2, 64, 256, 512, 1000, True, 2048, params)


# ---------------------------------------------------------------- harness, grid, fits


def test_perf_counter_timer_keeps_every_sample() -> None:
    calls = []
    samples = PerfCounterTimer().sample(lambda: calls.append(1), warmup=2, repeats=7)
    assert len(calls) == 9 and len(samples.samples_s) == 7
    assert all(t >= 0 for t in samples.samples_s)


def test_samples_summaries() -> None:
    s = Samples(tuple(float(x) for x in range(1, 11)))
    assert s.median_s == 5.5 and s.p10_s == pytest.approx(1.9) and s.p90_s == pytest.approx(9.1)


def test_l2_flush_buffer_is_at_least_twice_the_l2() -> None:
    fake = types.SimpleNamespace(zeros=lambda n, dtype: bytearray(0), uint8=np.uint8)
    assert CudaEventTimer(fake, 60 * 2**20).flush_bytes >= 120 * 2**20
    assert CudaEventTimer(fake, 50_000_001).flush_bytes >= 100_000_002
    assert CudaEventTimer(fake, 0).flush_bytes == 64 * 2**20
    assert CudaEventTimer(fake, 0).flush_mode == "read"  # reading leaves no dirty lines
    with pytest.raises(ValueError, match="flush"):
        CudaEventTimer(fake, 0, flush="evaporate")


@pytest.mark.parametrize("num_seqs", [1, 2, 5, 64])
def test_context_mixes_keep_the_total(num_seqs: int) -> None:
    for mix in ("uniform", "skewed"):
        lens = context_mix(num_seqs, 300, mix)
        assert sum(lens) == 300 * num_seqs and min(lens) >= 1
    if num_seqs >= 5:
        skewed = context_mix(num_seqs, 300, "skewed")
        assert max(skewed) > 2 * min(skewed)


def test_table_for_uses_distinct_shuffled_blocks() -> None:
    table = table_for(np.random.default_rng(0), [33, 16, 1], 16, 10)
    used = [*table[0, :3], *table[1, :1], *table[2, :1]]
    assert len(set(used)) == 5 and all(0 <= b < 10 for b in used)
    with pytest.raises(ValueError):
        table_for(np.random.default_rng(0), [160], 16, 9)


def test_grid_respects_budgets_and_holds_out_interior_points() -> None:
    llama = LayerShapes.from_model(get_model("llama-2-7b"))
    grid = make_grid(llama, 32, "numpy", quick=True)
    assert all(
        p.num_seqs * p.mean_context * llama.kv_bytes_per_token <= 16 << 20 for p in grid.decode
    )
    seqs = sorted({p.num_seqs for p in grid.decode})
    ctxs = sorted({p.mean_context for p in grid.decode})
    for p in grid.decode:
        if p.is_held_out:
            assert p.num_seqs not in (seqs[0], 8) and p.mean_context not in (ctxs[0], 256)
    assert grid.gemm_tokens[0] == 1 and all(t < grid.gemm_tokens[-1] for t in grid.gemm_held_out)
    gpu = make_grid(llama, 32, "cupy", quick=True)
    assert max(p.num_seqs * p.mean_context for p in gpu.decode) >= 16384
    assert any(p.is_held_out for p in gpu.decode) and gpu.gemm_held_out


def test_nonnegative_fit_recovers_exact_coefficients() -> None:
    rng = np.random.default_rng(0)
    x = np.column_stack([np.ones(20), rng.uniform(1, 1e5, 20), rng.uniform(1, 256, 20)])
    truth = np.array([5e-6, 2e-10, 3e-8])
    np.testing.assert_allclose(fit.fit_nonnegative(x, x @ truth), truth, rtol=1e-6)


def test_nonnegative_fit_never_returns_negative_costs() -> None:
    x = np.column_stack([np.ones(4), [1.0, 2, 3, 4], [4.0, 3, 2, 1]])
    t = np.array([1.0, 2.0, 3.0, 4.0]) - 0.1 * x[:, 2]  # wants a negative c
    beta = fit.fit_nonnegative(x, t)
    assert (beta >= 0).all()


def test_monotone_pools_adjacent_violators() -> None:
    assert fit.monotone([1.0, 3.0, 2.0, 4.0]) == [1.0, 2.5, 2.5, 4.0]
    assert fit.monotone([5.0, 1.0, 1.0]) == [pytest.approx(7 / 3)] * 3
    assert fit.monotone([1.0, 2.0]) == [1.0, 2.0]


def _point(kind: str, tokens: int, time_s: float, held: bool = False, label: str = "x") -> Point:
    return Point(kind, f"{label} t={tokens}", held, 0, 0, tokens, 0, 0, 0, Samples((time_s,)))


def test_token_fit_interpolates_and_reports_held_out_error() -> None:
    points = [_point("gemm", t, 1e-5 + 1e-7 * t) for t in (1, 16, 256)]
    points += [_point("gemm", t, 1e-5 + 1e-7 * t, label="y") for t in (1, 16, 256)]
    points += [_point("gemm", 64, 1.2 * (1e-5 + 1e-7 * 64), held=True)]
    points += [_point("gemm", 64, 1.2 * (1e-5 + 1e-7 * 64), held=True, label="y")]
    section = fit.fit_tokens(points, "gemm")
    assert section["tokens"] == [1, 16, 256]
    assert section["time_s"] == pytest.approx([2 * (1e-5 + 1e-7 * t) for t in (1, 16, 256)])
    assert section["held_out"]["num_points"] == 1
    assert section["held_out"]["mean_abs_rel_err"] == pytest.approx(1 - 1 / 1.2, rel=1e-6)


# ---------------------------------------------------------------- calibrate --quick (NumPy)


@pytest.fixture(scope="module")
def cpu_profile(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("profile") / "tiny.json"
    return calibrate(tiny_model(), "numpy", True, out)


def test_numpy_calibration_writes_a_cpu_profile(cpu_profile: Path) -> None:
    data = json.loads(cpu_profile.read_text())
    assert data["schema"] == "pagesim-profile" and data["schema_version"] == 1
    prov = data["provenance"]
    assert prov["device"] == "cpu" and prov["device_kind"] == "cpu" and prov["backend"] == "numpy"
    assert prov["timer"] == "perf_counter_ns" and prov["l2_flush"] is False
    assert prov["kernel_sha256"] == kernel.kernel_sha256()
    assert data["model"]["name"] == "tiny-llama" and data["measured"]["tensor_parallel"] == 1
    for section in ("decode_attention", "prefill_attention"):
        assert all(v >= 0 for v in data[section]["coef"].values())
        assert data[section]["held_out"]["num_points"] >= 1
    assert data["gemm"]["held_out"]["num_points"] >= 1
    assert data["copy_bandwidth"]["median_bps"] > 0
    gemm = data["gemm"]["time_s"]
    assert all(b >= a for a, b in itertools.pairwise(gemm))


def test_numpy_calibration_csv_holds_every_sample(cpu_profile: Path) -> None:
    data = json.loads(cpu_profile.read_text())
    csv_path = cpu_profile.with_name(data["samples_csv"])
    with csv_path.open() as handle:
        rows = list(csv.DictReader(handle))
    repeats = data["provenance"]["repeats"]
    kinds = {row["kind"] for row in rows}
    assert kinds == {"copy", "launches", "minimal_step", "decode", "gemm", "lm_head", "prefill"}
    decode_rows = [r for r in rows if r["kind"] == "decode"]
    assert len(decode_rows) == repeats * len(data["grid"]["decode"])
    assert all(float(r["time_s"]) > 0 for r in decode_rows)


def test_calibrate_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="unknown calibration backend"):
        calibrate(tiny_model(), "tpu", True, tmp_path / "p.json")
    with pytest.raises(InputError, match="block_size"):
        calibrate(tiny_model(), "numpy", True, tmp_path / "p.json", block_size=12)


def test_numpy_backend_decode_is_the_reference() -> None:
    shapes = LayerShapes.from_model(tiny_model())
    backend = NumpyBackend()
    backend.reserve_kv(shapes, 20, 16)
    prepared = backend.prepare_decode(shapes, [10, 40, 7])
    assert prepared.bytes == 57 * shapes.kv_bytes_per_token + 2 * 3 * 4 * 64 * 2
    assert np.isfinite(prepared.fn()).all()


def test_profile_renders_as_calibration_panels(cpu_profile: Path) -> None:
    from pagesim.calibration.profile import calibration_panels
    from pagesim.reports.calibration_plots import parse_calibration

    device, panels = parse_calibration(calibration_panels(cpu_profile))
    assert device == "cpu" and len(panels) == 4
    decode = panels[0]
    assert len(decode.x) == len(json.loads(cpu_profile.read_text())["grid"]["decode"])
    assert (decode.measured_p10_s <= decode.measured_s).all()
    assert (decode.measured_s <= decode.measured_p90_s).all()


def test_the_floor_is_the_executors_minimal_step(cpu_profile: Path) -> None:
    overhead = json.loads(cpu_profile.read_text())["overhead"]
    assert overhead["mode"] == "eager" and overhead["empty_step_s"] == overhead["eager_step_s"] > 0
    assert overhead["graph_step_s"] is None  # CUDA graphs are measured on a GPU only
    assert overhead["bare_launches"]["num_launches"] == 2 * 10 + 2
    assert "minimal step" in overhead["what"]


def test_the_gemm_curve_prices_the_layers_elementwise_work(cpu_profile: Path) -> None:
    gemm = json.loads(cpu_profile.read_text())["gemm"]
    assert set(gemm["parts"]) == {"qkv", "out", "gate_up", "down", "elementwise"}
    for i, total in enumerate(gemm["measured_median_s"]):
        assert total == pytest.approx(sum(part[i] for part in gemm["parts"].values()))


def test_a_profile_rewritten_for_another_floor_mode(cpu_profile: Path, tmp_path: Path) -> None:
    from pagesim.calibration.profile import with_floor_mode

    data = json.loads(cpu_profile.read_text())
    with pytest.raises(InputError, match="no cuda-graph floor"):
        with_floor_mode(cpu_profile, "cuda-graph", tmp_path / "graph.json")
    data["overhead"]["graph_step_s"] = 1e-3
    source = tmp_path / "measured.json"
    source.write_text(json.dumps(data))
    (tmp_path / data["samples_csv"]).write_bytes(
        cpu_profile.with_name(data["samples_csv"]).read_bytes()
    )
    out = with_floor_mode(source, "cuda-graph", tmp_path / "graph.json")
    rewritten = json.loads(out.read_text())
    assert rewritten["overhead"]["empty_step_s"] == 1e-3
    assert rewritten["overhead"]["mode"] == "cuda-graph"
    assert (tmp_path / rewritten["samples_csv"]).is_file()
    with pytest.raises(InputError, match="floor mode"):
        with_floor_mode(source, "lazy", tmp_path / "x.json")


def test_calibrate_rejects_an_unknown_floor_mode_or_flush(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="floor mode"):
        calibrate(tiny_model(), "numpy", True, tmp_path / "p.json", floor_mode="lazy")
    with pytest.raises(InputError, match="flush"):
        calibrate(tiny_model(), "numpy", True, tmp_path / "p.json", flush="dust")


def test_bench_shapes_parse_or_say_what_is_wrong() -> None:
    from pagesim.calibration.kernel_bench import FIDELITY_SHAPES, LONG_SHAPES, parse_shapes

    assert (
        parse_shapes("fidelity") == FIDELITY_SHAPES and parse_shapes("ALL")[-1] == LONG_SHAPES[-1]
    )
    assert parse_shapes("2x200, 8X600") == ((2, 200), (8, 600))
    for bad in ("8x", "0x100", "eight", "2x200,,"):
        with pytest.raises(InputError, match="--shapes"):
            parse_shapes(bad)
    totals = {n * c for n, c in LONG_SHAPES}
    assert {2048, 16384, 65536} <= totals
    assert all(2 <= n <= 24 and 200 <= c <= 600 for n, c in FIDELITY_SHAPES)


def test_bench_rejects_unknown_dtypes_and_flushes_before_looking_for_a_gpu() -> None:
    from pagesim.calibration.kernel_bench import bench_kernel

    with pytest.raises(InputError, match="KV dtypes"):
        bench_kernel(tiny_model(), kv_dtypes=("fp8",))
    with pytest.raises(InputError, match="flushes"):
        bench_kernel(tiny_model(), flushes=("steam",))
    with pytest.raises(InputError, match="multiples of 128"):
        bench_kernel(tiny_model(), partition_sweep=(100,))

"""Importing Vidur's measurements (tests/data/vidur: a slice, provenance in its README): the
profile prices the measured points back, says where each term comes from, refuses a bad CSV in
one line naming the file and the column; and, where ../shared/vidur_profiling exists, every file
imports and the shipped profiles, the fitted constants and the error table are what the commands
regenerate."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_helpers import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.calibration.roofline_fit import fit_all, fit_gpu, read_gpu_measurements
from pagesim.calibration.vidur_csv import LINEAR_OPS, SMALL_OPS, read_operators
from pagesim.calibration.vidur_import import import_every, import_vidur, write_imported
from pagesim.simulator.core.catalog import GPUS, get_gpu, get_model
from pagesim.simulator.core.config import ExecutionConfig, ExecutionKind
from pagesim.simulator.core.plan import SeqWork, StepPlan
from pagesim.simulator.core.preset_files import shipped_presets
from pagesim.simulator.execution.cuda_graphs import cuda_graphs_for
from pagesim.simulator.execution.overhead import EngineEra
from pagesim.simulator.execution.profile import ProfileModel, piecewise_linear
from pagesim.simulator.execution.vllm_runtime import VllmRuntime

SLICE = Path(__file__).resolve().parents[1] / "data" / "vidur"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "vidur_profiling"
PROFILES = Path(__file__).resolve().parents[2] / "calibration" / "profiles"
LLAMA_70B = get_model("llama-2-70b")
A100 = shipped_presets().factors["a100-80gb"]
MLP = SLICE / "compute/a100/meta-llama/Llama-2-70b-hf/mlp.csv"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} is not here")


@pytest.fixture(scope="module")
def profile() -> dict[str, Any]:
    return import_vidur(SLICE, LLAMA_70B, "a100-80gb", 2)


def test_the_profile_prices_the_measured_points_back_within_their_spread(
    profile: dict[str, Any],
) -> None:
    """Every measured token count kept in the fit is priced within its own spread (the root sum
    of squares of the operators' standard deviations); the held-out ones within 15% (the slice is
    sparse: 128 tokens lies between 96 and 160, across a step of the GEMMs' tiles)."""
    gemm = profile["gemm"]
    xs, ys = gemm["tokens"], gemm["time_s"]
    for tokens, measured, spread in zip(
        xs, gemm["measured_median_s"], gemm["spread_s"], strict=True
    ):
        assert abs(piecewise_linear(xs, ys, tokens) - measured) <= max(spread, 1e-9), tokens
    table = read_operators(MLP, LLAMA_70B).at_tp(2)
    for i, tokens in enumerate(table.tokens):
        measured = sum(table.median_s[op][i] for op in (*LINEAR_OPS, *SMALL_OPS))
        assert piecewise_linear(xs, ys, float(tokens)) == pytest.approx(measured, rel=0.15)
    held = gemm["held_out"]
    assert held["num_points"] == 4 and held["max_abs_rel_err"] < 0.15
    # All-reduce per call, through the medians of half-octave bins of a noisy file.
    assert profile["all_reduce"]["held_out"]["median_abs_rel_err"] < 0.15
    # Attention: a three-term fit over batch 1-128 and 32-4032 tokens of context, not a table.
    for section in ("decode_attention", "prefill_attention"):
        assert profile[section]["held_out"]["median_abs_rel_err"] < 0.15, section


def test_each_term_names_its_source_and_the_report_shows_it(
    profile: dict[str, Any], tmp_path: Path
) -> None:
    sources = profile["sources"]
    assert "mlp.csv" in sources["linear"] and "attention_tp2.csv" in sources["decode_attention"]
    assert "a100_dgx/all_reduce.csv, 2 GPUs" in sources["all_reduce"]
    assert sources["lm_head"].startswith("roofline")
    prov = profile["provenance"]
    assert prov["backend"] == "imported" and prov["device"] == "a100-80gb"
    assert "not pagesim" in prov["measured_by"] and "MIT" in prov["imported_from"]
    # The slice's files are not Vidur's own (rows were dropped): no date claimed, blobs recorded.
    assert prov["date"] == "not recorded"
    assert [f["file"] for f in prov["files"]] == ["mlp.csv", "attention_tp2.csv", "all_reduce.csv"]
    assert all(len(f["git_blob"]) == 40 for f in prov["files"])
    path = write_imported(profile, tmp_path / "p.json")
    config = ExecutionConfig(kind=ExecutionKind.PROFILE, profile_path=path)
    model = ProfileModel(LLAMA_70B, get_gpu("a100-80gb"), config, tensor_parallel=2)
    info = model.term_sources()
    assert info["decode_attention"] == sources["decode_attention"]
    assert model.warnings == [] and "imported" in str(model.describe()["notes"])


def test_attention_without_a_measured_file_comes_from_the_roofline(tmp_path: Path) -> None:
    root = tmp_path / "vidur"
    shutil.copytree(SLICE, root)
    (root / "compute/a100/meta-llama/Llama-2-70b-hf/attention_tp2.csv").unlink()
    found = import_vidur(root, LLAMA_70B, "a100-80gb", 2)
    assert found["sources"]["decode_attention"].startswith("roofline: a100-80gb")
    assert found["decode_attention"]["coef"]["a_s"] == A100.attention_layer_s


def test_an_imported_step_adds_the_era_host_overhead_and_measured_all_reduce(
    profile: dict[str, Any], tmp_path: Path
) -> None:
    path = write_imported(profile, tmp_path / "p.json")
    config = ExecutionConfig(kind=ExecutionKind.PROFILE, profile_path=path)
    gpu = get_gpu("a100-80gb")
    v0 = ProfileModel(LLAMA_70B, gpu, config, tensor_parallel=2, era=EngineEra.V0)
    v1 = ProfileModel(LLAMA_70B, gpu, config, tensor_parallel=2, era=EngineEra.V1)
    plan = StepPlan.build([SeqWork(i, i, 1, 1024, False) for i in range(8)])
    # V0 (v0.6.4): 1.183 ms serial, 0.1 ms x 8 sequences hidden under the GPU; V1: 1 ms.
    assert v0.price(plan).compute_s - v1.price(plan).compute_s == pytest.approx(0.183e-3, rel=1e-9)
    # The measured all-reduce (NCCL): 2 calls x 80 layers at 8 x 8192 x 2 B = 128 KiB per call.
    series = profile["all_reduce"]
    per_call = piecewise_linear(series["bytes"], series["time_s"], 8 * 8192 * 2)
    assert v1._allreduce_s(8, False) == pytest.approx(160 * per_call)
    # As vLLM runs it (vllm_runtime.py), its custom kernel replaces NCCL there: the roofline's.
    runtime = VllmRuntime(EngineEra.V0, cuda_graphs_for(EngineEra.V0, 256, 4096), gpu.name)
    vllm = ProfileModel(LLAMA_70B, gpu, config, tensor_parallel=2, runtime=runtime)
    assert vllm._allreduce_s(8, True) == vllm.roofline.allreduce_step_s(8, True)
    assert vllm._allreduce_s(8, True) < 160 * per_call


def _broken(tmp_path: Path, column: str, value: object, line: int = 2) -> Path:
    root = tmp_path / "vidur"
    shutil.copytree(SLICE, root)
    path = root / "compute/a100/meta-llama/Llama-2-70b-hf/mlp.csv"
    rows = path.read_text().splitlines()
    header = rows[0].split(",")
    if value is None:
        keep = [i for i, name in enumerate(header) if name != column]
        rows = [",".join(r.split(",")[i] for i in keep) for r in rows]
    elif column.startswith("n_"):  # a shape: every row
        for k in range(1, len(rows)):
            cells = rows[k].split(",")
            cells[header.index(column)] = str(value)
            rows[k] = ",".join(cells)
    else:
        cells = rows[line - 1].split(",")
        cells[header.index(column)] = str(value)
        rows[line - 1] = ",".join(cells)
    path.write_text("\n".join(rows) + "\n")
    return root


@pytest.mark.parametrize(
    ("column", "value", "words"),
    [
        (
            "time_stats.mlp_up_proj.median",
            None,
            "column 'time_stats.mlp_up_proj.median' is missing",
        ),
        (
            "time_stats.attn_pre_proj.median",
            -0.5,
            "column 'time_stats.attn_pre_proj.median', line 3: -0.5 is not a finite number of ms",
        ),
        (
            "time_stats.add.median",
            "fast",
            "column 'time_stats.add.median', line 3: 'fast' is not a finite number",
        ),
        ("n_embd", 4096, "column 'n_embd' is .* but llama-2-70b has hidden_size 8192"),
    ],
)
def test_a_bad_csv_is_one_line_naming_file_and_column_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str, value: object, words: str
) -> None:
    root = _broken(tmp_path, column, value, line=3)
    args = [
        "calibrate",
        "import-vidur",
        str(root),
        "--model",
        "llama-2-70b",
        "--gpu",
        "a100-80gb",
        "--tp",
        "2",
        "--out",
        str(tmp_path / "p.json"),
    ]
    result = run_cli(capsys, *args)
    assert result.exit_code == 2
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "mlp.csv" in lines[0]
    import re

    assert re.search(words, lines[0]), lines[0]
    assert not (tmp_path / "p.json").exists()


def test_the_fit_runs_on_the_slice_and_stays_physical() -> None:
    fitted = fit_gpu(SLICE, "a100-80gb", A100, models=["llama-2-70b"])
    f = fitted.factors
    assert 0.5 < f.gemm_efficiency <= 1 and 0.5 < f.weight_bw_efficiency <= 1
    assert 0 <= f.gemm_overlap <= 1 and f.is_fitted
    assert fitted.interconnect is not None and fitted.interconnect.by_workers[0][0] == 2


@needs_shared
def test_every_file_imports_and_the_shipped_profiles_are_what_it_writes(tmp_path: Path) -> None:
    written = import_every(SHARED, tmp_path)
    assert len(written) == 32  # 8 (model, GPU) pairs x TP 1, 2, 4, 8
    dated = json.loads((tmp_path / "vidur-llama-2-70b-a100-80gb-tp2.json").read_text())
    assert dated["provenance"]["date"] == "2024-05-14"  # the last of the files' Vidur commits
    assert {f["vidur_commit"] for f in dated["provenance"]["files"]} == {
        "bee57da",
        "e2d00e9",
        "e26eb8f",
    }
    for path in written:
        shipped = PROFILES / path.name
        assert json.loads(path.read_text()) == json.loads(shipped.read_text()), path.name


@needs_shared
def test_fit_roofline_reproduces_the_shipped_constants() -> None:
    for fitted in fit_all(SHARED):
        preset = GPUS[fitted.gpu_name]
        for name in (
            "gemm_efficiency",
            "gemm_overlap",
            "gemm_launch_s",
            "weight_bw_efficiency",
            "small_ops_layer_s",
            "small_ops_bw_efficiency",
            "attention_bw_efficiency",
            "attention_layer_s",
            "attention_seq_s",
            "attention_flops_efficiency",
        ):
            assert getattr(preset.factors, name) == pytest.approx(
                getattr(fitted.factors, name), rel=5e-4
            ), (fitted.gpu_name, name)
        for name in ("gemm_tile_m", "gemm_tile_n", "gemm_num_sms"):
            assert getattr(preset.factors, name) == getattr(fitted.factors, name), name
        if fitted.interconnect is not None:
            for (n, lat, bw), (m, lat2, bw2) in zip(
                fitted.interconnect.by_workers, preset.interconnect.by_workers, strict=True
            ):
                assert (
                    n == m
                    and lat2 == pytest.approx(lat, rel=5e-4)
                    and bw2 == pytest.approx(bw, rel=5e-4)
                )
            for (n, knots), (m, knots2) in zip(
                fitted.interconnect.small_by_workers,
                preset.interconnect.small_by_workers,
                strict=True,
            ):
                assert n == m and knots2 == pytest.approx(knots, rel=5e-4), (fitted.gpu_name, n)


@needs_shared
def test_the_error_table_is_what_the_command_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ERRORS.md"
    assert (
        run_cli(capsys, "calibrate", "error-table", str(SHARED), "--out", str(out)).exit_code == 0
    )
    assert out.read_text() == (PROFILES / "ERRORS.md").read_text()


@needs_shared
def test_the_fit_meets_its_targets_where_the_table_says() -> None:
    """Issue 13's step targets: median per-step error <= 10% and worst <= 25% on A100 and H100
    (the all-reduce part of a grid step is the measured medians up to 4 MiB, falls with size
    included, so the rest of the error is the linear layers', small operators' and
    attention's)."""
    from pagesim.calibration.step_error_rows import step_errors

    for gpu, worst in (("a100-80gb", 0.25), ("h100-sxm", 0.25)):
        rows = step_errors(read_gpu_measurements(SHARED, gpu))
        errors = np.abs([r.after_err for r in rows])
        assert np.median(errors) <= 0.10 and errors.max() <= worst, gpu


@needs_shared
def test_the_all_reduce_is_the_measured_medians_and_within_15_percent_at_every_grid_size() -> None:
    """Issue 13's all-reduce target. The shipped knots (core/presets/interconnects.toml) are the
    measured neighbourhood medians at every knot, for every node and GPU count, falls with size
    included; and at every message the error table's grid steps send (decode 1-256 sequences,
    prefill 128-4096 tokens, hidden 4096 and 8192: 16 sizes per node and count), the all-reduce
    per call is within 15% of the measured median: up to 4 MiB exactly it, above it the fitted
    curve."""
    from pagesim.calibration.allreduce_errors import allreduce_points
    from pagesim.calibration.allreduce_fit import measured_allreduce_s
    from pagesim.simulator.core.hardware import ALLREDUCE_KNOT_BYTES

    measurements = [read_gpu_measurements(SHARED, gpu) for gpu in ("a100-80gb", "h100-sxm")]
    for data in measurements:
        assert data.all_reduce is not None
        link = data.gpu.interconnect
        assert [n for n, _ in link.small_by_workers] == [2, 4, 8]
        for n, knots in link.small_by_workers:
            medians = [measured_allreduce_s(data.all_reduce, n, s) for s in ALLREDUCE_KNOT_BYTES]
            assert knots == pytest.approx(medians, rel=5e-4), (data.gpu.name, n)
    points = allreduce_points(measurements)
    assert len(points) == 96  # 2 nodes x 3 GPU counts x 16 sizes
    for p in points:
        assert abs(p.error) <= 0.15, (p.node, p.num_workers, p.size_bytes, p.error)
        if p.size_bytes <= ALLREDUCE_KNOT_BYTES[-1]:
            assert p.after_s == pytest.approx(p.measured_s, rel=5e-4)


def test_an_all_reduce_miss_is_called_noisy_only_where_the_measurements_disagree() -> None:
    """Two clusters near one size (as Vidur's 4-GPU A100 file has at 128 KiB) make a size noisy;
    a tight neighbourhood does not, however far the fitted curve is from it."""
    from pagesim.calibration.allreduce_errors import AllReducePoint

    def point(nearby_us: list[float], after_us: float) -> AllReducePoint:
        return AllReducePoint(
            "a100_dgx", 4, 131072, 8, 8192, np.array(nearby_us) * 1e-6, after_us * 1e-6, 0.0
        )

    two_clusters = point([20, 21, 60, 60, 61, 61], 31)
    assert two_clusters.is_noisy and two_clusters.error == pytest.approx(31 / 60 - 1)
    tight = point([58, 59, 60, 61, 62], 31)
    assert not tight.is_noisy and abs(tight.error) > 0.15


def test_the_slices_all_reduce_knots_are_its_measured_medians_as_measured() -> None:
    """The knots are the neighbourhood medians at each knot, not smoothed or reordered: the
    slice's 2-GPU rows (every 8th row of the file) fall from 56.5 us at 512 KiB to 48 us at
    1.4 MiB, and the knots keep that."""
    from pagesim.calibration.allreduce_fit import knots_s, measured_allreduce_s
    from pagesim.simulator.core.hardware import ALLREDUCE_KNOT_BYTES

    table = read_gpu_measurements(SLICE, "a100-80gb", ["llama-2-70b"]).all_reduce
    assert table is not None
    medians = [measured_allreduce_s(table, 2, s) for s in ALLREDUCE_KNOT_BYTES]
    assert knots_s(table, 2) == tuple(medians)
    assert knots_s(table, 2)[12] == pytest.approx(56.5e-6) and knots_s(table, 2)[15] == (
        pytest.approx(48e-6)
    )


@st.composite
def regimes(draw: st.DrawFn) -> list[tuple[float, float]]:
    """Runs of message sizes at one speed each: (width in octaves, microseconds per call)."""
    widths = draw(st.lists(st.floats(2.0, 3.5), min_size=2, max_size=6))
    speeds = draw(st.lists(st.floats(5.0, 100.0), min_size=len(widths), max_size=len(widths)))
    return list(zip(widths, speeds, strict=True))


@settings(max_examples=100, deadline=None)
@given(regimes())
def test_a_regime_wider_than_the_neighbourhood_is_followed_faster_or_slower(
    runs: list[tuple[float, float]],
) -> None:
    """A file whose rows (every 1/16 octave from 8 KiB) come in runs at one speed each: a knot
    whose x1.5 neighbourhood lies inside one run takes that run's speed, whether it is faster
    or slower than the run before (no smoothing across a fall in size). Runs of 2 octaves or
    more always hold one: the neighbourhood spans 2 log2(1.5) = 1.17 octaves, knots lie every
    half octave."""
    from pagesim.calibration.allreduce_fit import knots_s
    from pagesim.calibration.vidur_csv import CollectiveTable
    from pagesim.simulator.core.hardware import ALLREDUCE_KNOT_BYTES

    edges = np.cumsum([0.0] + [w for w, _ in runs]) + 13  # log2 bytes
    log_sizes = np.arange(13, edges[-1], 1 / 16)
    run = np.searchsorted(edges, log_sizes, side="right") - 1
    times = np.array([runs[i][1] for i in run]) * 1e-6
    n = len(log_sizes)
    table = CollectiveTable(
        path=Path("synthetic.csv"),
        num_workers=np.full(n, 4),
        devices_per_node=np.full(n, 4),
        size_bytes=2.0**log_sizes,
        median_s=times,
        std_s=np.zeros(n),
    )
    half = math.log2(1.5)
    checked = 0
    for size, knot in zip(ALLREDUCE_KNOT_BYTES, knots_s(table, 4), strict=True):
        x = math.log2(size)
        inside = [i for i in range(len(runs)) if edges[i] < x - half and x + half < edges[i + 1]]
        if inside and x + half < log_sizes[-1]:
            assert knot == pytest.approx(runs[inside[0]][1] * 1e-6), size
            checked += 1
    assert checked >= 1

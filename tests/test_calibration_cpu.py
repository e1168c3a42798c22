"""Calibration on the CPU: launch-wrapper checks, harness, grids, fits, calibrate --quick (NumPy).

The launch wrapper is also driven against a fake CuPy whose "kernels" follow the .cu's launch
contract (grid, argument order and C types, split-K partial layout) in NumPy: that checks the
Python side of every launch, and the split-K arithmetic, without a GPU. The real kernel is
checked against the reference by the GPU tests (tests/test_gpu_kernel.py).
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import math
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from pagesim.calibration import fit, kernel
from pagesim.calibration.backends import LayerShapes, NumpyBackend, table_for
from pagesim.calibration.harness import CudaEventTimer, PerfCounterTimer, Samples
from pagesim.calibration.measure import Point, context_mix, make_grid
from pagesim.calibration.reference import (
    bf16_bits_to_float,
    float_to_bf16_bits,
    make_paged_case,
    reference_decode_attention,
)
from pagesim.calibration.run import calibrate
from pagesim.simulator.core.catalog import ModelSpec, count_params, get_model
from pagesim.simulator.core.errors import InputError, PagesimError


def tiny_model(name: str = "tiny-llama") -> ModelSpec:
    params = count_params(2, 4, 2, 64, 256, 512, 1000, True)
    return ModelSpec(name, 2, 4, 2, 64, 256, 512, 1000, True, 2048, params)


# ---------------------------------------------------------------- launch-wrapper checks


def _arrays(**overrides):
    base = {
        "q": np.zeros((3, 8, 128), np.float16),
        "k_cache": np.zeros((10, 2, 16, 128), np.float16),
        "v_cache": np.zeros((10, 2, 16, 128), np.float16),
        "context_lens": np.array([5, 16, 40], np.int32),
        "block_tables": np.zeros((3, 3), np.int32),
    }
    base.update(overrides)
    return base


def test_check_accepts_paged_contiguous_and_bf16() -> None:
    shape = kernel.check_decode_inputs(**_arrays())
    assert (shape.num_heads, shape.num_kv_heads, shape.block_size, shape.max_context) == (
        8,
        2,
        16,
        48,
    )
    contiguous = kernel.check_decode_inputs(
        **_arrays(
            k_cache=np.zeros((3, 2, 64, 128), np.float16),
            v_cache=np.zeros((3, 2, 64, 128), np.float16),
            block_tables=None,
        )
    )
    assert contiguous.block_size is None and contiguous.max_context == 64
    bf16 = kernel.check_decode_inputs(
        **_arrays(
            q=np.zeros((3, 8, 128), np.uint16),
            k_cache=np.zeros((10, 2, 16, 128), np.uint16),
            v_cache=np.zeros((10, 2, 16, 128), np.uint16),
        ),
        kv_dtype="bf16",
    )
    assert bf16.kv_dtype == "bf16"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"q": np.zeros((3, 8, 128), np.float32)}, "q must be float16"),
        ({"q": np.zeros((3, 8, 96), np.float16)}, "head_dim must be one of"),
        ({"q": np.zeros((3, 7, 128), np.float16)}, "multiple of num_kv_heads"),
        ({"k_cache": np.zeros((10, 2, 12, 128), np.float16)}, "v_cache shape"),
        (
            {
                "k_cache": np.zeros((10, 2, 12, 128), np.float16),
                "v_cache": np.zeros((10, 2, 12, 128), np.float16),
            },
            "block_size must be one of",
        ),
        ({"context_lens": np.array([5, 16, 40], np.int64)}, "context_lens must be int32"),
        ({"block_tables": np.zeros((3, 3), np.int64)}, "block_tables must be int32"),
        ({"block_tables": np.zeros((3, 6), np.int32)[:, ::2]}, "block_tables must be C-contig"),
        ({"v_cache": np.zeros((10, 2, 128, 16), np.float16).swapaxes(2, 3)}, "C-contiguous"),
    ],
)
def test_check_rejects_bad_inputs(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        kernel.check_decode_inputs(**_arrays(**overrides))


@pytest.mark.parametrize(
    ("group", "expected"), [(1, 1), (4, 4), (7, 7), (8, 8), (16, 8), (12, 6), (11, 1)]
)
def test_heads_per_cta_divides_the_group(group: int, expected: int) -> None:
    assert kernel.heads_per_cta(group) == expected


@pytest.mark.parametrize(
    ("ctas", "max_context"), [(1024, 4096), (32, 16384), (32, 300), (1, 100_000), (64, 1000)]
)
def test_partitions_cover_the_context_and_fill_the_gpu(ctas: int, max_context: int) -> None:
    size, parts = kernel.choose_partitions(ctas, max_context, num_sms=132)
    assert size % kernel.PARTITION_QUANTUM == 0
    assert (parts - 1) * size < max_context <= parts * size
    if ctas >= kernel.CTAS_PER_SM_TARGET * 132 or max_context <= 2 * kernel.MIN_PARTITION:
        assert parts == 1
    else:
        assert parts > 1 and size >= kernel.MIN_PARTITION - kernel.PARTITION_QUANTUM


def test_kernel_source_hash_and_location() -> None:
    path = kernel.kernel_path()
    assert path.name == "paged_attention.cu" and path.parent.name == "kernels"
    assert kernel.kernel_sha256() == hashlib.sha256(path.read_bytes()).hexdigest()


def test_without_cupy_the_gpu_paths_say_a_gpu_is_needed(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError
    with pytest.raises(PagesimError, match="CuPy and a CUDA GPU"):
        kernel.import_cupy()
    from pagesim.calibration.bench import bench_kernel

    with pytest.raises(PagesimError, match="needs a CUDA GPU"):
        bench_kernel(get_model("llama-2-7b"))
    with pytest.raises(PagesimError, match="CuPy"):
        calibrate(tiny_model(), "cupy", True, Path("unused.json"))


# ---------------------------------------------------------------- fake CuPy: the launch contract


def _emulate_decode(name: str, grid, block, args) -> None:
    """What pagesim::decode_attention writes, computed per CTA in NumPy (log2-domain softmax)."""
    dtype, head_dim, block_size, heads, paged = (
        int(v) if v.isdigit() else v == "true"
        for v in re.findall(r"<(\d+), (\d+), (\d+), (\d+), (\w+)>", name)[0]
    )
    assert block == (kernel.NUM_THREADS, 1, 1)
    out, part_acc, part_max, part_sum, q, k_cache, v_cache, tables, lens = args[:9]
    scalars = args[9:]
    assert [type(s) for s in scalars] == [np.int32] * 5 + [np.float32], "exact C types"
    row_stride, num_heads, num_kv_heads, partition_size, num_partitions = map(int, scalars[:5])
    scale_log2 = float(scalars[5])
    group = num_heads // num_kv_heads
    tiles = group // heads
    assert grid == (num_kv_heads * tiles, q.shape[0], num_partitions)
    to32 = bf16_bits_to_float if dtype == 1 else (lambda a: a.astype(np.float32))
    for x in range(grid[0]):
        kv_head, head0 = x // tiles, (x // tiles) * group + (x % tiles) * heads
        for seq in range(grid[1]):
            length = int(lens[seq])
            for part in range(grid[2]):
                start = part * partition_size
                if part > 0 and start >= length:
                    continue
                t = np.arange(start, min(length, start + partition_size))
                if paged:
                    blocks = tables.reshape(-1)[seq * row_stride + t // block_size]
                    k = to32(k_cache[blocks, kv_head, t % block_size])
                    v = to32(v_cache[blocks, kv_head, t % block_size])
                else:
                    k, v = to32(k_cache[seq, kv_head, t]), to32(v_cache[seq, kv_head, t])
                for h in range(head0, head0 + heads):
                    s = (to32(q[seq, h]) * scale_log2) @ k.T
                    m = s.max() if len(t) else -np.inf
                    p = np.exp2(s - (m if len(t) else 0.0))
                    acc, total = p @ v if len(t) else np.zeros(head_dim), p.sum()
                    if num_partitions == 1:
                        res = acc / total if total > 0 else np.zeros(head_dim)
                        out[seq, h] = float_to_bf16_bits(res) if dtype == 1 else res
                    else:
                        i = (seq * num_heads + h) * num_partitions + part
                        part_acc[i * head_dim : (i + 1) * head_dim] = acc
                        part_max[i], part_sum[i] = m, total


def _emulate_reduce(name: str, grid, block, args) -> None:
    dtype, head_dim = (int(v) for v in re.findall(r"<(\d+), (\d+)>", name)[0])
    out, part_acc, part_max, part_sum, lens, num_heads, partition_size, num_partitions = args
    assert [type(a) for a in args[5:]] == [np.int32] * 3
    assert grid == (int(num_heads), out.shape[0], 1) and block == (head_dim, 1, 1)
    parts = int(num_partitions)
    for seq in range(grid[1]):
        live = max(1, min(parts, math.ceil(int(lens[seq]) / int(partition_size))))
        for h in range(grid[0]):
            base = (seq * int(num_heads) + h) * parts
            m = part_max[base : base + live]
            top = m.max() if np.isfinite(m).any() else 0.0
            w = np.exp2(m - top)
            acc = part_acc[base * head_dim : (base + live) * head_dim].reshape(live, head_dim)
            total = float(part_sum[base : base + live] @ w)
            res = (w @ acc) / total if total > 0 else np.zeros(head_dim)
            out[seq, h] = float_to_bf16_bits(res) if dtype == 1 else res


def _fake_cupy() -> types.ModuleType:
    fake = types.ModuleType("cupy")
    fake.float32 = np.float32
    fake.empty = np.empty
    fake.asnumpy = np.asarray

    class Device:
        def __init__(self, device_id: int = 0) -> None:
            self.id = device_id
            self.attributes = {"MultiProcessorCount": 132}

    class RawModule:
        def __init__(self, code: str, options: tuple, name_expressions: list[str]) -> None:
            assert "decode_attention" in code and options == kernel.NVRTC_OPTIONS
            self.names = name_expressions

        def get_function(self, name: str):
            assert name in self.names
            emulate = _emulate_reduce if "reduce" in name else _emulate_decode
            return lambda grid, block, args: emulate(name, grid, block, args)

    fake.RawModule = RawModule
    fake.cuda = types.SimpleNamespace(
        Device=Device, runtime=types.SimpleNamespace(getDeviceCount=lambda: 1)
    )
    return fake


@pytest.fixture
def fake_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())
    kernel._functions.cache_clear()
    kernel._num_sms.cache_clear()
    yield
    kernel._functions.cache_clear()
    kernel._num_sms.cache_clear()


@pytest.mark.parametrize("kv_dtype", ["fp16", "bf16"])
@pytest.mark.parametrize(
    ("num_heads", "num_kv_heads", "partition_size"),
    [(4, 4, None), (8, 2, 128), (16, 1, 256), (12, 1, None)],
)
def test_launch_contract_split_k_matches_reference(
    fake_cupy, kv_dtype: str, num_heads: int, num_kv_heads: int, partition_size: int | None
) -> None:
    rng = np.random.default_rng(num_heads)
    lens = [1, 15, 16, 600, 300, 0, 129]
    case = make_paged_case(rng, lens, num_heads, num_kv_heads, 64, 16, kv_dtype=kv_dtype)
    plan = kernel.plan_decode_attention(
        case.q,
        case.k_cache,
        case.v_cache,
        case.context_lens,
        case.block_tables,
        kv_dtype=kv_dtype,
        partition_size=partition_size,
    )
    if partition_size:
        assert plan.num_partitions == math.ceil(600 / partition_size) and len(plan.launches) == 2
    out = plan.run()
    got = bf16_bits_to_float(out) if kv_dtype == "bf16" else out.astype(np.float32)
    ref = reference_decode_attention(
        case.q, case.k_cache, case.v_cache, case.block_tables, case.context_lens
    )
    assert np.isfinite(got).all()
    tol = 1e-2 if kv_dtype == "bf16" else 2e-3
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < tol
    assert (
        plan.min_bytes == 2 * sum(lens) * num_kv_heads * 64 * 2 + 2 * len(lens) * num_heads * 64 * 2
    )


def test_skewed_batch_with_enough_ctas_still_splits_its_longest_sequence(fake_cupy) -> None:
    """40 sequences x 8 KV heads = 320 CTAs fill 132 SMs, but one 2000-token sequence among
    16-token ones would run alone long after the rest: it is split, and the result is exact."""
    assert kernel.choose_partitions(320, 2000, 132) == (2048, 1)  # without the mean: no split
    assert kernel.choose_partitions(320, 2000, 132, mean_context=2000.0) == (2048, 1)  # uniform
    rng = np.random.default_rng(3)
    lens = [16] * 39 + [2000]
    rng.shuffle(lens)
    case = make_paged_case(rng, lens, 8, 8, 64, 16)
    plan = kernel.plan_decode_attention(
        case.q, case.k_cache, case.v_cache, case.context_lens, case.block_tables
    )
    assert plan.num_partitions > 1 and plan.partition_size >= kernel.MIN_PARTITION
    got = plan.run().astype(np.float32)
    ref = reference_decode_attention(
        case.q, case.k_cache, case.v_cache, case.block_tables, case.context_lens
    )
    assert np.isfinite(got).all() and np.linalg.norm(got - ref) / np.linalg.norm(ref) < 2e-3


def test_plan_rejects_a_table_entry_outside_the_pool(fake_cupy) -> None:
    case = make_paged_case(np.random.default_rng(1), [20, 3], 4, 2, 64, 16)
    tables = case.block_tables.copy()
    tables[0, 1] = case.k_cache.shape[0]
    with pytest.raises(ValueError, match="outside"):
        kernel.plan_decode_attention(case.q, case.k_cache, case.v_cache, case.context_lens, tables)


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
    fake = types.SimpleNamespace(empty=lambda n, dtype: bytearray(0), uint8=np.uint8)
    assert CudaEventTimer(fake, 60 * 2**20).flush_bytes >= 120 * 2**20
    assert CudaEventTimer(fake, 50_000_001).flush_bytes >= 100_000_002
    assert CudaEventTimer(fake, 0).flush_bytes == 64 * 2**20


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
    assert kinds == {"copy", "empty_step", "decode", "gemm", "lm_head", "prefill"}
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
    from pagesim.reports.curves import parse_calibration

    device, panels = parse_calibration(calibration_panels(cpu_profile))
    assert device == "cpu" and len(panels) == 4
    decode = panels[0]
    assert len(decode.x) == len(json.loads(cpu_profile.read_text())["grid"]["decode"])
    assert (decode.measured_p10_s <= decode.measured_s).all()
    assert (decode.measured_s <= decode.measured_p90_s).all()

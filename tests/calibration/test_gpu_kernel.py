"""The CUDA kernel on a real GPU: correct against the NumPy reference and torch, timed soundly.

Marked `gpu`; skipped with a reason where CuPy or a GPU is absent. Run them with
`python -m pytest -m gpu -q tests/` (calibration/gpu_check.sh does, in one device call).

Every case draws fresh random K/V into a shuffled block pool whose unused slots, spare blocks
and unused table entries hold NaN, and the output is pre-filled with NaN: the result must be
finite everywhere (every element written, no poison read) and match the reference within the
16-bit rounding of the output (fp16: relative L2 error < 2e-3; bf16: < 1e-2).
"""

from __future__ import annotations

import functools
import json
import math
import zlib
from pathlib import Path

import numpy as np
import pytest
from gpu_helpers import gpu_skip_reason

from pagesim.calibration.attention_reference import (
    bf16_bits_to_float,
    make_paged_case,
    reference_decode_attention,
)
from pagesim.simulator.core.catalog import ModelSpec, count_params, get_gpu, get_model

REASON = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

TOLERANCE = {"fp16": 2e-3, "bf16": 1e-2}


def _upload(case):
    import cupy as cp

    return (
        cp.asarray(case.q),
        cp.asarray(case.k_cache),
        cp.asarray(case.v_cache),
        cp.asarray(case.context_lens),
        cp.asarray(case.block_tables),
    )


def _to_float(out, kv_dtype: str) -> np.ndarray:
    import cupy as cp

    host = cp.asnumpy(out)
    return bf16_bits_to_float(host) if kv_dtype == "bf16" else host.astype(np.float32)


def _poisoned_out(q):
    import cupy as cp

    nan = 0x7FC0 if q.dtype == cp.uint16 else np.nan
    return cp.full(q.shape, nan, dtype=q.dtype)


def _rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


CONFIGS = [
    # kv_dtype, num_heads, num_kv_heads, head_dim, block_size
    ("fp16", 32, 32, 128, 16),  # Llama-2-7B
    ("fp16", 32, 8, 128, 16),  # Llama-3-8B (GQA 4)
    ("fp16", 16, 2, 128, 16),  # GQA 8 (Llama-2-70B's ratio)
    ("fp16", 28, 4, 128, 16),  # GQA 7 (Qwen2.5-7B's ratio)
    ("bf16", 32, 2, 128, 32),  # GQA 16: two tiles of 8 heads per KV head
    ("fp16", 8, 8, 64, 8),
    ("bf16", 12, 4, 64, 32),  # GQA 3
    ("fp16", 8, 2, 256, 16),
    ("bf16", 4, 4, 256, 8),
    ("fp16", 8, 1, 128, 8),  # MQA
]


@functools.cache
def _config_case(config: tuple[str, int, int, int, int]):
    """One poisoned case and its reference per config, shared by the three split modes (the
    NumPy side of the biggest config takes seconds, and gpu_check.sh gives the tests 3 min)."""
    kv_dtype, num_heads, num_kv_heads, head_dim, block_size = config
    rng = np.random.default_rng(zlib.crc32(repr(config).encode()))
    b = block_size
    lens = [1, b - 1, b, b + 1, 37, 300, 1000, 2049, 0, 4500, int(rng.integers(1, 3000))]
    rng.shuffle(lens)
    case = make_paged_case(
        rng, lens, num_heads, num_kv_heads, head_dim, block_size, kv_dtype=kv_dtype
    )
    ref = reference_decode_attention(
        case.q, case.k_cache, case.v_cache, case.block_tables, case.context_lens
    )
    return lens, case, ref


@pytest.mark.parametrize("split", ["auto", "forced", "none"])
@pytest.mark.parametrize(
    ("kv_dtype", "num_heads", "num_kv_heads", "head_dim", "block_size"), CONFIGS
)
def test_paged_kernel_matches_reference(
    kv_dtype: str, num_heads: int, num_kv_heads: int, head_dim: int, block_size: int, split: str
) -> None:
    from pagesim.calibration.kernel import plan_decode_attention

    config = (kv_dtype, num_heads, num_kv_heads, head_dim, block_size)
    lens, case, ref = _config_case(config)
    q, k, v, context_lens, tables = _upload(case)
    out = _poisoned_out(q)
    partition_size = {"auto": None, "forced": 256, "none": 128 * math.ceil(max(lens) / 128)}[split]
    plan = plan_decode_attention(
        q, k, v, context_lens, tables, kv_dtype=kv_dtype, partition_size=partition_size, out=out
    )
    if split == "forced":
        assert plan.num_partitions == math.ceil(max(lens) / 256)
    if split == "none":
        assert plan.num_partitions == 1
    got = _to_float(plan.run(), kv_dtype)
    assert np.isfinite(got).all(), "NaN: an output was not written, or poison was read"
    assert _rel_err(got, ref) < TOLERANCE[kv_dtype]
    assert not got[lens.index(0)].any(), "an empty context gives zeros"
    # Deterministic: the same launch again gives the same bits (a race would move them).
    again = _to_float(plan.run(), kv_dtype)
    np.testing.assert_array_equal(got, again)


def test_plan_rejects_a_view_off_the_16_byte_grid() -> None:
    import cupy as cp

    from pagesim.calibration.kernel import plan_decode_attention

    case = make_paged_case(np.random.default_rng(5), [40, 3], 4, 2, 64, 16)
    q, k, v, context_lens, tables = _upload(case)
    flat = cp.empty(q.size + 1, dtype=q.dtype)
    shifted = flat[1:].reshape(q.shape)  # C-contiguous, 2 bytes past a 16-byte boundary
    shifted[...] = q
    with pytest.raises(ValueError, match="16-byte boundary"):
        plan_decode_attention(shifted, k, v, context_lens, tables)


@pytest.mark.parametrize("kv_dtype", ["fp16", "bf16"])
def test_contiguous_variant_matches_reference_and_the_paged_kernel(kv_dtype: str) -> None:
    import cupy as cp

    from pagesim.calibration.kernel import plan_decode_attention

    rng = np.random.default_rng(17)
    lens = [700, 1, 64, 1500, 33]
    num_heads, num_kv_heads, head_dim = 16, 4, 128
    case = make_paged_case(rng, lens, num_heads, num_kv_heads, head_dim, 16, kv_dtype=kv_dtype)
    stride = 1536
    nan = 0x7FC0 if kv_dtype == "bf16" else np.nan
    dtype = np.uint16 if kv_dtype == "bf16" else np.float16
    k_dense = np.full((len(lens), num_kv_heads, stride, head_dim), nan, dtype=dtype)
    v_dense = np.full_like(k_dense, nan)
    for s, n in enumerate(lens):
        tokens = np.arange(n)
        blocks = case.block_tables[s, tokens // 16]
        k_dense[s, :, :n] = case.k_cache[blocks, :, tokens % 16].transpose(1, 0, 2)
        v_dense[s, :, :n] = case.v_cache[blocks, :, tokens % 16].transpose(1, 0, 2)
    q, k, v, context_lens, tables = _upload(case)
    contiguous = plan_decode_attention(q, cp.asarray(k_dense), cp.asarray(v_dense), context_lens)
    paged = plan_decode_attention(q, k, v, context_lens, tables)
    got = _to_float(contiguous.run(), kv_dtype)
    ref = reference_decode_attention(
        case.q, case.k_cache, case.v_cache, case.block_tables, case.context_lens
    )
    assert np.isfinite(got).all()
    assert _rel_err(got, ref) < TOLERANCE[kv_dtype]
    assert contiguous.num_partitions == paged.num_partitions
    np.testing.assert_array_equal(cp.asnumpy(paged.run()), cp.asnumpy(contiguous.out))


def test_matches_torch_sdpa_on_gathered_kv() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed")
    import cupy as cp

    from pagesim.calibration.kernel import decode_attention

    rng = np.random.default_rng(23)
    num_heads, num_kv_heads, head_dim, context = 32, 8, 128, 3000
    lens = [context] * 4
    case = make_paged_case(rng, lens, num_heads, num_kv_heads, head_dim, 16)
    q, k, v, context_lens, tables = _upload(case)
    got = cp.asnumpy(decode_attention(q, k, v, context_lens, tables)).astype(np.float32)
    qt = torch.from_numpy(case.q.astype(np.float32)).cuda().view(4, num_heads, 1, head_dim)
    group = num_heads // num_kv_heads
    kt = torch.from_numpy(np.stack(case.dense_k)).cuda().permute(0, 2, 1, 3)  # [S, Hkv, T, D]
    vt = torch.from_numpy(np.stack(case.dense_v)).cuda().permute(0, 2, 1, 3)
    kt, vt = kt.repeat_interleave(group, dim=1), vt.repeat_interleave(group, dim=1)
    expected = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt)
    expected = expected.view(4, num_heads, head_dim).cpu().numpy()
    assert _rel_err(got, expected) < 2e-3


def test_long_contexts_split_and_stay_exact() -> None:
    from pagesim.calibration.kernel import plan_decode_attention

    rng = np.random.default_rng(29)
    lens = [20000, 17]
    case = make_paged_case(rng, lens, 8, 8, 128, 16)
    q, k, v, context_lens, tables = _upload(case)
    plan = plan_decode_attention(q, k, v, context_lens, tables)
    assert plan.num_partitions > 1, "two sequences cannot fill the GPU without split-K"
    got = _to_float(plan.run(), "fp16")
    ref = reference_decode_attention(
        case.q, case.k_cache, case.v_cache, case.block_tables, case.context_lens
    )
    assert np.isfinite(got).all() and _rel_err(got, ref) < 2e-3


def test_plan_validates_block_tables_on_the_device() -> None:
    import cupy as cp

    from pagesim.calibration.kernel import plan_decode_attention

    case = make_paged_case(np.random.default_rng(2), [40, 3], 4, 2, 64, 16)
    q, k, v, context_lens, tables = _upload(case)
    tables[0, 2] = k.shape[0] + 5
    with pytest.raises(ValueError, match="outside"):
        plan_decode_attention(q, k, v, context_lens, tables)
    tables[0, 2] = -1
    with pytest.raises(ValueError, match="outside"):
        plan_decode_attention(q, k, v, context_lens, tables)
    tables[0, 2] = int(case.block_tables[0, 2])
    tables[0, 3:] = -7  # entries past the last used block are never looked at
    assert cp.asnumpy(plan_decode_attention(q, k, v, context_lens, tables).run()).size


def test_event_timer_flushes_the_l2_and_keeps_samples() -> None:
    from pagesim.calibration.backends import CupyBackend

    backend = CupyBackend()
    assert backend.timer.flush_bytes >= 2 * backend.l2_bytes > 0
    assert backend.timer.flush_mode == "read" and backend.provenance()["l2_flush_mode"] == "read"
    memset = CupyBackend(flush="memset")
    assert memset.copy_bandwidth(64 << 20, warmup=1, repeats=3)[0] > 100e9
    bandwidth, samples = backend.copy_bandwidth(256 << 20, warmup=2, repeats=10)
    assert len(samples.samples_s) == 10 and samples.p10_s <= samples.median_s <= samples.p90_s
    assert bandwidth > 100e9, "a device-to-device copy under 100 GB/s: something is wrong"
    info = backend.provenance()
    assert info["device"] != "cpu" and info["device_kind"] == "gpu"
    step = backend.empty_step(10, warmup=2, repeats=5)
    assert 0 < step.median_s < 0.1


def test_quick_gpu_calibration_of_a_small_model(tmp_path: Path) -> None:
    from pagesim.calibration.run import calibrate
    from pagesim.simulator.core.config import ExecutionConfig, ExecutionKind
    from pagesim.simulator.core.plan import SeqWork, StepPlan
    from pagesim.simulator.execution.profile import ProfileModel

    params = count_params(2, 8, 2, 128, 1024, 2816, 32000, True)
    model = ModelSpec("small-llama", 2, 8, 2, 128, 1024, 2816, 32000, True, 4096, params)
    path = calibrate(model, "cupy", True, tmp_path / "small.json")
    data = json.loads(path.read_text())
    assert data["provenance"]["device_kind"] == "gpu" and data["provenance"]["device"] != "cpu"
    assert data["provenance"]["l2_flush"] is True and data["provenance"]["timer"] == "cuda-events"
    overhead = data["overhead"]
    assert overhead["graph_error"] is None, overhead["graph_error"]
    assert overhead["graph_step_s"] > 0 and 0 < overhead["eager_step_s"] == overhead["empty_step_s"]
    assert "elementwise" in data["gemm"]["parts"]
    config = ExecutionConfig(kind=ExecutionKind.PROFILE, profile_path=path)
    priced = ProfileModel(model, get_gpu("h200-sxm"), config)
    plan = StepPlan.build([SeqWork(i, i, 1, 1000, False) for i in range(32)])
    assert priced.price(plan).compute_s > 0


def test_bench_kernel_rows() -> None:
    from pagesim.calibration.kernel_bench import bench_kernel

    rows = bench_kernel(get_model("llama-3-8b"), shapes=[(4, 4096), (8, 600)], warmup=2, repeats=5)
    assert [(r["num_seqs"], r["kv_dtype"]) for r in rows] == [
        (4, "fp16"), (4, "bf16"), (8, "fp16"), (8, "bf16")
    ]  # fmt: skip
    for row in rows:
        assert 0 < row["pct_of_copy_bw"] < 150 and row["time_memset_flush_s"] > 0
        assert row["ctas_per_sm"] >= 4 and row["kernel_local_size_bytes"] == 0
        sweep = dict(item.split(":") for item in str(row["partition_sweep"]).split())
        assert "128" in sweep and str(row["best_forced_partition_size"]) in sweep
    fp16 = [r for r in rows if r["kv_dtype"] == "fp16"]
    assert fp16[0]["kv_tokens"] == 16384 and all(r["same_output_as_contiguous"] for r in fp16)
    assert fp16[1]["partitions"] > 1, "8 sequences x 8 KV heads do not fill an H200 unsplit"
    for row in fp16:
        if row.get("rel_err_vs_sdpa_dense") is not None:
            assert row["rel_err_vs_sdpa_dense"] < 5e-3 and row["rel_err_vs_sdpa_gather"] < 5e-3

"""The launch plan on the CPU: input checks, split-K partitioning, and the launch contract.

The launch wrapper is driven against a fake CuPy whose "kernels" follow the .cu's launch
contract (grid, argument order and C types, split-K partial layout) in NumPy: that checks the
Python side of every launch, and the split-K arithmetic, without a GPU. The kernel's own index
math is emulated lane by lane in tests/kernels/test_kernel_emulation.py; the real kernel is checked
against the reference by the GPU tests (tests/calibration/test_gpu_kernel.py).
"""

from __future__ import annotations

import hashlib
import math
import re
import sys
from pathlib import Path

import fake_cupy as fake_cupy_module
import numpy as np
import pytest

from pagesim.calibration import kernel, partitions
from pagesim.calibration.attention_reference import (
    bf16_bits_to_float,
    make_paged_case,
    reference_decode_attention,
)
from pagesim.calibration.decode_inputs import check_decode_inputs
from pagesim.calibration.run import calibrate
from pagesim.simulator.core.catalog import ModelSpec, count_params, get_model
from pagesim.simulator.core.errors import PagesimError

H200_SMS = 132  # NVIDIA H200 SXM: 132 multiprocessors (device tool notes, KINDS.md)


def tiny_model(name: str = "tiny-llama") -> ModelSpec:
    params = count_params(2, 4, 2, 64, 256, 512, 1000, True)
    return ModelSpec(name, 2, 4, 2, 64, 256, 512, 1000, True, 2048, params)


# ---------------------------------------------------------------- input checks


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
    shape = check_decode_inputs(**_arrays())
    assert (shape.num_heads, shape.num_kv_heads, shape.block_size, shape.max_context) == (
        8,
        2,
        16,
        48,
    )
    contiguous = check_decode_inputs(
        **_arrays(
            k_cache=np.zeros((3, 2, 64, 128), np.float16),
            v_cache=np.zeros((3, 2, 64, 128), np.float16),
            block_tables=None,
        )
    )
    assert contiguous.block_size is None and contiguous.max_context == 64
    bf16 = check_decode_inputs(
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
        check_decode_inputs(**_arrays(**overrides))


@pytest.mark.parametrize(
    ("group", "expected"), [(1, 1), (4, 4), (7, 7), (8, 8), (16, 8), (12, 6), (11, 1)]
)
def test_heads_per_cta_divides_the_group(group: int, expected: int) -> None:
    assert partitions.heads_per_cta(group) == expected


@pytest.mark.parametrize("ctas_per_sm", [2, 3, 4])
@pytest.mark.parametrize(
    ("ctas", "max_context"),
    [(1024, 4096), (32, 16384), (32, 300), (1, 100_000), (64, 1000), (8, 257), (600, 256)],
)
def test_partitions_cover_the_context_and_fill_a_wave(
    ctas: int, max_context: int, ctas_per_sm: int
) -> None:
    size, parts = partitions.choose_partitions(ctas, max_context, H200_SMS, ctas_per_sm)
    assert size % partitions.PARTITION_QUANTUM == 0
    assert (parts - 1) * size < max_context <= parts * size
    wave = ctas_per_sm * H200_SMS
    if ctas >= wave or max_context <= 2 * partitions.MIN_PARTITION:
        assert parts == 1
    else:
        assert parts > 1 and size >= partitions.MIN_PARTITION
        # Never more partitions than the wave needs, unless the minimum size stops it first.
        assert size == partitions.MIN_PARTITION or ctas * (parts - 1) < wave


def test_gqa_at_small_batch_splits_into_128_token_partitions() -> None:
    """Llama-3-8B (8 KV heads, one CTA each) at 8 sequences of 600 tokens: 64 CTAs for a wave of
    528 (132 SMs x 4), so 5 partitions of 128 tokens; contexts of 512 were never split before."""
    assert partitions.choose_partitions(64, 600, H200_SMS, 4) == (128, 5)
    assert partitions.choose_partitions(64, 512, H200_SMS, 4) == (128, 4)
    assert partitions.choose_partitions(64, 256, H200_SMS, 4) == (256, 1)  # two sweeps: whole
    # Occupancy sets the target: a variant holding 2 CTAs per SM fills its wave sooner.
    assert partitions.choose_partitions(8 * 32, 4096, H200_SMS, 2) == (4096 // 2, 2)
    assert partitions.choose_partitions(8 * 32, 4096, H200_SMS, 4) == (2048 - 640, 3)


def test_tables_mirrored_from_the_kernel() -> None:
    assert [partitions.unroll(h) for h in range(1, 9)] == [8, 8, 4, 4, 2, 2, 2, 2]
    assert [partitions.min_ctas_per_sm(h, 128) for h in range(1, 9)] == [4, 4, 4, 4, 3, 3, 3, 2]
    assert partitions.min_ctas_per_sm(2, 256) == 3
    assert [partitions.min_ctas_per_sm(h, 128, 80) for h in range(1, 9)] == [4, 3, 4, 3, 3, 3, 2, 2]
    assert [partitions.max_registers(h, 128) for h in (1, 5, 8)] == [128, 168, 255]
    assert partitions.tokens_per_sweep(1, 128) == 64 and partitions.tokens_per_sweep(4, 128) == 32


def test_kernel_source_hash_and_location() -> None:
    path = kernel.kernel_path()
    assert path.name == "paged_attention.cu" and path.parent.name == "kernels"
    assert kernel.kernel_sha256() == hashlib.sha256(path.read_bytes()).hexdigest()


def test_without_cupy_the_gpu_paths_say_a_gpu_is_needed(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError
    with pytest.raises(PagesimError, match="CuPy and a CUDA GPU"):
        kernel.import_cupy()
    from pagesim.calibration.kernel_bench import bench_kernel

    with pytest.raises(PagesimError, match="needs a CUDA GPU"):
        bench_kernel(get_model("llama-2-7b"))
    with pytest.raises(PagesimError, match="CuPy"):
        calibrate(tiny_model(), "cupy", True, Path("unused.json"))


# ---------------------------------------------------------------- fake CuPy: the launch contract


@pytest.fixture
def fake_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy_module.make())
    fake_cupy_module.clear_caches()
    yield
    fake_cupy_module.clear_caches()


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
    choose = partitions.choose_partitions
    assert choose(320, 2000, 132, 2) == (2048, 1)  # without the mean: no split
    assert choose(320, 2000, 132, 2, mean_context=2000.0) == (2048, 1)  # uniform
    rng = np.random.default_rng(3)
    lens = [16] * 39 + [2000]
    rng.shuffle(lens)
    case = make_paged_case(rng, lens, 8, 8, 64, 16)
    plan = kernel.plan_decode_attention(
        case.q, case.k_cache, case.v_cache, case.context_lens, case.block_tables
    )
    assert plan.num_partitions > 1 and plan.partition_size >= partitions.MIN_PARTITION
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

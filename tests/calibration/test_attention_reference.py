"""The NumPy references: the block-table walk equals dense attention, and poison never leaks.

Every case scatters random K/V into a shuffled block pool whose unused slots, spare blocks and
unused table entries hold NaN (or point at a block of NaN); the outputs must be finite and equal
to dense attention computed in float64 straight from the K/V that were scattered.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.calibration.attention_reference import (
    bf16_bits_to_float,
    dense_attention,
    float_to_bf16_bits,
    gather_sequence,
    make_paged_case,
    numpy_decode_attention,
    numpy_prefill_attention,
    reference_decode_attention,
    to_float32,
)


def _dense_truth(case) -> np.ndarray:
    q = to_float32(case.q)
    out = np.zeros(q.shape, dtype=np.float64)
    for s, length in enumerate(case.context_lens):
        if length:
            out[s] = dense_attention(q[s], case.dense_k[s], case.dense_v[s])
    return out


def _rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


@pytest.mark.parametrize("kv_dtype", ["fp16", "bf16"])
@pytest.mark.parametrize(
    ("num_heads", "num_kv_heads", "head_dim", "block_size"),
    [
        (4, 4, 64, 16),  # MHA
        (8, 2, 64, 8),  # GQA 4
        (8, 1, 128, 32),  # MQA
        (7, 1, 64, 16),  # a group of 7 (Qwen2.5-7B's ratio)
        (4, 2, 256, 16),
    ],
)
def test_reference_equals_dense_attention(
    kv_dtype: str, num_heads: int, num_kv_heads: int, head_dim: int, block_size: int
) -> None:
    rng = np.random.default_rng(head_dim * 31 + num_heads)
    lens = [1, block_size - 1, block_size, block_size + 1, 3 * block_size + 5, 0, 70]
    case = make_paged_case(
        rng, lens, num_heads, num_kv_heads, head_dim, block_size, kv_dtype=kv_dtype
    )
    ref = reference_decode_attention(
        case.q, case.k_cache, case.v_cache, case.block_tables, case.context_lens
    )
    assert np.isfinite(ref).all(), "NaN poison leaked into the reference"
    truth = _dense_truth(case)
    assert _rel_err(ref, truth) < 1e-5
    assert not ref[lens.index(0)].any(), "an empty context gives a zero output"


@pytest.mark.parametrize("kv_dtype", ["fp16", "bf16"])
def test_batched_numpy_kernel_equals_reference(kv_dtype: str) -> None:
    rng = np.random.default_rng(7)
    lens = [5, 16, 17, 100, 1, 33, 0, 64]
    case = make_paged_case(rng, lens, 8, 2, 64, 16, kv_dtype=kv_dtype)
    args = (case.q, case.k_cache, case.v_cache, case.block_tables, case.context_lens)
    fast = numpy_decode_attention(*args)
    assert np.isfinite(fast).all(), "NaN poison leaked into the batched kernel"
    np.testing.assert_allclose(fast, reference_decode_attention(*args), rtol=1e-5, atol=1e-6)


def test_unmapped_table_entries_are_never_dereferenced() -> None:
    """Entries past a sequence's last block may be garbage: indexing them would raise here."""
    rng = np.random.default_rng(3)
    case = make_paged_case(rng, [9, 40, 16], 4, 2, 64, 16, extra_table_entries=3)
    tables = case.block_tables.copy()
    for s, length in enumerate(case.context_lens):
        tables[s, -(-int(length) // 16) :] = 10**9  # far outside the pool
    args = (case.q, case.k_cache, case.v_cache, tables, case.context_lens)
    ref = reference_decode_attention(*args)
    np.testing.assert_allclose(numpy_decode_attention(*args), ref, rtol=1e-5, atol=1e-6)
    assert _rel_err(ref, _dense_truth(case)) < 1e-5


def test_gather_walks_the_shuffled_table() -> None:
    rng = np.random.default_rng(11)
    case = make_paged_case(rng, [37, 8], 2, 2, 64, 8)
    physical = case.block_tables[0, :5]
    assert len(set(physical.tolist())) == 5
    assert list(physical) != sorted(physical), "blocks are shuffled, not laid out in order"
    k, v = gather_sequence(case.k_cache, case.v_cache, case.block_tables[0], 37)
    np.testing.assert_array_equal(k, case.dense_k[0])
    np.testing.assert_array_equal(v, case.dense_v[0])


def test_prefill_row_i_is_decode_over_the_first_i_plus_one_tokens() -> None:
    rng = np.random.default_rng(5)
    num_seqs, length, heads, kv_heads, dim = 2, 19, 6, 2, 64
    q = rng.standard_normal((num_seqs, length, heads, dim), dtype=np.float32)
    k = rng.standard_normal((num_seqs, length, kv_heads, dim), dtype=np.float32)
    v = rng.standard_normal((num_seqs, length, kv_heads, dim), dtype=np.float32)
    out = numpy_prefill_attention(q, k, v)
    for s in range(num_seqs):
        for i in (0, 1, 7, length - 1):
            expected = dense_attention(q[s, i], k[s, : i + 1], v[s, : i + 1])
            np.testing.assert_allclose(out[s, i], expected, rtol=1e-4, atol=1e-5)


def test_bf16_rounds_to_nearest_even_and_keeps_nan() -> None:
    x = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, -2.5, 0.0, np.nan, 3e38], dtype=np.float32)
    back = bf16_bits_to_float(float_to_bf16_bits(x))
    np.testing.assert_array_equal(back[:5], [1.0, 1.0, 1 + 4 * 2**-8, -2.5, 0.0])
    assert np.isnan(back[5])
    assert abs(back[6] - 3e38) / 3e38 < 2**-8


@settings(max_examples=25, deadline=None)
@given(
    lens=st.lists(st.integers(min_value=0, max_value=80), min_size=1, max_size=6),
    group=st.sampled_from([1, 2, 4]),
    block_size=st.sampled_from([8, 16, 32]),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_any_ragged_batch_matches_dense(
    lens: list[int], group: int, block_size: int, seed: int
) -> None:
    case = make_paged_case(np.random.default_rng(seed), lens, 2 * group, 2, 64, block_size)
    args = (case.q, case.k_cache, case.v_cache, case.block_tables, case.context_lens)
    fast = numpy_decode_attention(*args)
    assert np.isfinite(fast).all()
    truth = _dense_truth(case)
    assert np.abs(fast - truth).max() < 1e-4

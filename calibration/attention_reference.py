"""NumPy attention: a slow reference that walks the block table, and the CPU backend's kernels.

Layouts are those of kernels/paged_attention.cu:

    q             [num_seqs, num_heads, head_dim]
    k/v_cache     [num_blocks, num_kv_heads, block_size, head_dim]
    block_tables  int32 [num_seqs, max_blocks_per_seq]; entry i holds tokens [i*B, (i+1)*B)
    context_lens  int32 [num_seqs]

16-bit elements are float16, or bfloat16 carried as raw uint16 bits (NumPy has no bfloat16).
All math is float32 (`dense_attention`, for tests, is float64). Query head h reads KV head
h // (num_heads / num_kv_heads). A context of 0 tokens gives a zero output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def float_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), rounding to nearest even; NaN stays NaN."""
    f = np.ascontiguousarray(x, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    rounded[np.isnan(f)] = 0x7FC0
    return rounded


def bf16_bits_to_float(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) -> float32 (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def to_float32(array: np.ndarray) -> np.ndarray:
    """float16 or bfloat16-bits (uint16) -> float32."""
    if array.dtype == np.uint16:
        return bf16_bits_to_float(array)
    return np.asarray(array, dtype=np.float32)


def from_float32(array: np.ndarray, kv_dtype: str) -> np.ndarray:
    """float32 -> the storage dtype of `kv_dtype` ("fp16": float16, "bf16": uint16 bits)."""
    if kv_dtype == "bf16":
        return float_to_bf16_bits(array)
    return np.asarray(array, dtype=np.float16)


def gather_sequence(
    k_cache: np.ndarray, v_cache: np.ndarray, table_row: np.ndarray, context_len: int
) -> tuple[np.ndarray, np.ndarray]:
    """K and V of one sequence, [context_len, num_kv_heads, head_dim] float32, walking its table.

    Token t lives in physical block table_row[t // B], slot t % B; nothing past context_len and
    no table entry past ceil(context_len / B) is touched.
    """
    block_size = k_cache.shape[2]
    tokens = np.arange(context_len)
    blocks = np.asarray(table_row)[tokens // block_size]
    slots = tokens % block_size
    return to_float32(k_cache[blocks, :, slots]), to_float32(v_cache[blocks, :, slots])


def reference_decode_attention(
    q: np.ndarray,
    k_cache: np.ndarray,
    v_cache: np.ndarray,
    block_tables: np.ndarray,
    context_lens: np.ndarray,
    scale: float | None = None,
) -> np.ndarray:
    """Slow reference, one sequence and one KV head at a time; float32 [num_seqs, num_heads, D]."""
    num_seqs, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    group = num_heads // num_kv_heads
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    qf = to_float32(q)
    out = np.zeros((num_seqs, num_heads, head_dim), dtype=np.float32)
    for s in range(num_seqs):
        length = int(context_lens[s])
        if length == 0:
            continue
        k, v = gather_sequence(k_cache, v_cache, block_tables[s], length)
        for kv_head in range(num_kv_heads):
            heads = slice(kv_head * group, (kv_head + 1) * group)
            scores = (qf[s, heads] @ k[:, kv_head].T) * np.float32(scale)  # [group, length]
            weights = np.exp(scores - scores.max(axis=1, keepdims=True))
            weights /= weights.sum(axis=1, keepdims=True)
            out[s, heads] = weights @ v[:, kv_head]
    return out


def dense_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float | None = None
) -> np.ndarray:
    """Softmax attention of one query token, float64: q [H, D], k/v [T, Hkv, D] -> [H, D]."""
    num_heads, head_dim = q.shape
    group = num_heads // k.shape[1]
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    k64 = np.repeat(np.asarray(k, np.float64), group, axis=1)  # [T, H, D]
    v64 = np.repeat(np.asarray(v, np.float64), group, axis=1)
    scores = np.einsum("hd,thd->ht", np.asarray(q, np.float64), k64) * scale
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    out: np.ndarray = np.einsum("ht,thd->hd", weights, v64)
    return out


def numpy_decode_attention(
    q: np.ndarray,
    k_cache: np.ndarray,
    v_cache: np.ndarray,
    block_tables: np.ndarray,
    context_lens: np.ndarray,
    scale: float | None = None,
) -> np.ndarray:
    """Batched decode attention (the CPU backend's "kernel"): gather, mask, two matmuls.

    Slots past a sequence's length are zeroed after the gather and their scores set to -inf, so
    whatever they hold (NaN included) never reaches the output. float32 [num_seqs, num_heads, D].
    """
    num_seqs, num_heads, head_dim = q.shape
    num_kv_heads, block_size = k_cache.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    lens = np.asarray(context_lens, dtype=np.int64)
    num_blocks = max(1, -(-int(lens.max()) // block_size))
    tokens = np.arange(num_blocks * block_size)
    valid = tokens[None, :] < lens[:, None]  # [S, T]
    used_block = np.arange(num_blocks)[None, :] < ((lens + block_size - 1) // block_size)[:, None]
    blocks = np.where(used_block, block_tables[:, :num_blocks], 0)[:, tokens // block_size]
    slots = tokens % block_size
    keep = valid[:, :, None, None]
    k = np.where(keep, to_float32(k_cache[blocks, :, slots[None, :]]), np.float32(0))
    v = np.where(keep, to_float32(v_cache[blocks, :, slots[None, :]]), np.float32(0))
    k = k.transpose(0, 2, 3, 1)  # [S, Hkv, D, T]
    v = v.transpose(0, 2, 1, 3)  # [S, Hkv, T, D]
    qf = to_float32(q).reshape(num_seqs, num_kv_heads, group, head_dim) * np.float32(scale)
    scores = np.where(valid[:, None, None, :], qf @ k, -np.inf)  # [S, Hkv, G, T]
    top = scores.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, np.float32(0))
    weights = np.exp(scores - top)
    total = weights.sum(axis=-1, keepdims=True)
    out: np.ndarray = (weights @ v) / np.where(total > 0, total, np.float32(1))
    return out.reshape(num_seqs, num_heads, head_dim).astype(np.float32)


def numpy_prefill_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float | None = None
) -> np.ndarray:
    """Causal attention of whole prompts (the CPU backend's prefill), float32.

    q [S, L, H, D], k/v [S, L, Hkv, D] -> [S, L, H, D].
    """
    num_seqs, length, num_heads, head_dim = q.shape
    num_kv_heads = k.shape[2]
    group = num_heads // num_kv_heads
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    qf = q.reshape(num_seqs, length, num_kv_heads, group, head_dim).transpose(0, 2, 3, 1, 4)
    kf = k.transpose(0, 2, 1, 3)[:, :, None]  # [S, Hkv, 1, L, D]
    vf = v.transpose(0, 2, 1, 3)[:, :, None]
    scores = (qf @ kf.swapaxes(-1, -2)) * np.float32(scale)  # [S, Hkv, G, L, L]
    future = np.triu(np.ones((length, length), dtype=bool), k=1)
    scores = np.where(future, -np.inf, scores)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    out: np.ndarray = weights @ vf  # [S, Hkv, G, L, D]
    return out.transpose(0, 3, 1, 2, 4).reshape(num_seqs, length, num_heads, head_dim)


@dataclass(frozen=True)
class PagedCase:
    """A decode-attention input with its dense truth, for tests and timing.

    `dense_k[s]`/`dense_v[s]` are [context_lens[s], num_kv_heads, head_dim] float32 (the exact
    values stored, after rounding to the 16-bit dtype).
    """

    q: np.ndarray
    k_cache: np.ndarray
    v_cache: np.ndarray
    block_tables: np.ndarray
    context_lens: np.ndarray
    dense_k: list[np.ndarray]
    dense_v: list[np.ndarray]
    kv_dtype: str
    poison_block: int | None  # a block of NaN that unused table entries point to


def make_paged_case(
    rng: np.random.Generator,
    context_lens: list[int] | np.ndarray,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    *,
    kv_dtype: str = "fp16",
    spare_blocks: int = 2,
    extra_table_entries: int = 1,
    poison: bool = True,
) -> PagedCase:
    """Random K/V scattered into a shuffled paged cache.

    Physical blocks are a random permutation, so neighbouring logical blocks are never adjacent.
    With `poison`, every slot no sequence uses (tails of last blocks, spare blocks) holds NaN, and
    every table entry past a sequence's last block points at a block full of NaN.
    """
    lens = np.asarray(context_lens, dtype=np.int32)
    blocks_per_seq = (lens + block_size - 1) // block_size
    num_blocks = int(blocks_per_seq.sum()) + spare_blocks + 1
    fill = np.float32(np.nan) if poison else np.float32(0)
    shape = (num_blocks, num_kv_heads, block_size, head_dim)
    k_cache = from_float32(np.full(shape, fill, np.float32), kv_dtype)
    v_cache = from_float32(np.full(shape, fill, np.float32), kv_dtype)
    if not poison:
        k_cache = from_float32(rng.standard_normal(shape, dtype=np.float32), kv_dtype)
        v_cache = from_float32(rng.standard_normal(shape, dtype=np.float32), kv_dtype)
    physical = rng.permutation(num_blocks).astype(np.int32)
    poison_block = int(physical[-1])
    row_len = int(blocks_per_seq.max(initial=0)) + extra_table_entries
    tables = np.full((len(lens), max(row_len, 1)), poison_block, dtype=np.int32)
    dense_k: list[np.ndarray] = []
    dense_v: list[np.ndarray] = []
    cursor = 0
    for s, length in enumerate(lens):
        n = int(blocks_per_seq[s])
        tables[s, :n] = physical[cursor : cursor + n]
        cursor += n
        k_store = from_float32(
            rng.standard_normal((int(length), num_kv_heads, head_dim), dtype=np.float32), kv_dtype
        )
        v_store = from_float32(
            rng.standard_normal((int(length), num_kv_heads, head_dim), dtype=np.float32), kv_dtype
        )
        tokens = np.arange(int(length))
        blocks = tables[s, tokens // block_size]
        k_cache[blocks, :, tokens % block_size] = k_store
        v_cache[blocks, :, tokens % block_size] = v_store
        dense_k.append(to_float32(k_store))
        dense_v.append(to_float32(v_store))
    q = from_float32(
        rng.standard_normal((len(lens), num_heads, head_dim), dtype=np.float32), kv_dtype
    )
    return PagedCase(
        q,
        k_cache,
        v_cache,
        tables,
        lens,
        dense_k,
        dense_v,
        kv_dtype,
        poison_block if poison else None,
    )

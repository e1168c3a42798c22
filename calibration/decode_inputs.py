"""Checks of a decode-attention call's arrays: shapes, dtypes, contiguity, alignment.

They run on any array with `.shape`, `.dtype` and `.flags` (NumPy or CuPy), so they are tested on
the CPU; `kernel.plan_decode_attention` calls them before anything is launched. Layouts are those
of kernels/paged_attention.cu (see calibration/kernel.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

HEAD_DIMS = (64, 128, 256)
BLOCK_SIZES = (8, 16, 32)
DTYPE_TAGS = {"fp16": 0, "bf16": 1}


@dataclass(frozen=True, slots=True)
class DecodeShape:
    num_seqs: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    block_size: int | None  # None: contiguous layout
    row_stride: int  # paged: block-table row length; contiguous: token slots per sequence
    num_blocks: int | None
    kv_dtype: str

    @property
    def max_context(self) -> int:
        """Most tokens a sequence can hold in this layout."""
        if self.block_size is None:
            return self.row_stride
        return self.row_stride * self.block_size


def _dtype_name(array: Any) -> str:
    name: str = np.dtype(array.dtype).name
    return name


def require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(f"decode attention: {message}")


def require_16_byte_aligned(name: str, array: Any) -> None:
    """The kernel reads q/K/V 16 bytes at a time: a view starting mid-vector would fault."""
    ptr = getattr(getattr(array, "data", None), "ptr", None)  # CuPy's device address
    if isinstance(ptr, int):
        require(ptr % 16 == 0, f"{name} must start on a 16-byte boundary, got address {ptr:#x}")


def check_decode_inputs(
    q: Any,
    k_cache: Any,
    v_cache: Any,
    context_lens: Any,
    block_tables: Any | None = None,
    kv_dtype: str | None = None,
) -> DecodeShape:
    """Shapes, dtypes and contiguity of a decode-attention call; ValueError naming the problem."""
    if kv_dtype is None:  # inferred from q: float16 is fp16; bfloat16 or its uint16 bits bf16
        inferred = {"float16": "fp16", "bfloat16": "bf16", "uint16": "bf16"}
        require(
            _dtype_name(q) in inferred,
            f"q must be float16 (fp16) or bfloat16 / uint16 bits (bf16), got {_dtype_name(q)}",
        )
        kv_dtype = inferred[_dtype_name(q)]
    require(
        kv_dtype in DTYPE_TAGS, f"kv_dtype must be one of {sorted(DTYPE_TAGS)}, got {kv_dtype!r}"
    )
    allowed = ("float16",) if kv_dtype == "fp16" else ("bfloat16", "uint16")
    for name, array in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        require(
            _dtype_name(array) in allowed,
            f"{name} must be {' or '.join(allowed)} for {kv_dtype}, got {_dtype_name(array)}",
        )
        require(bool(array.flags.c_contiguous), f"{name} must be C-contiguous")
        require_16_byte_aligned(name, array)
    require(q.ndim == 3, f"q must be [num_seqs, num_heads, head_dim], got shape {q.shape}")
    num_seqs, num_heads, head_dim = (int(x) for x in q.shape)
    require(head_dim in HEAD_DIMS, f"head_dim must be one of {HEAD_DIMS}, got {head_dim}")
    require(k_cache.ndim == 4, f"k_cache must be 4-D, got shape {k_cache.shape}")
    require(
        tuple(v_cache.shape) == tuple(k_cache.shape),
        f"v_cache shape {v_cache.shape} differs from k_cache shape {k_cache.shape}",
    )
    require(
        int(k_cache.shape[3]) == head_dim,
        f"k_cache head_dim {k_cache.shape[3]} differs from q's {head_dim}",
    )
    num_kv_heads = int(k_cache.shape[1])
    require(
        num_kv_heads >= 1 and num_heads % num_kv_heads == 0,
        f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})",
    )
    require(num_seqs >= 1, "at least one sequence")
    require(num_seqs <= 65535, f"at most 65535 sequences per call, got {num_seqs}")
    require(
        _dtype_name(context_lens) == "int32" and tuple(context_lens.shape) == (num_seqs,),
        f"context_lens must be int32 [{num_seqs}], got {_dtype_name(context_lens)} "
        f"{tuple(context_lens.shape)}",
    )
    require(bool(context_lens.flags.c_contiguous), "context_lens must be C-contiguous")
    if block_tables is None:  # contiguous baseline
        require(
            int(k_cache.shape[0]) == num_seqs,
            f"contiguous k_cache must be [num_seqs={num_seqs}, num_kv_heads, max_context, "
            f"head_dim], got {k_cache.shape}",
        )
        return DecodeShape(
            num_seqs, num_heads, num_kv_heads, head_dim, None, int(k_cache.shape[2]), None, kv_dtype
        )
    block_size = int(k_cache.shape[2])
    require(block_size in BLOCK_SIZES, f"block_size must be one of {BLOCK_SIZES}, got {block_size}")
    require(
        _dtype_name(block_tables) == "int32"
        and block_tables.ndim == 2
        and int(block_tables.shape[0]) == num_seqs,
        f"block_tables must be int32 [{num_seqs}, max_blocks_per_seq], got "
        f"{_dtype_name(block_tables)} {tuple(block_tables.shape)}",
    )
    require(bool(block_tables.flags.c_contiguous), "block_tables must be C-contiguous")
    return DecodeShape(
        num_seqs,
        num_heads,
        num_kv_heads,
        head_dim,
        block_size,
        int(block_tables.shape[1]),
        int(k_cache.shape[0]),
        kv_dtype,
    )

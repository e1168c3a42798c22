"""A decoder layer's work between its GEMMs, prepared for timing at a number of tokens.

The executor runs, per layer and step of T tokens, two residual-add + RMSNorm, SiLU-and-mul (or
ReLU), the write of the T new tokens' K and V into their cache slots and the gather of the
decoding rows' queries (forward.py). Calibration times these together at each GEMM token count
and adds them to the per-layer token curve as one more part ("elementwise"), so the profile
prices what the executor runs; the executor's fused GPU kernels are the ones timed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pagesim.calibration import layer_ops

if TYPE_CHECKING:
    from pagesim.calibration.shapes import LayerShapes, Prepared

FP16_BYTES = 2


def elementwise_bytes(shapes: LayerShapes, tokens: int) -> int:
    """Fewest bytes moved: each norm reads x and the residual and writes both and its output;
    the activation reads gate and up and writes one; K/V written; queries gathered."""
    hidden, ffn = shapes.hidden_size, shapes.intermediate_size
    q_out, kv_out = shapes.num_heads * shapes.head_dim, shapes.num_kv_heads * shapes.head_dim
    norms = 2 * 4 * tokens * hidden
    act = (3 if shapes.is_gated_mlp else 2) * tokens * ffn
    kv = 2 * 2 * tokens * kv_out
    gather = 2 * tokens * q_out
    return FP16_BYTES * (norms + act + kv + gather)


def _slots(
    tokens: int, block_size: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, int]:
    """(block, slot) of each new token in a shuffled pool, and the pool's size in blocks."""
    num_blocks = -(-tokens // block_size) + 1
    blocks = rng.permutation(num_blocks)[np.arange(tokens) // block_size]
    return blocks, np.arange(tokens) % block_size, num_blocks


def numpy_elementwise(
    shapes: LayerShapes, tokens: int, block_size: int, rng: np.random.Generator
) -> Prepared:
    """The NumPy executor's float32 versions (calibration/layer_ops.py)."""
    from pagesim.calibration.shapes import Prepared

    hidden, width = shapes.hidden_size, (2 if shapes.is_gated_mlp else 1) * shapes.intermediate_size
    q_out, kv_out = shapes.num_heads * shapes.head_dim, shapes.num_kv_heads * shapes.head_dim
    x = rng.standard_normal((tokens, hidden), dtype=np.float32)
    residual = rng.standard_normal((tokens, hidden), dtype=np.float32)
    weight = np.ones(hidden, dtype=np.float32)
    up = rng.standard_normal((tokens, width), dtype=np.float32)
    qkv = rng.standard_normal((tokens, q_out + 2 * kv_out), dtype=np.float32)
    blocks, offsets, num_blocks = _slots(tokens, block_size, rng)
    cache_shape = (num_blocks, shapes.num_kv_heads, block_size, shapes.head_dim)
    k_cache, v_cache = np.zeros(cache_shape, np.float16), np.zeros(cache_shape, np.float16)
    rows = np.arange(tokens)
    head = (tokens, shapes.num_kv_heads, shapes.head_dim)

    def run() -> object:
        h, r = layer_ops.add_rms_norm(x, residual, weight)
        h, r = layer_ops.add_rms_norm(h, r, weight)
        act = layer_ops.silu_mul(up) if shapes.is_gated_mlp else layer_ops.relu(up)
        k = qkv[:, q_out : q_out + kv_out].reshape(head)
        v = qkv[:, q_out + kv_out :].reshape(head)
        layer_ops.write_kv(k_cache, v_cache, k, v, blocks, offsets)
        return qkv[rows, :q_out], act

    return Prepared(run, elementwise_bytes(shapes, tokens), 0)


def cupy_elementwise(
    cupy: Any, shapes: LayerShapes, tokens: int, block_size: int, rng: np.random.Generator
) -> Prepared:
    """The GPU executor's fused kernels (kernels/layer_ops.cu) and its query gather."""
    from pagesim.calibration.kernel import _num_sms
    from pagesim.calibration.shapes import Prepared

    cp = cupy
    hidden, width = shapes.hidden_size, (2 if shapes.is_gated_mlp else 1) * shapes.intermediate_size
    q_out, kv_out = shapes.num_heads * shapes.head_dim, shapes.num_kv_heads * shapes.head_dim

    def random(shape: tuple[int, ...]) -> Any:
        return (cp.random.random(shape, dtype=cp.float32) * 2 - 1).astype(cp.float16)

    x, residual = random((tokens, hidden)), random((tokens, hidden))
    weight = cp.ones(hidden, dtype=cp.float16)
    up, qkv = random((tokens, width)), random((tokens, q_out + 2 * kv_out))
    blocks, offsets, num_blocks = _slots(tokens, block_size, rng)
    blocks_dev = cp.asarray(blocks.astype(np.int32))
    offsets_dev = cp.asarray(offsets.astype(np.int32))
    cache_shape = (num_blocks, shapes.num_kv_heads, block_size, shapes.head_dim)
    k_cache = cp.zeros(cache_shape, dtype=cp.float16)
    v_cache = cp.zeros(cache_shape, dtype=cp.float16)
    rows = cp.arange(tokens)
    q_view = qkv[:, :q_out].reshape(tokens, shapes.num_heads, shapes.head_dim)
    q_out_buffer = cp.empty((tokens, shapes.num_heads, shapes.head_dim), dtype=cp.float16)
    num_sms = _num_sms(cp.cuda.Device().id)

    def run() -> object:
        h = layer_ops.gpu_add_rms_norm(cp, x, residual, weight)
        layer_ops.gpu_add_rms_norm(cp, h, residual, weight)
        if shapes.is_gated_mlp:
            layer_ops.gpu_silu_mul(cp, up, num_sms)
        else:
            cp.maximum(up, 0)
        layer_ops.gpu_write_kv(
            k_cache, v_cache, qkv, blocks_dev, offsets_dev, q_out, q_out + kv_out
        )
        return cp.take(q_view, rows, axis=0, out=q_out_buffer)

    return Prepared(run, elementwise_bytes(shapes, tokens), 0)

"""A decoder layer's small operations: NumPy versions, and launchers of kernels/layer_ops.cu.

The executor runs, per layer, the pre-norm residual structure of Llama-family models:

    h = norm(x)                       (the first layer: residual = x)
    qkv = h @ W_qkv;  K/V -> cache;  attn = attention(q, cache)
    residual += attn @ W_o;  h = norm(residual)
    residual += act(h @ W_gate_up) @ W_down;  h = norm(residual)   (the next layer's input norm)

RMSNorm keeps every GEMM's input at unit RMS, so activations stay finite in fp16 however deep
the model (without it, gate * up squares the activations' scale every layer and 32 layers of
fp16 overflow or vanish). Norm weights are ones; eps is Llama's 1e-5 (config.json rms_norm_eps
of Llama-2-7B). The NumPy functions compute in float32 and round to the activations' dtype
after each operation, as the fp16 kernels do; the GPU tests compare the kernels with them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

RMS_NORM_EPS = 1e-5  # Llama-2-7B's config.json rms_norm_eps


def add_rms_norm(
    x: np.ndarray | None, residual: np.ndarray, weight: np.ndarray, eps: float = RMS_NORM_EPS
) -> tuple[np.ndarray, np.ndarray]:
    """(norm(residual + x) * weight, residual + x); with x None, the residual is not added to.

    residual, x [T, hidden] (the residual's dtype is kept); weight [hidden].
    """
    dtype = residual.dtype
    if x is not None:
        residual = (residual.astype(np.float32) + x.astype(np.float32)).astype(dtype)
    r = residual.astype(np.float32)
    inv_rms = 1.0 / np.sqrt(np.mean(r * r, axis=-1, keepdims=True) + np.float32(eps))
    return (r * inv_rms * weight.astype(np.float32)).astype(dtype), residual


def silu_mul(gate_up: np.ndarray) -> np.ndarray:
    """silu(gate) * up for gate_up = [gate | up] along the last axis: [T, 2F] -> [T, F]."""
    ffn = gate_up.shape[-1] // 2
    g = gate_up[:, :ffn].astype(np.float32)
    u = gate_up[:, ffn:].astype(np.float32)
    with np.errstate(over="ignore"):  # exp(-g) -> inf for very negative g gives silu -> -0
        out: np.ndarray = g / (np.float32(1) + np.exp(-g)) * u
    result: np.ndarray = out.astype(gate_up.dtype)
    return result


def relu(up: np.ndarray) -> np.ndarray:
    """The plain two-matrix MLP's activation (OPT)."""
    out: np.ndarray = np.maximum(up, 0)  # ufuncs are typed as returning Any
    return out


def write_kv(
    k_cache: np.ndarray,
    v_cache: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    slot_blocks: np.ndarray,
    slot_offsets: np.ndarray,
) -> None:
    """Token t's K/V [T, Hkv, D] into block slot_blocks[t], slot slot_offsets[t] of every head."""
    k_cache[slot_blocks, :, slot_offsets] = k
    v_cache[slot_blocks, :, slot_offsets] = v


def chunk_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    """Causal attention of a prefill chunk, float32: n queries (the last n of c positions) over
    c keys. q [n, H, D], k/v [c, Hkv, D] -> [n, H, D]; query head h reads KV head h // (H/Hkv)."""
    n, heads, head_dim = q.shape
    c, kv_heads = k.shape[0], k.shape[1]
    group = heads // kv_heads
    qf = q.astype(np.float32).reshape(n, kv_heads, group, head_dim).transpose(1, 2, 0, 3)
    kf = k.astype(np.float32).transpose(1, 0, 2)[:, None]  # [Hkv, 1, c, D]
    vf = v.astype(np.float32).transpose(1, 0, 2)[:, None]
    scores = (qf @ kf.swapaxes(-1, -2)) * np.float32(scale)  # [Hkv, G, n, c]
    future = np.arange(c)[None, :] > (np.arange(n)[:, None] + (c - n))
    scores = np.where(future, -np.inf, scores)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    out: np.ndarray = weights @ vf  # [Hkv, G, n, D]
    return out.transpose(2, 0, 1, 3).reshape(n, heads, head_dim)


# -- the GPU kernels (kernels/layer_ops.cu), fp16 -----------------------------------------------


def gpu_add_rms_norm(
    cupy: Any, x: Any, residual: Any, weight: Any, *, add: bool = True, eps: float = RMS_NORM_EPS
) -> Any:
    """residual += x (add) or residual = x (not add), in place; returns norm(residual) * weight.

    x, residual [T, hidden] fp16, C-contiguous; weight [hidden]. One launch.
    """
    from pagesim.calibration.kernel import layer_ops_kernel

    rows, hidden = residual.shape
    out = cupy.empty_like(residual)
    args = (out, residual, x, weight, np.int32(hidden), np.int32(add), np.float32(eps))
    layer_ops_kernel("pagesim_add_rms_norm")((rows, 1, 1), (256, 1, 1), args)
    return out


def gpu_silu_mul(cupy: Any, gate_up: Any, num_sms: int) -> Any:
    """silu(gate) * up: [T, 2F] -> [T, F] (one launch)."""
    from pagesim.calibration.kernel import layer_ops_kernel

    rows, width = gate_up.shape
    ffn = width // 2
    out = cupy.empty((rows, ffn), dtype=gate_up.dtype)
    total = rows * ffn
    grid = (max(1, min(4 * num_sms, -(-total // 256))), 1, 1)
    args = (out, gate_up, np.int32(ffn), np.int64(total))
    layer_ops_kernel("pagesim_silu_mul")(grid, (256, 1, 1), args)
    return out


def gpu_write_kv(
    k_cache: Any,
    v_cache: Any,
    qkv: Any,
    slot_blocks: Any,
    slot_offsets: Any,
    k_col: int,
    v_col: int,
) -> None:
    """K/V columns of each token's qkv row into its cache slot (one launch).

    k/v_cache [num_blocks, Hkv, B, D] fp16; qkv [T, width] fp16, C-contiguous; slot_* int32 [T].
    """
    from pagesim.calibration.kernel import layer_ops_kernel

    num_tokens, width = qkv.shape
    _, num_kv_heads, block_size, head_dim = k_cache.shape
    args = (
        k_cache,
        v_cache,
        qkv,
        slot_blocks,
        slot_offsets,
        np.int32(width),
        np.int32(k_col),
        np.int32(v_col),
        np.int32(num_kv_heads),
        np.int32(block_size),
        np.int32(head_dim),
    )
    layer_ops_kernel("pagesim_write_kv")((num_tokens, 1, 1), (128, 1, 1), args)

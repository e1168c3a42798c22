"""The roofline's per-layer terms, written once for the simulator (floats, one step at a time) and
for the fit to measurements (NumPy arrays, every measured row at once): only + - * / and abs, so
both work.

One decoder layer on one GPU under t-way tensor parallelism, T tokens in the step (times in s):

    linear     = per GEMM (QKV, O, gate+up, down; execution/gemm.py):
                 slower(c, m) + overlap * faster(c, m) + launch
                 c = 2 T K N / (peak * gemm_eff) x tile/wave quantization,
                 m = (K N + T (K + N)) * 2 B / (bw * weight_eff)
    small ops  = small_ops_layer_s + T * S / (bw * small_ops_eff)     (2 norms, rotary, act, add)
    all-reduce = 2 calls * (latency + 2 (t-1)/t * T * hidden * 2 B / bus bw)       (t > 1)
                 (messages <= 4 MiB on a measured link: the measured medians, allreduce_call_s;
                 they fall with size in places, as NCCL's measured regimes do)
    decode attention  = attention_layer_s + D * attention_seq_s + KV bytes read / (bw * attn_eff)
    prefill attention = attention_prefill_layer_s + n * heads/t * attention_token_s
                        + n (c - n) * P / (peak * attention_flops_eff)          (cached context)
                        + n (n + 1) / 2 * P / (peak * attention_causal_eff)     (causal triangle)

F, W, A, S, P (FLOPs per pair) are the shapes below; a chunk of n new tokens over c - n cached
ones. FlashAttention runs the cached part in whole tiles and the causal part in half-empty tiles
on the diagonal: measured, the second is about half as efficient (Vidur's A100 attention file).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pagesim.simulator.core.catalog import ModelSpec
from pagesim.simulator.core.hardware import ALLREDUCE_KNOT_BYTES, Interconnect

WEIGHT_BYTES = 2  # fp16/bf16 weights
ACTIVATION_BYTES = 2  # fp16/bf16 activations
GEMMS_PER_LAYER = 4  # QKV, output projection, MLP gate+up (or up), MLP down: each fused
ALLREDUCES_PER_LAYER = 2  # after attention and after the MLP (Megatron-style tensor parallelism)

# The paged kernel's work per KV block beyond its KV (kernels/paged_attention.cu), the block term
# of roofline.py: each CTA (one per KV head and tile of query heads, per sequence) reads the
# block's table entry and starts a new contiguous run in K and in V.
BLOCK_TABLE_ENTRY_BYTES = 4  # one int32 per block per CTA (kernels/paged_attention.cu)
BLOCK_RUN_START_BYTES = 2 * 32  # estimate: one 32-byte sector each in K and in V per block
KERNEL_HEADS_PER_CTA = 8  # the kernel's tile of query heads sharing one KV head


def block_overhead_bytes(model: ModelSpec, tensor_parallel: int) -> int:
    """Bytes one GPU's paged kernel reads per KV block per layer beyond the block's KV: its CTAs
    (a KV head's query heads in tiles of KERNEL_HEADS_PER_CTA) times the table entry (exact) and
    a run's start in K and in V, one 32-byte DRAM sector each (an **estimate**, not measured:
    pagesim's kernel has not been timed across block sizes yet). A partial last block costs a
    lookup, not bytes: the kernel clamps to the last token."""
    if model.mla is None:
        group = max(1, model.num_heads // model.num_kv_heads)
        ctas = model.kv_heads_per_gpu(tensor_parallel) * -(-group // KERNEL_HEADS_PER_CTA)
    else:  # one latent "KV head" shared by the GPU's query heads (an estimate)
        ctas = -(-max(1, model.num_heads // tensor_parallel) // KERNEL_HEADS_PER_CTA)
    return ctas * (BLOCK_TABLE_ENTRY_BYTES + BLOCK_RUN_START_BYTES)


# The helpers below take and return a float or a NumPy array of floats (`Any`: either works).
Number = Any


@dataclass(frozen=True, slots=True)
class LayerShapes:
    """Per-GPU sizes of one decoder layer under t-way tensor parallelism."""

    gemm_flops_per_token: float  # 2 FLOPs per multiply-add, the four GEMMs
    gemm_weight_bytes: float  # weights each GEMM streams once per step
    gemm_act_bytes_per_token: float  # each GEMM reads its input and writes its output once
    small_ops_bytes_per_token: float
    allreduce_bytes_per_token: float  # one call's message: the hidden state, 16-bit
    attention_flops_per_pair: float  # QK^T and PV, per (query, key) pair
    tensor_parallel: int

    @classmethod
    def of(cls, model: ModelSpec, tensor_parallel: int) -> LayerShapes:
        t = tensor_parallel
        hidden = model.hidden_size
        q_out = model.num_heads * model.head_dim
        kv_out = model.num_kv_heads * model.head_dim
        ffn = model.intermediate_size / t
        up = 2 if model.is_gated_mlp else 1
        act_elems = (
            (hidden + (q_out + 2 * kv_out) / t)  # QKV (column-parallel)
            + (q_out / t + hidden)  # output projection (row-parallel)
            + (hidden + up * ffn)  # MLP gate+up (column-parallel)
            + (ffn + hidden)  # MLP down (row-parallel)
        )
        # Elementwise work per token: two RMSNorms (read + write the hidden state), rotary on
        # q and k, SiLU-and-multiply (read gate and up, write one), the residual add (2 in, 1 out).
        small_elems = 2 * 2 * hidden + 2 * (q_out + kv_out) / t + (up + 1) * ffn + 3 * hidden
        return cls(
            gemm_flops_per_token=2 * model.params_per_layer / t,
            gemm_weight_bytes=model.params_per_layer * WEIGHT_BYTES / t,
            gemm_act_bytes_per_token=act_elems * ACTIVATION_BYTES,
            small_ops_bytes_per_token=small_elems * ACTIVATION_BYTES,
            allreduce_bytes_per_token=hidden * ACTIVATION_BYTES,
            attention_flops_per_pair=4 * (model.num_heads / t) * model.head_dim,
            tensor_parallel=t,
        )


def overlapped(compute_s: Number, memory_s: Number, overlap: float) -> Number:
    """max(c, m) + overlap * min(c, m): the slower of the two plus the share of the faster that
    does not hide under it (0: a perfect roofline; 1: no overlap at all)."""
    total = compute_s + memory_s
    gap = abs(compute_s - memory_s)
    return 0.5 * ((1 + overlap) * total + (1 - overlap) * gap)


_LOG_KNOTS = np.log(ALLREDUCE_KNOT_BYTES)  # where allreduce_call_s interpolates


def allreduce_call_s(message_bytes: Number, tensor_parallel: int, link: Interconnect) -> Number:
    """One ring all-reduce of `message_bytes` over `tensor_parallel` GPUs (0 when t = 1): the
    link's measured medians up to its last knot (log-size interpolation, flat below the first),
    `latency + ring bytes / bus bw` above it (at least the last knot) or where nothing was
    measured. Up to the last knot the measured medians are followed where they fall with size
    (NCCL's size regimes: core/presets/interconnects.toml), so a larger message may cost less
    there; the curve above, and the formula, are non-decreasing in the message."""
    if tensor_parallel <= 1:
        return 0.0 * message_bytes
    ring = 2 * (tensor_parallel - 1) / tensor_parallel
    formula = link.allreduce_latency_s + ring * message_bytes / link.allreduce_bw_bps
    if not link.small_s:
        return formula
    if not isinstance(message_bytes, np.ndarray):  # one message (the simulator): no arrays
        # made of the scalars (~40x faster); the same operations as below, so the same floats
        # (test_allreduce.py compares the two)
        if message_bytes <= ALLREDUCE_KNOT_BYTES[-1]:
            at = np.log(max(message_bytes, 1.0))
            return float(np.interp(at, _LOG_KNOTS, link.small_s))
        return max(formula, link.small_s[-1])
    measured = np.interp(np.log(np.maximum(message_bytes, 1.0)), _LOG_KNOTS, link.small_s)
    # Above the knots the curve, never below the last knot (no step down where the measured
    # table ends).
    return np.where(
        message_bytes <= ALLREDUCE_KNOT_BYTES[-1], measured, np.maximum(formula, link.small_s[-1])
    )


def prefill_pairs(num_new: Number, context: Number) -> Number:
    """Causal (query, key) pairs of a chunk of n new tokens after c - n cached ones:
    n (c - n) + n (n + 1) / 2."""
    return num_new * context - num_new * (num_new - 1) / 2


@dataclass(frozen=True, slots=True)
class MLAShapes:
    """Multi-head latent attention (DeepSeek-V2/V3) on one GPU, per layer, h = heads / t.

    Decode runs the absorbed form (DeepSeek-V2 paper, arXiv 2405.04434, section 2.1.2: W_UK is
    absorbed into the query, W_UV into the output; vLLM's MLA backend, vllm/v1/attention/
    backends/mla/common.py, decodes so): every query head attends over the cached latent of
    r = kv_lora_rank plus the shared RoPE key of p = qk_rope_head_dim, so per (query, key) pair
    QK^T costs 2 (r + p) and PV 2 r FLOPs per head, and the step reads each sequence's latent
    cache once (r + p elements per token per layer, what the KV cache holds). The absorbed
    projections cost per token what kv_b_proj does (r x h x (nope + v) multiply-adds), priced
    with the linear layers.

    Prefill runs the non-absorbed form (same file: "compute-friendly" for prefill): K and V are
    up-projected from the latent for every context token — new tokens through kv_b_proj with
    the linear layers, cached ones here (2 r h (nope + v) FLOPs each per layer) — and attention
    is per head over qk = nope + p dims for QK^T and v dims for PV: 2 (qk + v) FLOPs per pair.
    """

    decode_flops_per_pair: float
    prefill_flops_per_pair: float
    upproject_flops_per_cached_token: float

    @classmethod
    def of(cls, model: ModelSpec, tensor_parallel: int) -> MLAShapes:
        mla = model.mla
        assert mla is not None
        heads = model.num_heads / tensor_parallel
        r, p = mla.kv_lora_rank, mla.qk_rope_head_dim
        qk = mla.qk_nope_head_dim + p
        kv_up = r * heads * (mla.qk_nope_head_dim + mla.v_head_dim)
        return cls(
            decode_flops_per_pair=2 * (2 * r + p) * heads,
            prefill_flops_per_pair=2 * (qk + mla.v_head_dim) * heads,
            upproject_flops_per_cached_token=2 * kv_up,
        )

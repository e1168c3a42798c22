"""The linear layers' cost GEMM by GEMM, with the tile and wave quantization real kernels show.

A tiled GEMM of M tokens against a K x N weight (M x K @ K x N) computes whole output tiles of
`tile_m` x `tile_n` and runs them in waves of one tile per SM. Vidur's per-operator files show
both steps: on H100, Llama-2-70B's layer costs 1.17 ms at 464-512 tokens and 2.07 ms at 536
(mlp.csv, TP 1); on A100 its time climbs in stairs every 128 tokens (256 -> 264: 2.12 -> 2.94 ms).
A smooth curve fitted over every token count averages these stairs, so it overprices the counts
that fill the tiles and waves exactly (powers of two, the usual batch and chunk sizes). Here:

    compute  = 2 M K N / (peak x gemm_eff) x pad(M) x waves(M, N)
    pad(M)   = ceil(M / tile_m) tile_m / M  where M > tile_m, else 1 (a short M runs a short tile)
    waves    = ceil(tiles / SMs) SMs / tiles where tiles >= SMs, else 1 (fewer tiles than SMs:
               the library splits K to fill the GPU), tiles = ceil(M / tile_m) ceil(N / tile_n)
    memory   = (K N + M (K + N)) x 2 B / (bw x weight_eff)
    time     = max(c, m) + overlap x min(c, m)                      (roofline_terms.overlapped)

`gemm_num_sms = 0` turns the quantization off (the smooth roofline). A model whose layers are
not the dense four GEMMs (MoE, MLA, state layers) is priced as one lumped GEMM of its
active parameters (LayerShapes), without quantization: its experts' shapes are not modelled here.
The tile is one per GPU, chosen by the fit among a few common CUTLASS/cuBLAS tiles
(calibration/roofline_fit.py): real libraries pick per shape, so this is a model of the stairs'
period, not of any one kernel.
Works on floats (the simulator) and on NumPy arrays (the fit).
"""

from __future__ import annotations

import math

import numpy as np

from pagesim.simulator.core.catalog import ModelSpec
from pagesim.simulator.core.hardware import RooflineFactors
from pagesim.simulator.core.model_spec import LayerKind
from pagesim.simulator.execution.roofline_terms import (
    ACTIVATION_BYTES,
    WEIGHT_BYTES,
    LayerShapes,
    Number,
    overlapped,
)


def is_dense(model: ModelSpec) -> bool:
    """Whether every layer is attention + a dense MLP: the four GEMMs of `gemm_dims` (a
    sliding-window layer's projections are a full layer's; a state layer's are not)."""
    return model.moe is None and model.mla is None and LayerKind.STATE not in model.layer_kinds


def gemm_dims(model: ModelSpec, tensor_parallel: int) -> tuple[tuple[float, float], ...]:
    """(K, N) of the four GEMMs of one decoder layer on one GPU: QKV and gate+up split N
    (column-parallel), the output projection and down split K (row-parallel)."""
    t = tensor_parallel
    hidden = model.hidden_size
    q_out = model.num_heads * model.head_dim
    kv_out = model.num_kv_heads * model.head_dim
    ffn = model.intermediate_size / t
    up = 2 if model.is_gated_mlp else 1
    return (
        (hidden, (q_out + 2 * kv_out) / t),
        (q_out / t, hidden),
        (hidden, up * ffn),
        (ffn, hidden),
    )


def quantization(num_tokens: Number, n: Number, factors: RooflineFactors) -> Number:
    """pad(M) x waves(M, N) of the module docstring: >= 1, the share of issued tile work that
    is real; 1 when `gemm_num_sms` is 0."""
    sms = factors.gemm_num_sms
    if not sms:
        return 1.0 + 0.0 * num_tokens
    tile_m, tile_n = factors.gemm_tile_m, factors.gemm_tile_n
    if not isinstance(num_tokens, np.ndarray) and not isinstance(n, np.ndarray):
        # One GEMM (the simulator, a prefill's token count at a time): the same operations on
        # Python floats, ~10x faster than on NumPy scalars. ceil of a float below 2**53 is exact
        # either way, so every finite value is the array path's (test_gemm.py compares the two;
        # an infinite or NaN count raises here, where arrays would give NaN).
        m_tiles_s = float(math.ceil(num_tokens / tile_m))
        pad_s = m_tiles_s * tile_m / num_tokens if num_tokens > tile_m else 1.0
        tiles_s = m_tiles_s * float(math.ceil(n / tile_n))
        if tiles_s < sms:  # fewer than SMs: split K, no loss
            tiles_s = float(sms)
        return pad_s * float(math.ceil(tiles_s / sms)) * sms / tiles_s
    m_tiles = np.ceil(num_tokens / tile_m)
    pad = np.where(num_tokens > tile_m, m_tiles * tile_m / num_tokens, 1.0)
    tiles = np.maximum(m_tiles * np.ceil(n / tile_n), sms)  # fewer than SMs: split K, no loss
    return pad * np.ceil(tiles / sms) * sms / tiles


def gemm_time_s(
    num_tokens: Number,
    k: Number,
    n: Number,
    peak_flops: float,
    bandwidth_bps: float,
    factors: RooflineFactors,
) -> Number:
    """One GEMM of `num_tokens` rows against a k x n weight, without its launch cost."""
    compute_s = (2 * num_tokens * k * n / (peak_flops * factors.gemm_efficiency)) * quantization(
        num_tokens, n, factors
    )
    memory_s = (k * n * WEIGHT_BYTES + num_tokens * (k + n) * ACTIVATION_BYTES) / (
        bandwidth_bps * factors.weight_bw_efficiency
    )
    return overlapped(compute_s, memory_s, factors.gemm_overlap)


class LinearCost:
    """Seconds of the linear layers (all layers) and of the LM head for a step, cached by count
    (the simulator prices the same token counts over and over)."""

    def __init__(
        self,
        model: ModelSpec,
        tensor_parallel: int,
        peak_flops: float,
        bandwidth_bps: float,
        factors: RooflineFactors,
    ) -> None:
        self._dims = gemm_dims(model, tensor_parallel) if is_dense(model) else ()
        self._lumped = LayerShapes.of(model, tensor_parallel)
        self._lm_dims = (model.hidden_size, model.vocab_size / tensor_parallel)
        self._num_layers = model.num_layers
        self._peak, self._bw, self._factors = peak_flops, bandwidth_bps, factors
        self._layers: dict[int, float] = {}
        self._lm_head: dict[int, float] = {}

    def layers_s(self, num_tokens: int) -> float:
        """Every decoder layer's four GEMMs at `num_tokens` tokens (launches not included)."""
        found = self._layers.get(num_tokens)
        if found is None:
            f = self._factors
            if self._dims:
                one = sum(
                    gemm_time_s(num_tokens, k, n, self._peak, self._bw, f) for k, n in self._dims
                )
            else:  # one lumped GEMM of the active parameters (module docstring)
                s = self._lumped
                compute_s = num_tokens * s.gemm_flops_per_token / (self._peak * f.gemm_efficiency)
                memory_s = (s.gemm_weight_bytes + num_tokens * s.gemm_act_bytes_per_token) / (
                    self._bw * f.weight_bw_efficiency
                )
                one = overlapped(compute_s, memory_s, f.gemm_overlap)
            found = self._layers[num_tokens] = self._num_layers * float(one)
        return found

    def lm_head_s(self, num_seqs: int) -> float:
        """The LM head (one GEMM of `num_seqs` rows; launch not included)."""
        found = self._lm_head.get(num_seqs)
        if found is None:
            k, n = self._lm_dims
            found = float(gemm_time_s(num_seqs, k, n, self._peak, self._bw, self._factors))
            self._lm_head[num_seqs] = found
        return found

"""`pagesim calibrate fit-roofline`: the roofline's per-GPU factors and interconnects, fitted to
Vidur's measurements, reproducibly (same files, same numbers).

- Linear layers (gemm_efficiency, weight_bw_efficiency, gemm_overlap, gemm_launch_s and the GEMM
  tile): GEMM by GEMM (simulator/execution/gemm.py: tile and wave quantization over the chip's
  SMs), Nelder-Mead on the squared log error of a layer's measured time (linear + small
  operators + its two measured all-reduces), every model and TP of the GPU, 1 to 8192 tokens: the
  linear layers are fitted where they matter to a step, not to microsecond GEMMs beside a slower
  all-reduce. Once per tile of GEMM_TILES (and once without quantization); the tile whose fit is
  best over all those rows wins (a model choice made on every row, not on the error table's grid).
- Small operators: `a + bytes / (bw x eff)` per layer, least squares in relative error.
- Attention, where measured (Llama-2-70B at TP 2 on A100): decode `a + D x seq_s + KV bytes /
  (bw x eff)`; prefill `a + FA pairs x FLOPs / (peak x eff)`, a shared with decode.
- All-reduce per node (calibration/allreduce_fit.py): per GPU count the measured medians at
  half-octave knots up to 4 MiB and `latency + ring bytes / bus bw` fitted above; one curve over
  all counts and sizes for other counts.

The figures in simulator/core/presets/roofline_factors.toml and interconnects.toml are this
module's output, rounded (`constants_text` writes them as those files do).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from pagesim.calibration.allreduce_fit import fit_interconnect, measured_allreduce_s
from pagesim.calibration.fit import fit_nonnegative
from pagesim.calibration.minimize import nelder_mead
from pagesim.calibration.outputs import write_out
from pagesim.calibration.vidur_csv import (
    LINEAR_OPS,
    SMALL_OPS,
    AttentionTable,
    CollectiveTable,
    OperatorTable,
    op_sum,
    read_all_reduce,
    read_attention,
    read_operators,
)
from pagesim.calibration.vidur_layout import VIDUR_GPUS, VIDUR_MEASURED, vidur_files, vidur_gpu
from pagesim.simulator.core.catalog import GPUSpec, ModelSpec, get_gpu, get_model
from pagesim.simulator.core.hardware import Interconnect, RooflineFactors
from pagesim.simulator.core.preset_files import shipped_presets
from pagesim.simulator.core.preset_writer import field_table, interconnect_table
from pagesim.simulator.core.toml_text import toml_document
from pagesim.simulator.execution.gemm import gemm_dims, gemm_time_s
from pagesim.simulator.execution.roofline_terms import GEMMS_PER_LAYER, LayerShapes

MAX_FIT_TOKENS = 8192
# SMs per chip, the wave a GEMM's tiles fill: NVIDIA's A100 architecture whitepaper (108 SMs on
# A100), H100 architecture whitepaper (132 SMs on H100 SXM5), A40 datasheet (10,752 CUDA cores,
# 128 per GA102 SM: 84 SMs).
NUM_SMS = {"a100-80gb": 108, "h100-sxm": 132, "a40": 84}
# Output tiles the fit chooses among (tokens x features; (0, 0): no quantization, a smooth curve),
# common CUTLASS / cuBLAS tensor-core tiles.
GEMM_TILES = ((0, 0), (64, 128), (128, 128), (128, 256), (256, 128))


@dataclass(frozen=True)
class GpuMeasurements:
    """Everything Vidur measured on one GPU, read and checked."""

    gpu: GPUSpec
    operators: list[tuple[ModelSpec, OperatorTable]]
    attention: list[tuple[ModelSpec, AttentionTable]]
    all_reduce: CollectiveTable | None


def read_gpu_measurements(
    root: Path, gpu_name: str, models: Sequence[str] | None = None
) -> GpuMeasurements:
    """Every model's measurements on `gpu_name` (default: every model Vidur published for it,
    each file required: vidur_layout.vidur_files names a missing one)."""
    gpu = get_gpu(gpu_name)
    vidur_gpu(gpu_name)  # one Vidur measured (InputError otherwise)
    operators, attention = [], []
    all_reduce = None
    for model_name in VIDUR_MEASURED[gpu.name] if models is None else models:
        files = vidur_files(root, gpu_name, model_name, 2, complete=models is None)
        model = get_model(model_name)
        operators.append((model, read_operators(files.operators, model)))
        if files.attention is not None:
            attention.append((model, read_attention(files.attention, model, 2)))
        if files.all_reduce is not None and all_reduce is None:
            all_reduce = read_all_reduce(files.all_reduce)
    return GpuMeasurements(gpu, operators, attention, all_reduce)


@dataclass(frozen=True)
class LayerRows:
    """One row per (model, tp, tokens) measured: the roofline's inputs and the measured times."""

    model: np.ndarray  # names
    tokens: np.ndarray
    tensor_parallel: np.ndarray
    gemms: np.ndarray  # [rows, 4 GEMMs, (K, N)]
    flops: np.ndarray
    bytes_: np.ndarray
    small_bytes: np.ndarray
    linear_s: np.ndarray
    linear_std_s: np.ndarray
    small_s: np.ndarray
    allreduce_s: np.ndarray  # two measured calls (0 at t = 1 or where not measured)


def layer_rows(data: GpuMeasurements, max_tokens: int = MAX_FIT_TOKENS) -> LayerRows:
    parts: dict[str, list[np.ndarray]] = {k: [] for k in LayerRows.__dataclass_fields__}
    for model, table in data.operators:
        keep = table.tokens <= max_tokens
        tokens, tps = table.tokens[keep], table.tensor_parallel[keep]
        shapes = {t: LayerShapes.of(model, int(t)) for t in set(tps.tolist())}
        parts["model"].append(np.full(len(tokens), model.name))
        parts["tokens"].append(tokens.astype(float))
        parts["tensor_parallel"].append(tps)
        dims = {t: np.array(gemm_dims(model, int(t))) for t in set(tps.tolist())}
        parts["gemms"].append(np.array([dims[t] for t in tps]).reshape(len(tps), -1, 2))
        parts["flops"].append(np.array([shapes[t].gemm_flops_per_token for t in tps]) * tokens)
        parts["bytes_"].append(
            np.array(
                [
                    shapes[t].gemm_weight_bytes + n * shapes[t].gemm_act_bytes_per_token
                    for t, n in zip(tps, tokens, strict=True)
                ]
            )
        )
        parts["small_bytes"].append(
            np.array([shapes[t].small_ops_bytes_per_token for t in tps]) * tokens
        )
        parts["linear_s"].append(op_sum(table.median_s, LINEAR_OPS)[keep])
        parts["linear_std_s"].append(np.sqrt(op_sum(table.std_s, LINEAR_OPS, power=2))[keep])
        parts["small_s"].append(op_sum(table.median_s, SMALL_OPS)[keep])
        ar = data.all_reduce
        parts["allreduce_s"].append(
            np.array(
                [
                    2 * measured_allreduce_s(ar, int(t), n * model.hidden_size * 2)
                    if ar is not None and t > 1
                    else 0.0
                    for t, n in zip(tps, tokens, strict=True)
                ]
            )
        )
    joined = {k: np.concatenate(v) for k, v in parts.items()}
    joined["allreduce_s"] = np.nan_to_num(joined["allreduce_s"])
    return LayerRows(**joined)


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def _share(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def fit_linear(gpu: GPUSpec, rows: LayerRows, base: RooflineFactors) -> dict[str, Any]:
    """The GEMM factors, and the tile (of GEMM_TILES) whose fit is best over every row."""
    rest = rows.small_s + rows.allreduce_s
    measured = rows.linear_s + rest
    # Weights stream no faster than the fastest measured stream (a step of <= 8 tokens): the
    # overlap term would otherwise push the share to the datasheet's 100%.
    streaming = rows.tokens <= 8
    top = float(np.max(rows.bytes_[streaming] / rows.linear_s[streaming])) / gpu.mem_bandwidth_bps
    num_sms = NUM_SMS.get(gpu.name, 0)

    # Every half-octave of tokens weighs the same (per model and TP): the files measure large
    # token counts far more densely than small ones.
    octave = np.round(2 * np.log2(rows.tokens))
    groups = [
        f"{m}/{t}/{o}" for m, t, o in zip(rows.model, rows.tensor_parallel, octave, strict=True)
    ]
    _, inverse, counts = np.unique(groups, return_inverse=True, return_counts=True)
    weight = 1.0 / counts[inverse]

    def factors_of(x: np.ndarray, tile: tuple[int, int]) -> RooflineFactors:
        return replace(
            base,
            gemm_efficiency=_share(x[0]),
            weight_bw_efficiency=min(top, 1.0) * _share(x[1]),
            gemm_overlap=_share(x[2]),
            gemm_launch_s=math.exp(x[3]) * 1e-6,
            gemm_tile_m=tile[0],
            gemm_tile_n=tile[1],
            gemm_num_sms=num_sms if tile[0] else 0,
        )

    def predicted(f: RooflineFactors) -> np.ndarray:
        linear = sum(
            gemm_time_s(
                rows.tokens,
                rows.gemms[:, j, 0],
                rows.gemms[:, j, 1],
                gpu.fp16_flops,
                gpu.mem_bandwidth_bps,
                f,
            )
            for j in range(rows.gemms.shape[1])
        )
        return np.asarray(linear + GEMMS_PER_LAYER * f.gemm_launch_s)

    best: tuple[float, RooflineFactors] | None = None
    for tile in GEMM_TILES if num_sms else GEMM_TILES[:1]:

        def objective(x: np.ndarray, tile: tuple[int, int] = tile) -> float:
            f = factors_of(x, tile)
            return float(np.sum(weight * np.log((predicted(f) + rest) / measured) ** 2))

        start = np.array([_logit(0.7), _logit(0.8), _logit(0.3), math.log(5.0)])
        x, value = nelder_mead(objective, start)
        if best is None or value < best[0]:
            best = (value, factors_of(x, tile))
    assert best is not None
    f = best[1]
    return {
        "gemm_efficiency": f.gemm_efficiency,
        "weight_bw_efficiency": f.weight_bw_efficiency,
        "gemm_overlap": f.gemm_overlap,
        "gemm_launch_s": f.gemm_launch_s,
        "gemm_tile_m": f.gemm_tile_m,
        "gemm_tile_n": f.gemm_tile_n,
        "gemm_num_sms": f.gemm_num_sms,
    }


def fit_small_ops(gpu: GPUSpec, rows: LayerRows) -> dict[str, float]:
    features = np.stack([np.ones_like(rows.small_bytes), rows.small_bytes], axis=1)
    a, b = fit_nonnegative(features, rows.small_s)
    efficiency = 1.0 if b <= 0 else min(1.0, 1 / (b * gpu.mem_bandwidth_bps))
    return {"small_ops_layer_s": float(a), "small_ops_bw_efficiency": float(efficiency)}


def attention_features(model: ModelSpec, table: AttentionTable) -> tuple[np.ndarray, np.ndarray]:
    """Per layer, one GPU: decode features [1, D, KV bytes read] and prefill features
    [1, cached-pair FLOPs, causal-pair FLOPs, new tokens]."""
    shapes = LayerShapes.of(model, table.tensor_parallel)
    kv_bytes_layer = model.kv_bytes_per_token(tensor_parallel=table.tensor_parallel) / (
        model.num_layers
    )
    batch = table.decode_batch.astype(float)
    decode = np.stack([np.ones_like(batch), batch, batch * table.decode_kv * kv_bytes_layer], 1)
    n = table.prefill_chunk.astype(float)
    flops = shapes.attention_flops_per_pair
    prefill = np.stack(
        [np.ones_like(n), n * table.prefill_kv * flops, n * (n + 1) / 2 * flops, n], axis=1
    )
    return decode, prefill


def fit_attention(gpu: GPUSpec, model: ModelSpec, table: AttentionTable) -> dict[str, float]:
    decode, prefill = attention_features(model, table)
    a, per_seq, per_byte = fit_nonnegative(decode, table.decode_s)
    a_p, per_cached, per_causal, per_token = fit_nonnegative(prefill, table.prefill_s)
    return {
        "attention_layer_s": float(a),
        "attention_seq_s": float(per_seq),
        "attention_bw_efficiency": float(min(1.0, 1 / (per_byte * gpu.mem_bandwidth_bps))),
        "attention_flops_efficiency": float(min(1.0, 1 / (per_cached * gpu.fp16_flops))),
        "attention_causal_efficiency": float(min(1.0, 1 / (per_causal * gpu.fp16_flops))),
        "attention_token_s": float(per_token) / (model.num_heads / table.tensor_parallel),
        "attention_prefill_layer_s": float(a_p),
    }


@dataclass(frozen=True)
class FittedGpu:
    gpu_name: str
    factors: RooflineFactors
    interconnect: Interconnect | None
    files: list[str]


def fit_gpu(
    root: Path, gpu_name: str, base: RooflineFactors, models: Sequence[str] | None = None
) -> FittedGpu:
    """The factors of `gpu_name` fitted to the files under `root` (of `models`, default every
    one Vidur published for the GPU); the attention factors stay `base`'s where the GPU has no
    attention measurement."""
    return fit_measured(read_gpu_measurements(root, gpu_name, models), base)


def fit_measured(data: GpuMeasurements, base: RooflineFactors) -> FittedGpu:
    gpu_name = data.gpu.name
    rows = layer_rows(data)
    found: dict[str, Any] = fit_linear(data.gpu, rows, base) | fit_small_ops(data.gpu, rows)
    files = [str(t.path) for _, t in data.operators]
    for model, table in data.attention:
        found |= fit_attention(data.gpu, model, table)
        files.append(str(table.path))
    link = None
    if data.all_reduce is not None:
        node = VIDUR_GPUS[gpu_name].node
        link = fit_interconnect(data.all_reduce, f"{node} (fitted)", f"Vidur network/{node}")
        files.append(str(data.all_reduce.path))
    source = f"fitted to Vidur's {gpu_name} measurements by `pagesim calibrate fit-roofline`"
    factors = replace(base, **found, source=source, is_fitted=True)
    return FittedGpu(gpu_name, factors, link, files)


def fit_all(root: Path) -> list[FittedGpu]:
    """A100 first (its attention factors are the others'), then H100 and A40; every file is read
    (and checked) before the first fit."""
    data = [read_gpu_measurements(root, gpu) for gpu in ("a100-80gb", "h100-sxm", "a40")]
    a100 = fit_measured(data[0], shipped_presets().factors["a100-80gb"])
    return [a100, *(fit_measured(d, a100.factors) for d in data[1:])]


def constants_text(fitted: FittedGpu) -> str:
    """The factors (and the node's all-reduce) as simulator/core/presets/roofline_factors.toml and
    interconnects.toml write them, to 4 significant figures: the text to paste there."""
    f = fitted.factors
    rounded: dict[str, Any] = {
        name: g4(value)
        for name in RooflineFactors.__dataclass_fields__
        if isinstance(value := getattr(f, name), float)
    }
    tables: dict[str, object] = {"factors": {fitted.gpu_name: field_table(replace(f, **rounded))}}
    if fitted.interconnect is not None:
        link = fitted.interconnect
        link = replace(
            link,
            allreduce_latency_s=g4(link.allreduce_latency_s),
            allreduce_bw_bps=g4(link.allreduce_bw_bps),
            by_workers=tuple((n, g4(a), g4(b)) for n, a, b in link.by_workers),
            small_by_workers=tuple(
                (n, tuple(g4(k * 1e6) * 1e-6 for k in knots)) for n, knots in link.small_by_workers
            ),
        )
        node = VIDUR_GPUS[fitted.gpu_name].node or fitted.gpu_name
        tables["interconnect"] = {node: interconnect_table(link, None)}
    return toml_document(tables, f"{fitted.gpu_name}, fitted by `pagesim calibrate fit-roofline`")


def g4(x: float) -> float:
    """`x` to 4 significant figures."""
    return float(f"{x:.4g}")


def write_fitted(fitted: list[FittedGpu], out: Path) -> Path:
    """The fitted factors and links as JSON (for a reader; the preset files hold
    the figures)."""
    payload = {
        f.gpu_name: {
            "factors": asdict(f.factors),
            "interconnect": None if f.interconnect is None else asdict(f.interconnect),
            "files": f.files,
        }
        for f in fitted
    }
    return write_out(out, json.dumps(payload, indent=1) + "\n")

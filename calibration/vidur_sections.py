"""The sections of a profile imported from Vidur's measurements (`import_vidur` in
vidur_import.py assembles them): linear layers and small operators, all-reduce, attention
(Vidur's file, a pagesim kernel profile, or the roofline) and the LM head, each in the profile's
form with its `source`; then `sources`, which names them together, and `provenance`.
vidur_import.py's docstring says which term comes from where. Where a section is fitted to
measured points, every fifth (not the first or the last) is held out of the fit and its error
there reported (`held_out`). Times are seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from pagesim import __version__
from pagesim.calibration.fit import error_report, fit_nonnegative, monotone
from pagesim.calibration.vidur_csv import (
    LINEAR_OPS,
    SMALL_OPS,
    AttentionTable,
    CollectiveTable,
    OperatorTable,
    file_provenance,
    op_sum,
)
from pagesim.simulator.core.catalog import GPUSpec, ModelSpec
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.execution.profile import piecewise_linear
from pagesim.simulator.execution.profile_file import (
    ProfileReader,
    check_shapes,
    load_profile,
    read_terms,
)
from pagesim.simulator.execution.roofline import RooflineModel

HELD_OUT_EVERY = 5
LM_HEAD_SEQS = tuple(2**k for k in range(14))  # 1 .. 8192 sequences
VIDUR = "Vidur profiling data (microsoft/vidur, MIT License)"


def _errors(labels: list[str], measured: list[float], predicted: list[float]) -> dict[str, Any]:
    """`error_report`'s summary without the per-point list (a shipped profile stays small), plus
    the median and the worst point's label."""
    report = error_report(labels, measured, predicted)
    points = report.pop("points")
    if points:
        rel = np.abs([p["rel_err"] for p in points])
        report["median_abs_rel_err"] = float(np.median(rel))
        report["worst_point"] = points[int(np.argmax(rel))]["label"]
    return report


def _held(count: int) -> np.ndarray:
    """Which of `count` sorted points are held out: every fifth, never the first or the last."""
    mask = np.zeros(count, dtype=bool)
    mask[HELD_OUT_EVERY::HELD_OUT_EVERY] = True
    mask[-1] = False
    return mask


def gemm_section(table: OperatorTable) -> dict[str, Any]:
    """Per layer: linear layers + small operators at each measured token count."""
    order = np.argsort(table.tokens, kind="stable")
    tokens = table.tokens[order]
    linear = op_sum(table.median_s, LINEAR_OPS)[order]
    small = op_sum(table.median_s, SMALL_OPS)[order]
    spread = np.sqrt(op_sum(table.std_s, (*LINEAR_OPS, *SMALL_OPS), power=2))[order]
    total = linear + small
    held = _held(len(tokens))
    train = ~held
    xs = [float(t) for t in tokens[train]]
    ys = monotone([float(v) for v in total[train]])
    return {
        "source": f"measured: {VIDUR}, {table.path.name}",
        "interpolation": "piecewise-linear in tokens through the non-decreasing fit of the "
        "medians; beyond the largest, the last slope",
        "per": "layer",
        "what": "QKV, output, gate+up and down projections, 2 RMSNorms, rotary, SiLU, add",
        "tokens": xs,
        "time_s": ys,
        "measured_median_s": [float(v) for v in total[train]],
        "spread_s": [float(v) for v in spread[train]],
        "parts": {
            "linear": [float(v) for v in linear[train]],
            "small_ops": [float(v) for v in small[train]],
        },
        "range": {"tokens": [xs[0], xs[-1]]},
        "held_out": _errors(
            [f"gemm t={int(t)}" for t in tokens[held]],
            [float(v) for v in total[held]],
            [piecewise_linear(xs, ys, float(t)) for t in tokens[held]],
        ),
    }


def _bins(sizes: np.ndarray, times: np.ndarray) -> tuple[list[float], list[float]]:
    edges = 2.0 ** np.arange(np.floor(np.log2(sizes.min())), np.log2(sizes.max()) + 0.51, 0.5)
    which = np.digitize(sizes, edges)
    xs, ys = [], []
    for b in np.unique(which):
        inside = which == b
        xs.append(float(np.median(sizes[inside])))
        ys.append(float(np.median(times[inside])))
    return xs, ys


def all_reduce_section(table: CollectiveTable, tensor_parallel: int, node: str) -> dict[str, Any]:
    sizes, times = table.single_node(tensor_parallel)
    if not len(sizes):
        raise InputError(
            f"{table.path}: no single-node rows with num_workers = devices_per_node = "
            f"{tensor_parallel}"
        )
    held = _held(len(sizes))
    # The bins' medians as measured, not made non-decreasing: they fall with size in runs of
    # neighbouring rows (NCCL's regimes), which the roofline's table follows too
    # (core/presets/interconnects.toml).
    xs, ys = _bins(sizes[~held], times[~held])
    held_x, held_y = _bins(sizes[held], times[held])
    return {
        "source": f"measured: {VIDUR}, network/{node}/all_reduce.csv, {tensor_parallel} GPUs",
        "per": "call",
        "calls_per_layer": 2,
        "interpolation": "piecewise-linear in message bytes through the medians of half-octave "
        "size bins, as measured (they fall with size where NCCL's measured regimes do)",
        "bytes": xs,
        "time_s": ys,
        "measured_median_s": ys,
        "range": {"bytes": [xs[0], xs[-1]]},
        "held_out": _errors(
            [f"all-reduce {int(x)} B" for x in held_x],
            held_y,
            [piecewise_linear(xs, ys, x) for x in held_x],
        ),
    }


def measured_attention(
    model: ModelSpec, table: AttentionTable
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(decode, prefill) sections fitted to Vidur's attention file, in the profile's per-layer
    forms: decode a + b ΣKV + c D; prefill a + b Σ n(2c - n) + c Σ n."""
    n = table.prefill_chunk.astype(float)
    batch, kv = table.decode_batch.astype(float), table.decode_kv.astype(float)
    features = np.stack([np.ones_like(batch), batch * kv, batch], axis=1)
    labels = [f"decode n={int(b)} kv={int(k)}" for b, k in zip(batch, kv, strict=True)]
    decode = _linear_fit(
        features, table.decode_s, labels, ["a_s", "b_s_per_kv_token", "c_s_per_seq"]
    )
    decode["range"] = {
        "kv_tokens": [float((batch * kv).min()), float((batch * kv).max())],
        "num_seqs": [float(batch.min()), float(batch.max())],
    }
    context = n + table.prefill_kv
    sq = n * (2 * context - n)
    # The causal triangle of the new tokens runs less efficiently than pairs over cached context
    # (half-empty tiles on the diagonal): its own term, n².
    features = np.stack([np.ones_like(n), sq, n, n * n], axis=1)
    labels = [
        f"prefill n={int(a)} cached={int(b)}" for a, b in zip(n, table.prefill_kv, strict=True)
    ]
    names = ["a_s", "b_s_per_token_sq", "c_s_per_token", "d_s_per_new_token_sq"]
    prefill = _linear_fit(features, table.prefill_s, labels, names)
    prefill["range"] = {
        "sum_sq": [float(sq.min()), float(sq.max())],
        "tokens": [float(n.min()), float(n.max())],
    }
    source = f"measured: {VIDUR}, {table.path.name} (block {table.block_size})"
    return decode | {"source": source}, prefill | {"source": source}


def _linear_fit(
    features: np.ndarray, times: np.ndarray, labels: list[str], names: list[str]
) -> dict[str, Any]:
    held = _held(len(times))
    beta = fit_nonnegative(features[~held], times[~held])
    predicted = features @ beta
    return {
        "per": "layer",
        "coef": dict(zip(names, (float(b) for b in beta), strict=True)),
        "fit_error": _errors(
            [x for x, h in zip(labels, held, strict=True) if not h],
            list(times[~held]),
            list(predicted[~held]),
        ),
        "held_out": _errors(
            [x for x, h in zip(labels, held, strict=True) if h],
            list(times[held]),
            list(predicted[held]),
        ),
    }


def roofline_attention(roof: RooflineModel) -> tuple[dict[str, Any], dict[str, Any]]:
    """The roofline's attention terms in the profile's per-layer forms (no measured range)."""
    f, L = roof.factors, roof.model.num_layers
    flops = roof.attention_flops_per_pair / L
    cached_s = flops / (roof.gpu.fp16_flops * f.attention_flops_efficiency)
    causal_s = flops / (roof.gpu.fp16_flops * f.attention_causal_efficiency)
    kv_s = roof.kv_bytes_per_token / L / (roof.gpu.mem_bandwidth_bps * f.attention_bw_efficiency)
    unbounded = {"kv_tokens": [0.0, 1e15], "num_seqs": [0.0, 1e15]}
    source = f"roofline: {roof.gpu.name}'s attention factors ({f.source})"
    decode = {
        "per": "layer",
        "coef": {
            "a_s": f.attention_layer_s,
            "b_s_per_kv_token": kv_s + roof.block_s_per_context / L,
            "c_s_per_seq": f.attention_seq_s + roof.block_s_per_seq / L,
        },
        "range": unbounded,
        "held_out": {},
        "source": source,
    }
    # cached n(c - n) + causal n(n + 1)/2 = sq/2 + (causal - cached)/2 n² + causal/2 n, where
    # sq = n(2c - n)
    prefill = {
        "per": "layer",
        "coef": {
            "a_s": f.attention_prefill_layer_s,
            "b_s_per_token_sq": cached_s / 2,
            "c_s_per_token": causal_s / 2
            + f.attention_token_s * roof.model.num_heads / roof.tensor_parallel,
            "d_s_per_new_token_sq": max(0.0, (causal_s - cached_s) / 2),
        },
        "range": {"sum_sq": [0.0, 1e30], "tokens": [0.0, 1e15]},
        "held_out": {},
        "source": source + " (its compute branch; the KV-read floor is dropped)",
    }
    return decode, prefill


def profile_attention(
    path: Path, model: ModelSpec, tensor_parallel: int
) -> tuple[dict[str, Any], dict[str, Any], int | None]:
    """Attention sections copied from a profile of pagesim's own kernel (`pagesim calibrate`)."""
    data = load_profile(path)
    reader = ProfileReader(path, data)
    from pagesim.simulator.core.catalog import KVDtype

    check_shapes(reader, model, tensor_parallel, KVDtype.FP16)
    terms = read_terms(reader)  # every number checked, as a run would check it
    if reader.get("provenance.device") == "cpu":
        raise InputError(f"{path}: a CPU (NumPy) profile predicts no GPU's attention")
    source = f"pagesim kernel profile: {path.name} ({reader.get('provenance.device')})"
    decode = dict(reader.get("decode_attention")) | {"source": source}
    prefill = dict(reader.get("prefill_attention")) | {"source": source}
    return decode, prefill, terms.measured_block_size


def lm_head_section(roof: RooflineModel) -> dict[str, Any]:
    from pagesim.simulator.core.plan import SeqWork, StepPlan

    times = []
    for n in LM_HEAD_SEQS:
        plan = StepPlan.build([SeqWork(i, i, 1, 1, False) for i in range(n)])
        times.append(roof.breakdown(plan)["lm_head"])
    return {
        "source": f"roofline: {roof.gpu.name}'s GEMM factors (Vidur did not measure the LM head)",
        "per": "step",
        "tokens": [float(n) for n in LM_HEAD_SEQS],
        "time_s": times,
        "range": {"tokens": [1.0, float(LM_HEAD_SEQS[-1])]},
        "held_out": {},
    }


def sources_section(
    sections: dict[str, Any], roof: RooflineModel, tensor_parallel: int
) -> dict[str, str]:
    """Where each term of a step comes from, one line per term (the report shows them)."""
    if tensor_parallel == 1:
        all_reduce = "none (tensor_parallel 1)"
    elif "all_reduce" in sections:
        all_reduce = sections["all_reduce"]["source"]
    else:
        all_reduce = f"roofline: {roof.link.name} ({roof.link.source})"
    return {
        "linear": sections["gemm"]["source"],
        "small_ops": sections["gemm"]["source"],
        "all_reduce": all_reduce,
        "decode_attention": sections["decode_attention"]["source"],
        "prefill_attention": sections["prefill_attention"]["source"],
        "lm_head": sections["lm_head"]["source"],
        "host_overhead": "the engine era's (not measured by Vidur)",
    }


def provenance_section(gpu: GPUSpec, files: list[Path]) -> dict[str, Any]:
    """Who measured what the profile holds, in which files (with their dates in microsoft/vidur),
    and which pagesim imported it."""
    found = [file_provenance(p) for p in files]
    dates = sorted(f["vidur_date"] for f in found if "vidur_date" in f)
    return {
        "device": gpu.name,
        "device_kind": "gpu",
        "backend": "imported",
        "imported_from": VIDUR,
        "measured_by": "the Vidur project, not pagesim: vLLM / Sarathi-Serve operators timed with "
        "CUDA events or Kineto (medians of their repeats)",
        "files": found,
        "date": dates[-1] if dates else "not recorded",
        "date_means": "the last commit of these files in microsoft/vidur",
        "pagesim_version": __version__,
    }

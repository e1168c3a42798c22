"""The rows of the error table (`pagesim calibrate error-table`; step_errors.py renders them):
for each GPU, model, tensor parallelism and step shape of the grid that Vidur measured, the
measured step and the roofline's cost of the same terms, before and after the fit, term by term.
What *measured*, *before* and *after* count is said in step_errors.py's docstring (the page
prints it). Times are seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pagesim.calibration.allreduce_errors import DECODE_BATCHES, PREFILLS
from pagesim.calibration.allreduce_fit import measured_allreduce_s
from pagesim.calibration.roofline_fit import GpuMeasurements
from pagesim.calibration.vidur_csv import LINEAR_OPS, SMALL_OPS, AttentionTable, OperatorTable
from pagesim.simulator.core.catalog import GPUSpec, ModelSpec
from pagesim.simulator.core.config import ExecutionConfig
from pagesim.simulator.core.plan import SeqWork, StepPlan
from pagesim.simulator.execution.roofline import RooflineModel
from pagesim.simulator.execution.roofline_terms import LayerShapes, prefill_pairs

DECODE_CONTEXTS = (1024, 4032)  # "4k": 4,032, the longest context Vidur's attention file has
TENSOR_PARALLEL = (1, 2, 4, 8)
TERMS = ("linear", "small_ops", "all_reduce", "decode_attention", "prefill_attention")


@dataclass(frozen=True)
class StepError:
    gpu: str
    model: str
    tensor_parallel: int
    shape: str  # "decode 64 x 1024", "prefill 512"
    kind: str  # "decode" | "prefill"
    measured_s: float
    before_s: float
    after_s: float
    terms: dict[str, tuple[float, float, float]]  # term -> (measured, before, after) seconds

    @property
    def before_err(self) -> float:
        return self.before_s / self.measured_s - 1

    @property
    def after_err(self) -> float:
        return self.after_s / self.measured_s - 1


def _row(table: OperatorTable, tokens: int, tp: int) -> int | None:
    hit = np.flatnonzero((table.tokens == tokens) & (table.tensor_parallel == tp))
    return int(hit[0]) if len(hit) else None


def _attention(
    table: AttentionTable | None, decode: tuple[int, int] | None, prefill: int | None
) -> float | None:
    """Measured attention (s per layer) at a decode (batch, kv) or a prefill of n, or None."""
    if table is None:
        return None
    if decode is not None:
        hit = np.flatnonzero((table.decode_batch == decode[0]) & (table.decode_kv == decode[1]))
        return float(table.decode_s[hit[0]]) if len(hit) else None
    hit = np.flatnonzero((table.prefill_chunk == prefill) & (table.prefill_kv == 0))
    return float(table.prefill_s[hit[0]]) if len(hit) else None


def before_terms(
    model: ModelSpec, gpu: GPUSpec, tp: int, tokens: int, decode: tuple[int, int] | None
) -> dict[str, float]:
    """pagesim's roofline before the fit, per layer (see step_errors.py's docstring)."""
    s = LayerShapes.of(model, tp)
    peak, bw = gpu.fp16_flops, gpu.mem_bandwidth_bps
    linear = max(
        tokens * s.gemm_flops_per_token / (peak * 0.7),
        (s.gemm_weight_bytes + tokens * s.gemm_act_bytes_per_token) / (bw * 0.85),
    )
    ring = 2 * (tp - 1) / tp
    kv_layer = model.kv_bytes_per_token(tensor_parallel=tp) / model.num_layers
    if decode is not None:
        attention = decode[0] * decode[1] * kv_layer / (bw * 0.8)
    else:
        pairs = prefill_pairs(tokens, tokens)
        attention = max(
            pairs * s.attention_flops_per_pair / (peak * 0.7), tokens * kv_layer / (bw * 0.8)
        )
    return {
        "linear": linear,
        "small_ops": 0.0,
        "all_reduce": 2 * ring * tokens * s.allreduce_bytes_per_token / 300e9,
        "decode_attention": attention if decode is not None else 0.0,
        "prefill_attention": attention if decode is None else 0.0,
    }


def after_terms(
    model: ModelSpec, gpu: GPUSpec, tp: int, tokens: int, decode: tuple[int, int] | None
) -> dict[str, float]:
    """The fitted roofline's terms, per layer, from `RooflineModel.breakdown`."""
    roof = RooflineModel(model, gpu, ExecutionConfig(), tensor_parallel=tp)
    if decode is not None:
        work = [SeqWork(i, i, 1, decode[1], False) for i in range(decode[0])]
    else:
        work = [SeqWork(0, 0, tokens, tokens, True)]
    parts = roof.breakdown(StepPlan.build(work))
    return {k: parts[k] / model.num_layers for k in TERMS}


def step_errors(data: GpuMeasurements) -> list[StepError]:
    found = []
    attention = {(m.name, t.tensor_parallel): t for m, t in data.attention}
    shapes: list[tuple[str, str, int, tuple[int, int] | None]] = [
        (f"decode {b} x {c}", "decode", b, (b, c)) for c in DECODE_CONTEXTS for b in DECODE_BATCHES
    ] + [(f"prefill {n}", "prefill", n, None) for n in PREFILLS]
    for model, table in data.operators:
        for tp in TENSOR_PARALLEL:
            for label, kind, tokens, decode in shapes:
                i = _row(table, tokens, tp)
                if i is None:
                    continue
                measured = {
                    "linear": sum(float(table.median_s[op][i]) for op in LINEAR_OPS),
                    "small_ops": sum(float(table.median_s[op][i]) for op in SMALL_OPS),
                }
                if tp > 1 and data.all_reduce is not None:
                    message = tokens * model.hidden_size * 2
                    measured["all_reduce"] = 2 * measured_allreduce_s(data.all_reduce, tp, message)
                attn = _attention(
                    attention.get((model.name, tp)), decode, tokens if decode is None else None
                )
                if attn is not None:
                    measured[f"{kind}_attention"] = attn
                if kind == "decode" and decode is not None and attn is None and decode[1] != 1024:
                    continue  # without measured attention the context changes nothing: once
                before = before_terms(model, data.gpu, tp, tokens, decode)
                after = after_terms(model, data.gpu, tp, tokens, decode)
                L = model.num_layers
                terms = {k: (L * v, L * before[k], L * after[k]) for k, v in measured.items()}
                shown = label if attn is not None or kind == "prefill" else f"decode {tokens}"
                found.append(
                    StepError(
                        data.gpu.name,
                        model.name,
                        tp,
                        shown,
                        kind,
                        sum(v[0] for v in terms.values()),
                        sum(v[1] for v in terms.values()),
                        sum(v[2] for v in terms.values()),
                        terms,
                    )
                )
    return found

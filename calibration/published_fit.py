"""Fit the step-cost terms that only a real vLLM server's end-to-end runs show to the published
training set (calibration/published/measured.csv, its judged rows: vLLM CI builds 9523 and 9555).

    term (default's home)                           scenario key ([execution])  rows it enters
    V0 host, serial part per step (overhead.py)     step_overhead_s            every row
    custom all-reduce stage on NVSwitch nodes       custom_allreduce_stage_us  TP > 1
      (interconnects.toml; NVLink 3 and 4)
    V0 front end per request (frontend.py)          frontend_s                 the served row
    fused-MoE bandwidth share (moe_cost.py)         fused_moe_bw_efficiency    Mixtral rows

Four general terms (per engine era, per kind of link, per kernel), not one per benchmark, against
eight judged rows. (A stage latency per NVLink generation fits the 70B rows a little closer, 23 us
on A100 and 13.5 us on H100, for one more free term; the shared one keeps every row within 5%.)
Each evaluation runs the suite with the candidate values as scenario overrides
(calibration/published.py); least squares of the rows' relative errors by Gauss-Newton with a
numeric Jacobian, each term kept in a physical range. The kernels' bandwidths are not fitted
here: `microbenchmark_fit` derives them from vLLM's published kernel benchmark
(core/presets/interconnects.toml).

    python -m pagesim.calibration.published_fit     # prints the fit; interconnects.toml,
                                                    # frontend.py, moe_cost.py hold its output
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pagesim.calibration.published import (
    BENCHMARKS,
    METRICS,
    PUBLISHED_DIR,
    MeasuredRow,
    overrides_of,
    read_measured,
)
from pagesim.simulator.engine import simulate
from pagesim.simulator.scenario.load import load_scenario


@dataclass(frozen=True, slots=True)
class Term:
    name: str
    key: str  # the [execution] key the value is set through
    scale: float  # value in the key's unit = fitted value x scale
    lo: float
    hi: float
    start: float


TERMS = (
    Term("V0 host serial (s)", "step_overhead_s", 1.0, 0.0, 5e-3, 1.2e-3),
    Term("custom all-reduce stage (s)", "custom_allreduce_stage_us", 1e6, 1e-6, 60e-6, 10e-6),
    Term("V0 front end (s)", "frontend_s", 1.0, 0.0, 50e-3, 5e-3),
    Term("fused-MoE bandwidth share", "fused_moe_bw_efficiency", 1.0, 0.3, 1.0, 0.82),
)


def _overrides(row: MeasuredRow, values: Sequence[float] | np.ndarray) -> list[str]:
    return overrides_of(row.test, row.gpu) + [
        f"execution.{t.key}={float(v) * t.scale!r}" for t, v in zip(TERMS, values, strict=True)
    ]


def predict(rows: Sequence[MeasuredRow], values: Sequence[float] | np.ndarray) -> np.ndarray:
    """pagesim's figure for each row with the terms at `values` (a run per test and GPU)."""
    runs = {}
    out = []
    for row in rows:
        key = (row.test, row.gpu)
        if key not in runs:
            path = PUBLISHED_DIR / BENCHMARKS[row.test].template
            runs[key] = simulate(load_scenario(path, _overrides(row, values)))
        out.append(METRICS[row.metric](runs[key]))
    return np.array(out)


@dataclass(frozen=True, slots=True)
class Fit:
    values: tuple[float, ...]
    errors: tuple[float, ...]  # relative, per judged row
    rows: tuple[MeasuredRow, ...]


def fit(
    rows: Sequence[MeasuredRow] | None = None,
    iterations: int = 8,
    start: Sequence[float] | None = None,
) -> Fit:
    """Least squares of the judged rows' relative errors over TERMS (module docstring), from
    `start` (default: each term's `start`)."""
    judged = tuple(r for r in (rows or read_measured()) if r.is_judged)
    measured = np.array([r.measured for r in judged])
    x = np.array([t.start for t in TERMS] if start is None else list(start), dtype=float)
    lo = np.array([t.lo for t in TERMS])
    hi = np.array([t.hi for t in TERMS])
    steps = (hi - lo) * 0.02  # wide: a median of 200 requests moves in small jumps

    def residuals(v: np.ndarray) -> np.ndarray:
        return np.asarray(predict(judged, v) / measured - 1, dtype=float)

    r = residuals(x)
    for _ in range(iterations):
        jacobian = np.empty((len(r), len(x)))
        for j in range(len(x)):
            nudged = x.copy()
            nudged[j] += steps[j]
            jacobian[:, j] = (residuals(nudged) - r) / steps[j]
        delta, *_ = np.linalg.lstsq(jacobian, -r, rcond=None)
        for shrink in (1.0, 0.5, 0.25, 0.125):  # a damped step: the first that gains
            trial = np.clip(x + shrink * delta, lo, hi)
            trial_r = residuals(trial)
            if float(trial_r @ trial_r) < float(r @ r):
                break
        else:  # no gain in any: stop where it was
            break
        x, r = trial, trial_r
    return Fit(tuple(float(v) for v in x), tuple(float(e) for e in r), judged)


# vLLM PR #24532 (September 2025): benchmarks/kernels/benchmark_device_communicators.py on 4 H100
# (SXM) in CUDA graphs, milliseconds per all-reduce of a (tokens, 8192) bf16 tensor.
PR_24532_MIB = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0)
PR_24532_ONE_SHOT_MS = (0.010, 0.014, 0.019, 0.023, 0.030, 0.038)
PR_24532_TWO_SHOT_MS = (0.017, 0.018, 0.025, 0.026, 0.035, 0.042)


def microbenchmark_fit(num_gpus: int = 4) -> dict[str, float]:
    """The custom kernels' bandwidths (bytes read from peers per second per GPU) and intercepts
    from PR #24532's table: one-shot reads (t - 1) B, two-shot 2 (t - 1) / t B."""
    size = np.array(PR_24532_MIB) * (1 << 20)
    found = {}
    for name, times, share in (
        ("one_shot", PR_24532_ONE_SHOT_MS, num_gpus - 1),
        ("two_shot", PR_24532_TWO_SHOT_MS, 2 * (num_gpus - 1) / num_gpus),
    ):
        slope, intercept = np.polyfit(size * share, np.array(times) * 1e-3, 1)
        found[f"{name}_bps"] = float(1 / slope)
        found[f"{name}_intercept_s"] = float(intercept)
    return found


def report(result: Fit) -> str:
    lines = [f"{t.name:<40} {v:.4g}" for t, v in zip(TERMS, result.values, strict=True)]
    lines += [
        f"  {r.id:<42} {r.gpu:<15} {100 * e:+.1f}%"
        for r, e in zip(result.rows, result.errors, strict=True)
    ]
    bench = microbenchmark_fit()
    lines.append(
        "custom all-reduce kernels (vLLM PR #24532, 4 H100s): "
        + ", ".join(f"{k} {v:.4g}" for k, v in bench.items())
    )
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(fit()))

"""Fidelity figures: how far the predicting model is from the measured run.

(a) step time on the same plans: per executed step, error = (predicted - measured) / measured of
    compute_s; median and p90 of |error|, and the bias (mean signed error), in percent.
(b) request level, run against run: TTFT, TPOT and E2E at p50 and p95 over finished requests
    (after warm-up), error = (simulated - measured) / measured, in percent.

Plus the host's view of the executed steps (`host_timing`). `fidelity.run_fidelity` puts them
together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pagesim.simulator.metrics.result import RunResult

REQUEST_METRICS = ("ttft", "tpot", "e2e")
QUANTILES = (("p50", 0.5), ("p95", 0.95))


@dataclass(frozen=True, slots=True)
class StepError:
    """Step-time error of the predicting model on the executed plans, in percent."""

    num_steps: int
    median_abs_pct: float
    p90_abs_pct: float
    bias_pct: float  # mean of (predicted - measured) / measured: > 0 over-predicts
    median_bias_pct: float


@dataclass(frozen=True, slots=True)
class RequestError:
    metric: str  # ttft | tpot | e2e
    quantile: str  # p50 | p95
    simulated_s: float
    measured_s: float
    pct_error: float  # (simulated - measured) / measured x 100


HOST_BOUND_SHARE = 0.8  # a step whose host issue time is >= 80% of its event time


def host_timing(steps: pd.DataFrame) -> dict[str, object]:
    """The host's view of the executed steps: medians of the event time, the host's issue time
    and wall time, and the share of steps whose host issue took >= 80% of the event time (the
    GPU was mostly waiting for Python), per mode (eager / graph)."""
    if steps.empty or "host_s" not in steps:
        return {}
    figures: dict[str, object] = {}
    for mode, group in steps.groupby("mode"):
        measured = group["measured_compute_s"].to_numpy(dtype=float)
        host = group["host_s"].to_numpy(dtype=float)
        figures[str(mode)] = {
            "num_steps": len(group),
            "median_measured_s": float(np.median(measured)),
            "median_host_s": float(np.median(host)),
            "median_wall_s": float(np.median(group["wall_s"].to_numpy(dtype=float))),
            "share_host_bound": float(np.mean(host >= HOST_BOUND_SHARE * measured)),
        }
    return figures


def step_error(steps: pd.DataFrame) -> StepError:
    if steps.empty:
        nan = math.nan
        return StepError(0, nan, nan, nan, nan)
    errors = steps["pct_error"].to_numpy(dtype=float)
    errors = errors[np.isfinite(errors)]
    if not len(errors):
        return StepError(0, math.nan, math.nan, math.nan, math.nan)
    absolute = np.abs(errors)
    return StepError(
        len(errors),
        float(np.median(absolute)),
        float(np.percentile(absolute, 90)),
        float(errors.mean()),
        float(np.median(errors)),
    )


def _finished(result: RunResult) -> pd.DataFrame:
    requests = result.requests
    return requests[(requests["status"] == "finished") & requests["in_window"].astype(bool)]


def request_errors(simulated: RunResult, measured: RunResult) -> tuple[RequestError, ...]:
    sim, real = _finished(simulated), _finished(measured)
    errors = []
    for metric in REQUEST_METRICS:
        column = f"{metric}_s"
        sim_values = sim[column].to_numpy(dtype=float)
        real_values = real[column].to_numpy(dtype=float)
        for name, q in QUANTILES:
            s = _quantile(sim_values, q)
            m = _quantile(real_values, q)
            pct = (s - m) / m * 100.0 if m > 0 else math.nan
            errors.append(RequestError(metric, name, s, m, pct))
    return tuple(errors)


def _quantile(values: np.ndarray, q: float) -> float:
    finite = values[np.isfinite(values)]
    return float(np.quantile(finite, q)) if len(finite) else math.nan

"""When a token reaches the client of an engine that processes a step's outputs during the next
step (vLLM V0's asynchronous output processing: simulator/execution/frontend.py).

Given the run's step table, a token produced at engine time t (the end of its step) is delivered
during the step that starts at t: `after_s` into it (a served engine sends the outputs once that
step's host work has launched it), or at its end (`after_s` None: the offline engine returns
them from that step); if no step starts at t (the engine had nothing left to run), at t. A
compacted step table (a long run's merged rows, metrics/step_log.py) gives the step after t as
its row's mean step (an approximation, those runs only).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

Deliver = Callable[[np.ndarray], np.ndarray]  # engine times [n] -> client times [n]
_REL_TOL = 1e-12  # a step starts at the float its predecessor ended at; allow rounding


def next_step_delivery(steps: pd.DataFrame, after_s: float | None = None) -> Deliver:
    """The delivery rule over a run's step table (columns start_s, duration_s, row_steps)."""
    starts = steps["start_s"].to_numpy(dtype=np.float64)
    durations = steps["duration_s"].to_numpy(dtype=np.float64)
    row_steps = steps["row_steps"].to_numpy(dtype=np.float64)
    ends = starts + durations
    mean_step = np.divide(durations, row_steps, out=durations.copy(), where=row_steps > 0)
    if after_s is not None:  # into the next step, never past its end
        mean_step = np.minimum(mean_step, after_s)
    n = len(starts)

    def deliver(times: np.ndarray) -> np.ndarray:
        out = times.astype(np.float64, copy=True)
        if not n:
            return out
        known = ~np.isnan(times)
        t = times[known]
        tol = _REL_TOL * np.maximum(1.0, np.abs(t))
        i = np.searchsorted(starts, t - tol, side="left")  # first step starting at or after t
        at = np.minimum(i, n - 1)
        starts_next = (i < n) & (np.abs(starts[at] - t) <= tol)
        before = np.maximum(i - 1, 0)
        inside = ~starts_next & (i > 0) & (t < ends[before] - tol)  # within a merged row
        delivered = np.where(starts_next, starts[at] + mean_step[at], t)
        delivered = np.where(inside, t + mean_step[before], delivered)
        out[known] = delivered
        return out

    return deliver

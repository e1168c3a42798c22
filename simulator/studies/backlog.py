"""Whether a run's backlog grew over its arrival window: the figures a sweep judges saturation by.

A finite run at a rate it sustains still completes fewer requests per second than the rate
names: a Poisson draw offers more or fewer requests than rate x window, and the requests that
arrive last are still running when arrivals stop. Neither is saturation. A system that cannot
keep up shows something a finite run can measure: the requests in the system (arrived, not yet
finished or rejected) pile up while requests keep arriving. These figures measure that, over the
arrival window (the first arrival after warm-up to the last arrival); reports.sweep_findings
turns them into a verdict and the glossary states the rule.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def _mean_in_system(arrival: np.ndarray, leave: np.ndarray, lo: float, hi: float) -> float:
    """Time-averaged number of requests present in [lo, hi] (each from arrival to leave)."""
    overlap = np.minimum(leave, hi) - np.maximum(arrival, lo)
    return float(np.clip(overlap, 0.0, None).sum() / (hi - lo))


def backlog_figures(requests: pd.DataFrame) -> dict[str, float | None]:
    """The arrival window's figures, from a run's requests frame (None where undefined):

    window_s: the arrival window's length (first in-window arrival to the last arrival).
    window_completed_share: in-window requests finished by the window's end / in-window requests.
    backlog_growth: time-averaged requests in the system over the window's second half / over
        its first half (1 when steady; a system falling behind keeps adding to it).
    service_p50_s: median time from first admission to finish over finished in-window requests:
        how long a request takes once served, what a window must outlast to show a trend.
    """
    none: dict[str, float | None] = dict.fromkeys(
        ("window_s", "window_completed_share", "backlog_growth", "service_p50_s")
    )
    window = requests["in_window"].to_numpy(dtype=bool)
    if not window.any():
        return none
    arrival = requests["arrival_s"].to_numpy(dtype=float)
    finish = requests["finish_s"].to_numpy(dtype=float)
    status = requests["status"].to_numpy()
    start, last = float(arrival[window].min()), float(arrival.max())
    finished = status == "finished"
    # A rejected request leaves as it arrives; an unfinished one stays to the end of the run.
    leave = np.where(finished, finish, np.where(status == "rejected", arrival, np.inf))
    done = window & finished
    served = finish[done] - requests["admitted_s"].to_numpy(dtype=float)[done]
    out = none | {
        "window_s": last - start,
        "window_completed_share": float((done & (finish <= last)).sum() / window.sum()),
        "service_p50_s": float(np.median(served)) if served.size else None,
    }
    if last > start:
        mid = (start + last) / 2
        first = _mean_in_system(arrival, leave, start, mid)
        second = _mean_in_system(arrival, leave, mid, last)
        out["backlog_growth"] = second / first if first > 0 else None
    return out

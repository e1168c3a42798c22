"""Whether a sweep point kept up with its arrival rate: the rule, and its statement for the
glossary, in one place (reports.sweep_findings applies it; reports.glossary_sweep prints it).

The figures come from simulator/studies/backlog.py, recorded for every sweep point. Completing
fewer requests per second than the rate names is not falling behind: a Poisson draw may offer
fewer, and a finite run's last requests are still running when arrivals stop. Falling behind
shows as a backlog that keeps growing while requests arrive.
"""

from __future__ import annotations

import pandas as pd

from pagesim.reports.frames import as_number

KEEPS_UP = 0.9  # completed / arrived, over the arrival window
BACKLOG_GROWTH = 1.5  # requests in the system, second half of the window / first half
MIN_WINDOW_SERVICES = 2.0  # a window shorter than this many median service times shows no trend
KNEE_FACTOR = 2.0  # normalized latency vs its value at the lowest rate swept

RULE = (
    "A system falls behind its arrival rate when, over the arrival window (first arrival after "
    "warm-up to the last arrival), the requests in the system grew (their time-averaged count "
    f"over the window's second half is at least {BACKLOG_GROWTH:g}x that over its first half) "
    f"and it completed fewer than {KEEPS_UP:.0%} of the requests that arrived in the window; "
    "otherwise it keeps up. A window shorter than "
    f"{MIN_WINDOW_SERVICES:g} median service times (admission to finish) is too short to show "
    "the trend, and nothing is claimed from it. Completing fewer requests per second than the "
    "rate names is not falling behind: a Poisson draw may offer fewer, and a finite run's last "
    "requests are still running when arrivals stop. On a rate sweep, the knee lies between the "
    "last rate a system keeps up with, its mean normalized latency within "
    f"{KNEE_FACTOR:g}x its value at the lowest rate, and the next rate."
)


def falls_behind(point: pd.Series) -> tuple[bool, str]:
    """Whether one sweep point fell behind (RULE), and its figures in words; (False, "") when
    it lacks them (a table written before they were recorded) or its window is too short."""
    growth, completed, window, service = (
        as_number(point.get(k))
        for k in ("backlog_growth", "window_completed_share", "window_s", "service_p50_s")
    )
    if growth is None or completed is None or window is None:
        return False, ""
    if service is not None and window < MIN_WINDOW_SERVICES * service:
        return False, ""
    if growth >= BACKLOG_GROWTH and completed < KEEPS_UP:
        return True, (
            f"it falls behind (the requests in the system grow {growth:.2g}x over the arrival "
            f"window; it completes {completed:.0%} of the arrivals within it)"
        )
    return False, ""

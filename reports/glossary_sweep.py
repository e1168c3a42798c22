"""Glossary entries of a sweep point's figures beyond its run summary (sweep.csv and a capacity
search's evaluations.csv: simulator/studies/points.py `extra_metrics`), and the rule a sweep's
findings judge them by (reports.saturation)."""

from __future__ import annotations

from pagesim.reports.glossary_types import GlossaryEntry
from pagesim.reports.saturation import RULE

SWEEP_ENTRIES: tuple[GlossaryEntry, ...] = (
    GlossaryEntry(
        "slo_share",
        "Requests after warm-up that finished meeting the SLO / requests offered after warm-up "
        "(rejected and unfinished ones count as misses); the capacity search's first criterion.",
    ),
    GlossaryEntry(
        "queue_delay_p99_s",
        "99th percentile of the wait from arrival to first admission, over requests after "
        "warm-up (one never admitted waits forever); the capacity search's second criterion.",
    ),
    GlossaryEntry(
        "num_tokens_served",
        "Prompt + output tokens of the finished requests (a fleet's cost per million tokens).",
    ),
    GlossaryEntry(
        "window_s",
        "The arrival window: from the first arrival after warm-up to the last arrival (s).",
    ),
    GlossaryEntry(
        "window_completed_share",
        "Requests after warm-up that finished within the arrival window / those that arrived "
        "in it.",
    ),
    GlossaryEntry(
        "backlog_growth",
        "Time-averaged requests in the system (arrived, not yet finished or rejected) over the "
        "arrival window's second half / over its first half: about 1 when steady, larger while "
        "a backlog builds.",
    ),
    GlossaryEntry(
        "service_p50_s",
        "Median time from first admission to finish over finished requests after warm-up: how "
        "long a request takes once served, which an arrival window must outlast to show a "
        "trend.",
    ),
    GlossaryEntry("keeps up / falls behind, knee", RULE),
)

"""The answer first: sentences comparing named values of one metric, as a scenario's [report]
asks (simulator/scenario/report.py): ranked best to worst, or how closely they agree.

A value is named by its system (a run) or by what differs between sweep points (a sweep); the
same sentences serve both. Which way is better comes from BETTER: a metric where neither is
(KV capacity used, link busy share) is listed without a winner. Values that read the same at
three significant digits, or lie within TIE_SHARE of each other, tie, and the sentence says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pagesim.reports.glossary import SUMMARY_BY_KEY, Unit
from pagesim.reports.units import format_value

HIGHER, LOWER, NEITHER = 1, -1, 0
TIE_SHARE = 0.005  # values within 0.5% of each other tie
SHARE_TIE = 0.0015  # and shares within 0.15 percentage points (they print to 0.1)

_LOWER = (
    "ttft",
    "tpot",
    "e2e",
    "normalized_latency",
    "kv_waste_share",
    "kv_internal_frag_share",
    "kv_external_frag_share",
    "kv_reserved_share",
    "num_preemptions",
    "num_swaps",
    "swap_time_s",
    "num_recomputed_tokens",
    "spec_draft_share",
    "moe_expert_bytes_per_step",
    "moe_experts_touched_per_layer",
    "load_imbalance",
    "energy",  # joules per token or request: fewer is better
    "offload_load_wait",
    "offload_store_wait",
    "dp_sync_wait_share",
    "dp_dummy_steps",
    "all2all",
    "moe_hot",
)
# Watts follow the work done: more is neither better nor worse by itself.
_NEITHER = (
    "peak_kv_used_share",
    "link_busy_share",
    "mean_batch_requests",
    "mean_batch_seqs",
    "power_mean_w",
    "power_peak_w",
    "offload_load_link_demand",  # a link's load: neither, until it passes 1
    "offload_store_link_demand",
)


def better(key: str) -> int:
    """HIGHER, LOWER or NEITHER: which way of `key` is better."""
    if key in _NEITHER:
        return NEITHER
    return LOWER if key.startswith(_LOWER) else HIGHER


def metric_label(key: str) -> str:
    """The metric as the glossary's tables name it ("Slot utilization", "TPOT p50")."""
    metric = SUMMARY_BY_KEY.get(key)
    if metric is None:
        return key
    return metric.label.replace("KV: ", "KV ", 1)  # a table's "KV: waste" reads "KV waste"


def show(key: str, value: float) -> str:
    metric = SUMMARY_BY_KEY.get(key)
    return format_value(value, metric.unit if metric is not None else None)


Named = Sequence[tuple[str, float | None]]  # (name, value) of each system or sweep point


def _ties(key: str, a: float, b: float) -> bool:
    if show(key, a) == show(key, b):
        return True
    metric = SUMMARY_BY_KEY.get(key)
    if metric is not None and metric.unit is Unit.SHARE and abs(a - b) < SHARE_TIE:
        return True
    scale = max(abs(a), abs(b))
    return scale > 0 and abs(a - b) <= TIE_SHARE * scale


def _join(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _spread(key: str, best: float, worst: float, best_names: str, worst_names: str) -> str:
    """How far the best lies from the worst, in words."""
    if best <= 0 or worst <= 0:
        return ""
    high, low = max(best, worst), min(best, worst)
    if high / low >= 1.995:
        times = f"{high / low:.2g}×" if high / low < 10 else f"{high / low:,.0f}×"
        if better(key) == HIGHER:
            return f", {times} {worst_names}"
        return f"; {worst_names} {times} that"
    word = "above" if best > worst else "below"
    return f", {100 * abs(best / worst - 1):.0f}% {word} {worst_names}"


def rank_sentence(key: str, named: Named, by: str = "") -> str | None:
    """'<Metric>[ by <by>]: a 76.2%, b 63.1% (a highest, 21% above b).' Best first; ties said
    to tie; None when no value is present."""
    pairs = [(n, v) for n, v in named if v is not None and math.isfinite(v)]
    if not pairs:
        return None
    head = metric_label(key) + (f" by {by}" if by else "")
    if len(pairs) == 1:
        return f"{head}: {pairs[0][0]} {show(key, pairs[0][1])}."
    direction = better(key)
    order = sorted(pairs, key=lambda p: -p[1] if direction != LOWER else p[1])
    best, worst = order[0][1], order[-1][1]
    if _ties(key, best, worst):
        who = "both" if len(pairs) == 2 else f"all {len(pairs)}"
        return f"{head}: {who} tie at {show(key, best)}."
    listed = ", ".join(f"{n} {show(key, v)}" for n, v in order)
    if direction == NEITHER:
        return f"{head}: {listed}."
    tops = _join([n for n, v in order if _ties(key, v, best)])
    bottoms = _join([n for n, v in order if _ties(key, v, worst)])
    word = "highest" if direction == HIGHER else "lowest"
    return f"{head}: {listed} ({tops} {word}{_spread(key, best, worst, tops, bottoms)})."


def agreement_sentence(key: str, named: Named, reference: str | None = None) -> str | None:
    """'<Metric>: a and b agree within 4.0% (b 47 ms; a 45.1 ms, −4.0%).' Each value's
    difference from the reference's (the first named when None); None without both."""
    pairs = [(n, v) for n, v in named if v is not None and math.isfinite(v)]
    ref = next((p for p in pairs if p[0] == reference), pairs[0] if pairs else None)
    if ref is None or len(pairs) < 2:
        return None
    others = [p for p in pairs if p is not ref]
    if ref[1] == 0:
        listed = "; ".join(f"{n} {show(key, v)}" for n, v in others)
        return f"{metric_label(key)}: {ref[0]} {show(key, 0.0)}; {listed}."
    diffs = [(n, v, 100 * (v / ref[1] - 1)) for n, v in others]
    worst = max(abs(d) for _, _, d in diffs)
    names = _join([ref[0], *(n for n, _, _ in diffs)])
    listed = "; ".join(f"{n} {show(key, v)}, {d:+.1f}%" for n, v, d in diffs)
    return (
        f"{metric_label(key)}: {names} agree within {worst:.1f}% "
        f"({ref[0]} {show(key, ref[1])}; {listed})."
    )

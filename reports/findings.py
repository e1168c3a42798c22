"""Headline findings derived from the summaries: measured facts with numbers, no advice.

Each sentence compares what the summaries hold (best vs worst system on one metric) and says
nothing when a metric is missing; a scenario with one system gets statements, not comparisons.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pagesim.reports.frames import as_number
from pagesim.reports.units import format_seconds
from pagesim.simulator.metrics.result import RunResult


def _ranked(results: Sequence[RunResult], key: str) -> list[tuple[str, float]]:
    """(system, value) for systems whose summary has a finite number under `key`, ascending."""
    pairs = [(r.system, as_number(r.summary.get(key))) for r in results]
    return sorted([(s, v) for s, v in pairs if v is not None], key=lambda p: p[1])


def _names(ranked: list[tuple[str, float]], value: float) -> str:
    """Every system at `value` (ties are named together): "a", "a and b", "a, b and c"."""
    names = [name for name, v in ranked if math.isclose(v, value, rel_tol=1e-9, abs_tol=1e-15)]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _throughput(results: Sequence[RunResult]) -> str | None:
    ranked = _ranked(results, "throughput_req_s")
    if not ranked:
        return None
    tokens = {r.system: as_number(r.summary.get("throughput_tok_s")) for r in results}
    top = ranked[-1][1]
    best = _names(ranked, top)
    tok = tokens.get(ranked[-1][0])
    tok_text = f" ({tok:,.0f} output tok/s)" if tok is not None else ""
    if len(ranked) == 1:
        return f"{best} completed {top:.3g} requests/s{tok_text}."
    low = ranked[0][1]
    worst = _names(ranked, low)
    if best == worst:
        return f"All systems completed {top:.3g} requests/s{tok_text}."
    if low <= 0:
        ratio = ""
    elif top / low < 1.995:
        ratio = f", {100 * (top / low - 1):.0f}% above the lowest"
    else:
        ratio = f", {top / low:.2g}× the lowest"
    return (
        f"{best} had the highest throughput: {top:.3g} requests/s{tok_text}{ratio} "
        f"({worst}, {low:.3g} requests/s)."
    )


def _lowest(results: Sequence[RunResult], key: str, what: str, unit: str = "") -> str | None:
    ranked = _ranked(results, key)
    if not ranked:
        return None

    def show(v: float) -> str:
        return format_seconds(v) + unit

    low, high = ranked[0][1], ranked[-1][1]
    best, worst = _names(ranked, low), _names(ranked, high)
    if len(ranked) == 1:
        return f"{best}: {what} {show(low)}."
    if best == worst or show(low) == show(high):
        return f"All systems had the same {what}: {show(low)}."
    return f"{best} had the lowest {what}: {show(low)}, against {show(high)} for {worst}."


def _waste(results: Sequence[RunResult]) -> str | None:
    ranked = _ranked(results, "kv_waste_share")
    if not ranked:
        return None
    low, high = ranked[0][1], ranked[-1][1]
    best, worst = _names(ranked, low), _names(ranked, high)
    what = "of the KV capacity in reservation and fragmentation, on average"
    if len(ranked) == 1:
        return f"{best} held {100 * low:.1f}% {what}."
    if best == worst or f"{100 * low:.1f}" == f"{100 * high:.1f}":
        return f"All systems held {100 * low:.1f}% {what}."
    return (
        f"{best} wasted the least KV memory: {100 * low:.1f}% {what}, "
        f"against {100 * high:.1f}% for {worst}."
    )


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _events(results: Sequence[RunResult]) -> list[str]:
    """One sentence for rejections and one for preemptions, listing the systems that had any."""
    rejected, preempted = [], []
    for r in results:
        num_rejected = as_number(r.summary.get("num_rejected"))
        if num_rejected:
            rejected.append(f"{r.system} {_plural(int(num_rejected), 'request')}")
        num_preemptions = as_number(r.summary.get("num_preemptions"))
        if num_preemptions:
            swaps = as_number(r.summary.get("num_swaps"))
            by_swap = f" ({int(swaps):,} by swap)" if swaps is not None else ""
            preempted.append(f"{r.system} {_plural(int(num_preemptions), 'time')}{by_swap}")
    facts = []
    if rejected:
        facts.append("Rejected as never servable: " + "; ".join(rejected) + ".")
    if preempted:
        facts.append("Preempted running requests: " + "; ".join(preempted) + ".")
    return facts


def _pricing_warnings(results: Sequence[RunResult]) -> list[str]:
    """Warnings about how the steps were priced (a profile of another GPU, MFU or MBU above
    100%): first, since they qualify every other figure."""
    found = []
    for r in results:
        warnings = r.provenance.get("warnings")
        for text in warnings if isinstance(warnings, list) else ():
            found.append(f"Warning ({r.system}): {text}.")
    return found


def derive_findings(results: Sequence[RunResult]) -> list[str]:
    """A few factual sentences from the summaries (plain text; the page escapes them)."""
    candidates = [
        *_pricing_warnings(results),
        _throughput(results),
        _lowest(results, "ttft_p99_s", "p99 time to first token"),
        _lowest(results, "normalized_latency_mean_s", "mean normalized latency", "/token"),
        _waste(results),
        *_events(results),
    ]
    return [c for c in candidates if c]

"""Headline findings derived from the summaries: measured facts with numbers, no advice.

A run that measured nothing (every request inside the warm-up) says so first. Then the answer
to the scenario's own question, its [report] key metric (reports.headlines): ranked, or, with
compare = "agreement", how closely the systems agree; then its other [report] metrics the same
way. Then a run priced with a caveat says so, and the general sentences follow: throughput,
tail TTFT, normalized latency and KV waste compared best vs worst (none that the question's
sentences already gave, and no contest at all when the scenario asks for agreement),
rejections and preemptions. Nothing is said of a metric the summaries lack; a scenario with one
system gets statements, not comparisons.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pagesim.reports.frames import as_number
from pagesim.reports.headlines import TIE_SHARE, agreement_sentence, rank_sentence
from pagesim.reports.units import format_seconds
from pagesim.simulator.core.config import Comparison, ReportConfig
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
    if best == worst or top - low <= TIE_SHARE * top:
        return f"All systems completed {top:.3g} requests/s{tok_text}: they tie on throughput."
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


def _measured_nothing(result: RunResult) -> bool:
    return bool(as_number(result.summary.get("num_requests"))) and (
        result.summary.get("num_in_window") == 0
    )


def warmup_warning(results: Sequence[RunResult]) -> str | None:
    """Which systems measured nothing because every request arrived inside the warm-up (their
    throughput and latencies are empty; 0 req/s would not be a result), in one clause."""
    empty = [r.system for r in results if _measured_nothing(r)]
    if not empty:
        return None
    who = "every system" if len(empty) == len(results) > 1 else ", ".join(empty)
    return (
        f"every request of {who} arrived inside the warm-up (stop.warmup_s), so nothing was "
        "measured: its 0 req/s and empty latencies are not results; lower stop.warmup_s or "
        "offer more requests"
    )


def question_findings(results: Sequence[RunResult], question: ReportConfig) -> list[str]:
    """The sentences the scenario's [report] asks for: its key metric, then its other metrics."""
    if question.key_metric is None:
        return []
    found = []
    for key in (question.key_metric, *question.metrics):
        named = [(r.system, as_number(r.summary.get(key))) for r in results]
        present = [(n, v) for n, v in named if v is not None]
        if question.compare is Comparison.AGREEMENT:
            sentence = agreement_sentence(key, present, question.reference)
        else:
            sentence = rank_sentence(key, present)
        if sentence:
            found.append(sentence)
    return found


# The summary key each general sentence compares, in derive_findings' order.
_GENERAL_KEYS = ("throughput_req_s", "ttft_p99_s", "normalized_latency_mean_s", "kv_waste_share")


def derive_findings(
    results: Sequence[RunResult], question: ReportConfig | None = None
) -> list[str]:
    """A few factual sentences from the summaries (plain text; the page escapes them), the
    answer to `question` (the scenario's [report]) first."""
    question = question or ReportConfig()
    asked = {question.key_metric, *question.metrics}
    measured = [r for r in results if not _measured_nothing(r)]
    general = [
        _throughput(measured),
        _lowest(measured, "ttft_p99_s", "p99 time to first token"),
        _lowest(measured, "normalized_latency_mean_s", "mean normalized latency", "/token"),
        _waste(measured),
    ]
    is_contest = question.compare is not Comparison.AGREEMENT
    kept = [g for g, key in zip(general, _GENERAL_KEYS, strict=True) if key not in asked]
    candidates = [
        f"Warning: {warning}." if (warning := warmup_warning(results)) else None,
        *question_findings(measured, question),
        *_pricing_warnings(results),
        *(kept if is_contest else []),
        *_events(results),
    ]
    return [c for c in candidates if c]

"""Headline findings of a sweep, from its table (one row per system and point). Measured facts
with numbers, no advice; nothing is said of a metric the table lacks.

The first answers the scenario's question (its [report] key metric): along each numeric axis,
how the metric moves on each curve; over axes that are not numbers (models, dtypes, traces), the
points ranked, each named by what differs. The scenario's other [report] metrics follow the same
way, then where each system's latency-vs-rate curve turns up (the knee), then the other key
metrics along the numeric axes. Without a [report], the general metrics lead.

Whether a system keeps up with a rate, and where its knee lies, is reports.saturation's rule
(its RULE is the glossary's entry): not whether it completed as many requests per second as the
rate names, but whether its backlog kept growing while requests arrived.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from pagesim.reports.curves import RATE_COLUMN, curve_metrics, sweep_column
from pagesim.reports.glossary import SUMMARY_BY_KEY
from pagesim.reports.headlines import agreement_sentence, metric_label, rank_sentence
from pagesim.reports.saturation import KNEE_FACTOR, falls_behind
from pagesim.reports.sweep_axes import (
    axis_columns,
    is_categorical,
    label_axes,
    numeric_axes,
    point_names,
    short_name,
)
from pagesim.reports.units import format_seconds, format_value
from pagesim.simulator.core.config import Comparison, ReportConfig

LATENCY = "normalized_latency_mean_s"
# Without a [report]: what a sweep over points that are not numbers compares.
GENERAL_METRICS = ("throughput_tok_s", "normalized_latency_mean_s", "kv_waste_share")


def _numbers(frame: pd.DataFrame, column: str) -> pd.Series:
    if column not in frame:
        return pd.Series(float("nan"), index=frame.index)
    return pd.to_numeric(frame[column], errors="coerce")


def _groups(sweep: pd.DataFrame, axes: Sequence[str]) -> list[tuple[str, pd.DataFrame]]:
    """(name, rows) per system and value of the other axes: one curve each."""
    keys = (["system"] if "system" in sweep else []) + list(axes)
    if not keys:
        return [("all runs", sweep)]
    out = []
    for values, rows in sweep.groupby(keys, sort=False):
        parts = tuple(values)  # grouped by a list of keys: always a tuple
        many = "system" in sweep and sweep["system"].nunique() > 1
        named = [str(parts[0])] if many else []
        start = 1 if "system" in sweep else 0
        named += [f"{short_name(a)} = {v}" for a, v in zip(axes, parts[start:], strict=True)]
        out.append((", ".join(named) or str(parts[0]), rows))
    return out


def knee_sentence(name: str, rows: pd.DataFrame, rate: str) -> str | None:
    """Where one curve (a system's rows, by rate) stops keeping up, in one sentence."""
    rows = rows.assign(_rate=_numbers(rows, rate)).sort_values("_rate")
    rates = rows["_rate"].to_numpy(float)
    if LATENCY not in rows or len(rates) < 2:
        return None
    latency = _numbers(rows, LATENCY).to_numpy(float)
    base = latency[0]
    if not base > 0:
        return None
    behind = [falls_behind(row) for _, row in rows.iterrows()]
    kept = [
        not b and lat <= KNEE_FACTOR * base for (b, _), lat in zip(behind, latency, strict=True)
    ]
    light = f"{format_seconds(base)}/token at {rates[0]:g} req/s"
    if all(kept):
        return (
            f"{name}: no knee up to {rates[-1]:g} req/s (normalized latency "
            f"{format_seconds(latency[-1])}/token there, {light})."
        )
    first = kept.index(False)
    why = behind[first][1]
    if first == 0:
        return f"{name}: at the lowest rate, {rates[0]:g} req/s, {why}."
    slower = (
        f"normalized latency is {format_seconds(latency[first])}/token "
        f"({latency[first] / base:.2g}x)"
    )
    return (
        f"{name}: keeps up to {rates[first - 1]:g} req/s (normalized latency {light}); at "
        f"{rates[first]:g} req/s {why + ' and ' if why else ''}{slower}: the knee lies between "
        f"{rates[first - 1]:g} and {rates[first]:g} req/s."
    )


def axis_sentence(sweep: pd.DataFrame, axis: str, metric: str) -> str | None:
    """How `metric` moves along `axis` on each curve (system x other axes): from its value at
    the axis's lowest value to its value at the highest."""
    if metric not in sweep:
        return None
    others = [a for a in axis_columns(sweep) if a != axis]
    info = SUMMARY_BY_KEY.get(metric)
    unit = info.unit if info else None
    moves = []
    for name, rows in _groups(sweep, others):
        rows = rows.assign(_x=_numbers(rows, axis), _y=_numbers(rows, metric)).dropna(
            subset=["_x", "_y"]
        )
        if rows["_x"].nunique() < 2:
            continue
        rows = rows.sort_values("_x")
        first, last = float(rows["_y"].iloc[0]), float(rows["_y"].iloc[-1])
        moves.append(f"{name} {format_value(first, unit)} → {format_value(last, unit)}")
    if not moves:
        return None
    x = _numbers(sweep, axis).dropna()
    what = metric_label(metric)
    return f"{what}, {short_name(axis)} from {x.min():g} to {x.max():g}: " + "; ".join(moves) + "."


def _by_point(sweep: pd.DataFrame, metric: str, question: ReportConfig) -> str | None:
    """`metric` at every point of a sweep whose axes are not numbers, each named by what
    differs, compared as the scenario asks."""
    if metric not in sweep:
        return None
    named = list(zip(point_names(sweep), _numbers(sweep, metric), strict=True))
    varied = [short_name(a) for a in axis_columns(sweep) if sweep[a].astype(str).nunique() > 1]
    if question.compare is Comparison.AGREEMENT:
        return agreement_sentence(metric, named, question.reference)
    return rank_sentence(metric, named, by=" and ".join(varied))


def metric_sentences(sweep: pd.DataFrame, metric: str, question: ReportConfig) -> list[str]:
    """`metric` along every numeric axis, or, over named points, at every point."""
    if is_categorical(sweep):
        sentence = _by_point(sweep, metric, question)
        return [sentence] if sentence else []
    return [s for axis in numeric_axes(sweep) if (s := axis_sentence(sweep, axis, metric))]


def derive_sweep_findings(sweep: pd.DataFrame, question: ReportConfig | None = None) -> list[str]:
    """A few factual sentences about a sweep table (plain text; the page escapes them), the
    answer to `question` (the scenario's [report]) first."""
    if sweep.empty:
        return []
    question = question or ReportConfig()
    sweep = label_axes(sweep)
    asked = [m for m in (question.key_metric, *question.metrics) if m is not None]
    rate = sweep_column(sweep, RATE_COLUMN)
    facts = [s for metric in asked for s in metric_sentences(sweep, metric, question)]
    if rate is not None:
        others = [a for a in axis_columns(sweep) if a != rate]
        facts += [
            s for name, rows in _groups(sweep, others) if (s := knee_sentence(name, rows, rate))
        ]
    if is_categorical(sweep):
        general = [m for m in GENERAL_METRICS if m not in asked]
        return facts + [s for m in general if (s := _by_point(sweep, m, question))]
    for axis in (a for a in numeric_axes(sweep) if a != rate):
        for metric in curve_metrics(sweep):
            if metric not in asked and (sentence := axis_sentence(sweep, axis, metric)):
                facts.append(sentence)
    return facts

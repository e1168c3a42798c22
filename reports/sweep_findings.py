"""Headline findings of a sweep, from its table (one row per system and point): where each
system's latency-vs-rate curve turns up (the knee), and how the key metrics move along any other
axis. Measured facts with numbers, no advice; nothing is said of a metric the table lacks.

A system *keeps up* with a rate when it completes at least KEEPS_UP of the requests offered per
second and its mean normalized latency stays within KNEE_FACTOR of its value at the lowest rate
swept; the knee lies between the last rate it keeps up with and the next one.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from pagesim.reports.curves import RATE_COLUMN, curve_metrics, sweep_column
from pagesim.reports.glossary import SUMMARY_BY_KEY
from pagesim.reports.units import format_seconds, format_value

KEEPS_UP = 0.9  # completed / offered requests per second
KNEE_FACTOR = 2.0  # normalized latency vs its value at the lowest rate
LATENCY = "normalized_latency_mean_s"


def axis_columns(sweep: pd.DataFrame) -> list[str]:
    """The swept axes of a sweep table: the columns named by a dotted scenario path (`pagesim
    sweep` names them so), in order; a table without any (a hand-made one) may name its axes
    `rate` and `block_size`, which are otherwise summary keys."""
    dotted = [str(c) for c in sweep.columns if "." in str(c)]
    if dotted:
        return dotted
    return [c for c in (RATE_COLUMN, f"{RATE_COLUMN}_per_s", "block_size") if c in sweep]


def _short(axis: str) -> str:
    return axis.rsplit(".", 1)[-1]


def _numbers(frame: pd.DataFrame, column: str) -> pd.Series:
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
        named += [f"{_short(a)} = {v}" for a, v in zip(axes, parts[start:], strict=True)]
        out.append((", ".join(named) or str(parts[0]), rows))
    return out


def knee_sentence(name: str, rows: pd.DataFrame, rate: str) -> str | None:
    """Where one curve (a system's rows, by rate) stops keeping up, in one sentence."""
    rows = rows.assign(_rate=_numbers(rows, rate)).sort_values("_rate")
    rates = rows["_rate"].to_numpy(float)
    if LATENCY not in rows or "throughput_req_s" not in rows or len(rates) < 2:
        return None
    latency = _numbers(rows, LATENCY).to_numpy(float)
    served = _numbers(rows, "throughput_req_s").to_numpy(float)
    base = latency[0]
    if not base > 0:
        return None
    kept = [s >= KEEPS_UP * r and lat <= KNEE_FACTOR * base
            for r, s, lat in zip(rates, served, latency, strict=True)]  # fmt: skip
    light = f"{format_seconds(base)}/token at {rates[0]:g} req/s"
    if all(kept):
        return (
            f"{name}: no knee up to {rates[-1]:g} req/s (normalized latency "
            f"{format_seconds(latency[-1])}/token, {light})."
        )
    first = kept.index(False)
    if first == 0:
        return (
            f"{name}: already saturated at the lowest rate, {rates[0]:g} req/s "
            f"(completes {served[0]:.3g} req/s)."
        )
    return (
        f"{name}: keeps up to {rates[first - 1]:g} req/s ({light}); at {rates[first]:g} req/s "
        f"it completes {served[first]:.3g} req/s and latency is "
        f"{format_seconds(latency[first])}/token ({latency[first] / base:.2g}x): the knee lies "
        f"between {rates[first - 1]:g} and {rates[first]:g} req/s."
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
    what = info.label if info else metric
    return f"{what}, {_short(axis)} from {x.min():g} to {x.max():g}: " + "; ".join(moves) + "."


def derive_sweep_findings(sweep: pd.DataFrame) -> list[str]:
    """A few factual sentences about a sweep table's curves (plain text; the page escapes)."""
    if sweep.empty:
        return []
    axes = axis_columns(sweep)
    rate = sweep_column(sweep, RATE_COLUMN)
    facts: list[str] = []
    if rate is not None:
        others = [a for a in axes if a != rate]
        for name, rows in _groups(sweep, others):
            sentence = knee_sentence(name, rows, rate)
            if sentence:
                facts.append(sentence)
    numeric = [a for a in axes if a != rate and _numbers(sweep, a).notna().all()]
    for axis in numeric:
        for metric in curve_metrics(sweep):
            sentence = axis_sentence(sweep, axis, metric)
            if sentence:
                facts.append(sentence)
    return facts

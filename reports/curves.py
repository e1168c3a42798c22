"""Plots across runs (sweeps): normalized latency vs request rate, the block-size ablation, and
any metric against a swept axis.

Sweep plots take a pandas table with one row per (system, sweep point) whose columns are the
summary keys plus the swept values (`rate`, `block_size`, or axes named by their dotted path).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

from pagesim.reports.glossary import SUMMARY_BY_KEY, Unit
from pagesim.reports.style import (
    LINE_STYLES,
    figure,
    label,
    legend_below,
    log_scale,
    no_data,
    plain_ticks,
    save,
    system_color,
)
from pagesim.reports.sweep_axes import is_axis

RATE_COLUMN = "rate"  # requests per second, the swept arrival rate
LATENCY_COLUMNS = {  # column -> line style
    "normalized_latency_mean_s": "-",
    "normalized_latency_p90_s": "--",
}
WASTE_COLUMNS = ("kv_waste_share", "kv_internal_frag_share")  # first present is plotted
THROUGHPUT_COLUMNS = {
    "throughput_tok_s": "throughput (output tok/s)",
    "throughput_req_s": "throughput (req/s)",
}


def sweep_column(table: pd.DataFrame, name: str) -> str | None:
    """The column holding a swept value: an axis named by its dotted scenario path ending in
    `name` (for the rate also `rate_per_s`; the CLI's sweep table names axes that way, e.g.
    workload.arrival.rate_per_s), else `name` itself (a hand-made table; `block_size` is also a
    summary key, which varies only when the block size was swept)."""
    names = (name, f"{name}_per_s") if name == RATE_COLUMN else (name,)
    dotted = [str(c) for c in table.columns if "." in str(c) and is_axis(c)]
    found = next((c for c in dotted if c.rsplit(".", 1)[-1] in names), None)
    return found or next((c for c in names if c in table), None)


def other_axis(table: pd.DataFrame, axis: str) -> str | None:
    """A second swept axis (a column named by a scenario path, with several values), to facet
    panels by."""
    return next(
        (
            str(c)
            for c in table.columns
            if is_axis(c) and c != axis and table[c].astype(str).nunique() > 1
        ),
        None,
    )


def _systems(table: pd.DataFrame) -> list[str]:
    """System names in order of first appearance ("" when the table has no system column)."""
    return list(dict.fromkeys(table["system"].astype(str))) if "system" in table else [""]


def _rows_of(table: pd.DataFrame, system: str) -> pd.DataFrame:
    return table[table["system"].astype(str) == system] if "system" in table else table


def _usable(table: pd.DataFrame, columns: Sequence[str | None]) -> pd.DataFrame:
    """Rows where every named column is present and finite (a sweep table mixes axes), with
    those columns as numbers (a table read back from CSV may hold them as text)."""
    if any(c is None or c not in table for c in columns):
        return table.iloc[0:0]
    values = table[list(columns)].apply(pd.to_numeric, errors="coerce")
    usable = np.isfinite(values.to_numpy(dtype=float)).all(axis=1)
    rows: pd.DataFrame = table.assign(**{str(c): values[c] for c in columns})[usable]
    return rows


def _log_if_wide(ax: Axes, values: np.ndarray, ratio: float = 30.0) -> None:
    positive = values[np.isfinite(values) & (values > 0)]
    if len(positive) and positive.max() / positive.min() > ratio:
        log_scale(ax, "y")


def plot_latency_vs_rate(
    sweep: pd.DataFrame, path: Path, *, rate_column: str = RATE_COLUMN, facet: str | None = None
) -> Path:
    """Normalized latency (s/token) vs request rate (req/s), a line per system (the vLLM figure).

    Needs columns `rate_column` and normalized_latency_mean_s (p90 drawn dashed when present),
    optionally system; rows missing either are ignored. `facet` names a column (e.g. workload)
    that splits the plot into panels.
    """
    table = _usable(sweep, [rate_column, "normalized_latency_mean_s"])
    systems = _systems(table)
    present = [c for c in LATENCY_COLUMNS if c in table]
    panels = [("", table)] if facet is None or facet not in table else list(table.groupby(facet))
    with figure(1, max(1, len(panels)), 4.5, sharey=True) as (fig, axes):
        for ax, (panel, rows) in zip(axes[0], panels, strict=True):
            ax.set_title(label(f"{facet} = " + str(panel), 60) if facet else "", loc="left")
            ax.set_xlabel("request rate (req/s)")
            if rows.empty:
                no_data(ax, f"needs columns {rate_column!r} and normalized_latency_mean_s")
                continue
            for i, system in enumerate(systems):
                line = _rows_of(rows, system).sort_values(rate_column)
                for column in present:
                    ax.plot(
                        line[rate_column],
                        line[column],
                        LATENCY_COLUMNS[column],
                        marker="o",
                        ms=4,
                        color=system_color(i),
                    )
            _log_if_wide(ax, rows[present].apply(pd.to_numeric, errors="coerce").to_numpy(float))
        axes[0, 0].set_ylabel("normalized latency (s/token)\nsolid: mean, dashed: p90")
        fig.suptitle("Normalized latency (E2E / output tokens) vs request rate")
        handles = [Line2D([], [], color=system_color(i), marker="o") for i in range(len(systems))]
        names = [label(s) or "all runs" for s in systems]
        legend_below(fig, handles if not table.empty else [], names, min(4, len(names)))
        return save(fig, path)


def plot_block_size_ablation(
    sweep: pd.DataFrame, path: Path, *, block_column: str = "block_size"
) -> Path:
    """KV waste share, throughput and normalized latency vs block size (tokens, log2 axis), a
    line per system: the vLLM paper's §7 trade-off (small blocks waste little memory; large
    blocks read KV in fewer, longer pieces).

    Needs columns `block_column`, one of kv_waste_share / kv_internal_frag_share, one of
    throughput_tok_s / throughput_req_s and normalized_latency_mean_s; optionally system.
    Rows missing them are ignored.
    """
    waste = next((c for c in WASTE_COLUMNS if c in sweep), None)
    throughput = next((c for c in THROUGHPUT_COLUMNS if c in sweep), None)
    systems = _systems(_usable(sweep, [block_column]))
    is_internal = waste == "kv_internal_frag_share"
    panels = (
        (
            waste,
            100.0,
            "Internal fragmentation" if is_internal else "KV memory waste",
            "share of KV capacity, time-averaged (%)",
        ),
        (throughput, 1.0, "Throughput", THROUGHPUT_COLUMNS.get(throughput or "", "throughput")),
        ("normalized_latency_mean_s", 1.0, "Normalized latency", "mean E2E / output token (s)"),
    )
    with figure(1, 3, 4.2) as (fig, axes):
        for ax, (column, scale, title, unit) in zip(axes[0], panels, strict=True):
            ax.set_title(title, loc="left")
            ax.set_ylabel(unit)
            ax.set_xlabel("block size (tokens)")
            rows = _usable(sweep, [block_column, column])
            if rows.empty:
                no_data(ax, f"needs {block_column} and {column or 'this metric'}")
                continue
            for i, system in enumerate(systems):
                line = _rows_of(rows, system).sort_values(block_column)
                ax.plot(line[block_column], scale * line[column], marker="o", color=system_color(i))
            plain_ticks(ax, "x", [float(b) for b in rows[block_column]])
            ax.set_ylim(bottom=0)
        fig.suptitle("Block-size ablation: memory waste, throughput and latency vs block size")
        handles = [Line2D([], [], color=system_color(i), marker="o") for i in range(len(systems))]
        legend_below(fig, handles, [label(s) or "all runs" for s in systems], min(4, len(systems)))
        return save(fig, path)


# Metrics a generic sweep plot draws, when the table has them (and they are not all zero).
CURVE_METRICS: dict[str, tuple[str, float]] = {  # column -> (panel title, scale)
    "kv_saved_of_unshared_share": ("Memory saved by sharing (% of unshared)", 100.0),
    "throughput_tok_s": ("Throughput (output tok/s)", 1.0),
    "tpot_p50_s": ("TPOT, median (ms)", 1e3),
    "normalized_latency_mean_s": ("Normalized latency, mean (s/token)", 1.0),
    "kv_waste_share": ("KV memory waste (% of capacity)", 100.0),
}
# What an SLO axis changes: the SLO judges the same simulation, so only these move with it.
SLO_METRICS: dict[str, tuple[str, float]] = {
    "goodput_req_s_per_gpu": ("Goodput per GPU (req/s meeting the SLO)", 1.0),
    "goodput_req_s": ("Goodput (req/s meeting the SLO)", 1.0),
    "slo_share": ("SLO attainment (% of requests)", 100.0),
}
SLO_PREFIX = "slo."  # axes under [slo] change no simulation


def is_slo_axis(axis: str) -> bool:
    return axis.startswith(SLO_PREFIX)


def slo_metrics(sweep: pd.DataFrame) -> list[str]:
    """Goodput (per GPU when the table has it, else in total) and SLO attainment."""
    found = [c for c in SLO_METRICS if c in sweep]
    if "goodput_req_s_per_gpu" in found and "goodput_req_s" in found:
        found.remove("goodput_req_s")
    return found


def panel(column: str) -> tuple[str, float]:
    """(title, scale) of a metric's panel: CURVE_METRICS's, else the glossary's label with its
    unit (a share in %, a time in ms)."""
    if column in CURVE_METRICS or column in SLO_METRICS:
        return (CURVE_METRICS | SLO_METRICS)[column]
    metric = SUMMARY_BY_KEY.get(column)
    if metric is None:
        return column, 1.0
    if metric.unit is Unit.SHARE:
        return f"{metric.label} (%)", 100.0
    if metric.unit in (Unit.SECONDS, Unit.SECONDS_PER_TOKEN):
        return (
            f"{metric.label} (ms{'/token' if metric.unit is Unit.SECONDS_PER_TOKEN else ''})",
            1e3,
        )
    if metric.unit in (Unit.COUNT, Unit.RATIO):
        return metric.label, 1.0
    return f"{metric.label} ({metric.unit.value})", 1.0


def curve_metrics(sweep: pd.DataFrame) -> list[str]:
    """The CURVE_METRICS a sweep table holds with some non-zero value."""
    found = []
    for column in CURVE_METRICS:
        if column in sweep:
            values = pd.to_numeric(sweep[column], errors="coerce")
            if (values.abs() > 0).any():
                found.append(column)
    return found


def plot_sweep_curves(
    sweep: pd.DataFrame, path: Path, *, x: str, group: str | None, metrics: Sequence[str]
) -> Path:
    """Each of `metrics` (a panel each) against the numeric axis `x`: a line per system and,
    with a second axis `group`, per value of it (color by group value, line style by system).

    Needs columns `x`, the metrics, optionally system and `group`; rows missing a value are
    left out of that panel.
    """
    systems = _systems(sweep)
    groups = list(dict.fromkeys(sweep[group].astype(str))) if group in sweep else [""]
    ncols = 3 if len(metrics) in (3, 5, 6) else max(1, min(2, len(metrics)))
    nrows = max(1, math.ceil(len(metrics) / ncols))
    with figure(nrows, ncols, 0.9 + 3.4 * nrows) as (fig, axes):
        for ax in axes.ravel()[len(metrics) :]:
            ax.set_visible(False)
        for ax, column in zip(axes.ravel(), metrics, strict=False):
            title, scale = panel(column)
            ax.set_title(label(title, 60), loc="left")
            short = x.rsplit(".", 1)[-1]
            ax.set_xlabel(label(f"SLO {short}" if is_slo_axis(x) else short, 40))
            rows = _usable(sweep, [x, column])
            if rows.empty:
                no_data(ax, f"no values of {column}")
                continue
            for g, value in enumerate(groups):
                picked = rows[rows[group].astype(str) == value] if group in rows else rows
                for i, system in enumerate(systems):
                    line = _rows_of(picked, system).sort_values(x)
                    if line.empty:
                        continue
                    ax.plot(
                        line[x],
                        scale * line[column],
                        marker="o",
                        ms=4,
                        color=system_color(g if group else i),
                        ls=LINE_STYLES[i % len(LINE_STYLES)] if group else "-",
                    )
            values = sorted({float(v) for v in rows[x]})
            if len(values) <= 12:
                plain_ticks(ax, "x", values)
            ax.set_ylim(bottom=0)
        handles, names = [], []
        for g, value in enumerate(groups if group else []):
            handles.append(Line2D([], [], color=system_color(g), marker="o"))
            names.append(label(f"{group.rsplit('.', 1)[-1]} = {value}") if group else "")
        for i, system in enumerate(systems if not group or len(systems) > 1 else []):
            handles.append(
                Line2D(
                    [],
                    [],
                    color="black" if group else system_color(i),
                    ls=LINE_STYLES[i % len(LINE_STYLES)] if group else "-",
                )
            )
            names.append(label(system) or "all runs")
        where = f" by {group.rsplit('.', 1)[-1]}" if group else ""
        what = "goodput" if is_slo_axis(x) else "metrics"
        fig.suptitle(label(f"Sweep: {what} vs {x.rsplit('.', 1)[-1]}{where}", 90))
        legend_below(fig, handles, names, min(4, len(names)))
        return save(fig, path)

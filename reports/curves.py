"""Plots across runs: normalized latency vs request rate, block-size ablation, calibration curves.

Sweep plots take a pandas table with one row per (system, sweep point) whose columns are the
summary keys plus the swept values (`rate`, `block_size`). Calibration plots take the dictionary
format documented in `parse_calibration`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

from pagesim.reports.style import (
    figure,
    label,
    legend_below,
    log_scale,
    no_data,
    save,
    system_color,
    time_scale,
)

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
    """The column holding a swept value: `name` itself (for the rate also `rate_per_s`), or an
    axis named by its dotted scenario path ending in one of those (the CLI's sweep table names
    axes that way, e.g. workload.arrival.rate_per_s)."""
    names = (name, f"{name}_per_s") if name == RATE_COLUMN else (name,)
    for column in names:
        if column in table:
            return column
    dotted = [str(c) for c in table.columns if "." in str(c)]
    return next((c for c in dotted if c.rsplit(".", 1)[-1] in names), None)


def other_axis(table: pd.DataFrame, axis: str) -> str | None:
    """A second swept axis (a dotted column with several values), to facet panels by."""
    return next(
        (str(c) for c in table.columns if "." in str(c) and c != axis and table[c].nunique() > 1),
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
    """KV waste share and throughput vs block size (tokens, log2 axis), a line per system.

    Needs columns `block_column`, one of kv_waste_share / kv_internal_frag_share, and one of
    throughput_tok_s / throughput_req_s; optionally system. Rows missing them are ignored.
    """
    waste = next((c for c in WASTE_COLUMNS if c in sweep), None)
    throughput = next((c for c in THROUGHPUT_COLUMNS if c in sweep), None)
    systems = _systems(_usable(sweep, [block_column]))
    with figure(1, 2, 4.2) as (fig, axes):
        left, right = axes[0]
        is_internal = waste == "kv_internal_frag_share"
        left.set_title("Internal fragmentation" if is_internal else "KV memory waste", loc="left")
        left.set_ylabel("share of KV capacity, time-averaged (%)")
        right.set_title("Throughput", loc="left")
        right.set_ylabel(THROUGHPUT_COLUMNS.get(throughput or "", "throughput"))
        for ax, column, scale in ((left, waste, 100.0), (right, throughput, 1.0)):
            ax.set_xlabel("block size (tokens)")
            rows = _usable(sweep, [block_column, column])
            if rows.empty:
                no_data(
                    ax,
                    "needs block_size and " + ("a waste share" if ax is left else "a throughput"),
                )
                continue
            for i, system in enumerate(systems):
                line = _rows_of(rows, system).sort_values(block_column)
                ax.plot(line[block_column], scale * line[column], marker="o", color=system_color(i))
            ticks = sorted({int(b) for b in rows[block_column]})
            if ticks and min(ticks) > 0:
                ax.set_xscale("log", base=2)
                ax.minorticks_off()
            ax.set_xticks(ticks, [str(t) for t in ticks])
            ax.set_ylim(bottom=0)
        fig.suptitle("Block-size ablation: KV waste and throughput against tokens per block")
        handles = [Line2D([], [], color=system_color(i), marker="o") for i in range(len(systems))]
        legend_below(fig, handles, [label(s) or "all runs" for s in systems], min(4, len(systems)))
        return save(fig, path)


@dataclass(frozen=True)
class CalibrationPanel:
    """One measured cost curve. Times in seconds; arrays are 1-D.

    x, measured_s (and p10/p90 when given) have one entry per measured point; fitted_s and
    roofline_s are evaluated at model_x (defaults to x).
    """

    title: str
    x_label: str
    x: np.ndarray
    measured_s: np.ndarray
    measured_p10_s: np.ndarray | None = None
    measured_p90_s: np.ndarray | None = None
    model_x: np.ndarray | None = None
    fitted_s: np.ndarray | None = None
    roofline_s: np.ndarray | None = None
    log_x: bool = False
    log_y: bool = False


def parse_calibration(calibration: Mapping[str, object]) -> tuple[str, list[CalibrationPanel]]:
    """(device, panels) from the calibration input format; ValueError names what is wrong.

    Format (JSON-friendly; lists or arrays; times in seconds)::

        {"device": "NVIDIA H200",                     # optional, shown in the title
         "panels": [
           {"title": "decode attention", "x_label": "total KV tokens",
            "x": [...], "measured_s": [...],            # required, same length
            "measured_p10_s": [...], "measured_p90_s": [...],   # optional, as x
            "model_x": [...],                           # optional x of the two curves below
            "fitted_s": [...], "roofline_s": [...],     # optional, as model_x (or x)
            "log_x": true, "log_y": false}]}            # optional

    A single panel dict (with "x" at the top level) is accepted too.
    """
    raw = calibration.get("panels", [calibration] if "x" in calibration else None)
    if not isinstance(raw, Sequence) or isinstance(raw, str) or not raw:
        raise ValueError("calibration: expected a non-empty list under 'panels'")
    return str(calibration.get("device", "")), [_panel(i, entry) for i, entry in enumerate(raw)]


def _array(
    entry: Mapping[str, object], key: str, where: str, length: int | None = None
) -> np.ndarray | None:
    """entry[key] as a 1-D float array of `length` values; None when absent."""
    if entry.get(key) is None:
        return None
    try:
        values = np.asarray(entry[key], dtype=float).ravel()
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: {key!r} must be numbers ({err})") from None
    if length is not None and len(values) != length:
        raise ValueError(f"{where}: {key!r} has {len(values)} values, expected {length}")
    return values


def _panel(i: int, entry: object) -> CalibrationPanel:
    if not isinstance(entry, Mapping):
        raise ValueError(f"calibration panels[{i}]: expected a mapping, got {type(entry).__name__}")
    where = f"calibration panels[{i}] ({entry.get('title', 'untitled')})"
    x = _array(entry, "x", where)
    measured = _array(entry, "measured_s", where, None if x is None else len(x))
    if x is None or len(x) == 0 or measured is None:
        raise ValueError(f"{where}: 'x' and 'measured_s' are required")
    model_x = _array(entry, "model_x", where)
    n_model = len(model_x) if model_x is not None else len(x)
    return CalibrationPanel(
        title=str(entry.get("title", f"curve {i + 1}")),
        x_label=str(entry.get("x_label", "x")),
        x=x,
        measured_s=measured,
        measured_p10_s=_array(entry, "measured_p10_s", where, len(x)),
        measured_p90_s=_array(entry, "measured_p90_s", where, len(x)),
        model_x=model_x,
        fitted_s=_array(entry, "fitted_s", where, n_model),
        roofline_s=_array(entry, "roofline_s", where, n_model),
        log_x=bool(entry.get("log_x", False)),
        log_y=bool(entry.get("log_y", False)),
    )


def plot_calibration(calibration: Mapping[str, object], path: Path) -> Path:
    """Measured (points, p10–p90 bars) vs fitted (line) vs roofline (dashed), one panel per curve.

    Input format: see `parse_calibration`.
    """
    device, panels = parse_calibration(calibration)
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    with figure(nrows, ncols, 1.2 + 3.4 * nrows) as (fig, axes):
        for ax in axes.ravel()[len(panels) :]:
            ax.set_visible(False)
        for ax, p in zip(axes.ravel(), panels, strict=False):
            scale, unit = time_scale(p.measured_s)
            model_x = p.model_x if p.model_x is not None else p.x
            if p.measured_p10_s is not None and p.measured_p90_s is not None:
                err = np.vstack([p.measured_s - p.measured_p10_s, p.measured_p90_s - p.measured_s])
                ax.errorbar(
                    p.x,
                    scale * p.measured_s,
                    yerr=scale * np.clip(err, 0, None),
                    fmt="o",
                    ms=4,
                    color="black",
                    capsize=2,
                    label="measured (median, p10–p90)",
                )
            else:
                ax.plot(p.x, scale * p.measured_s, "o", ms=4, color="black", label="measured")
            if p.fitted_s is not None:
                ax.plot(
                    model_x, scale * p.fitted_s, "-", color=system_color(0), label="fitted profile"
                )
            if p.roofline_s is not None:
                ax.plot(
                    model_x, scale * p.roofline_s, "--", color=system_color(1), label="roofline"
                )
            ax.set_title(label(p.title, 50), loc="left")
            ax.set_xlabel(label(p.x_label, 50))
            ax.set_ylabel(f"time ({unit})")
            if p.log_x:
                log_scale(ax, "x")
            if p.log_y:
                log_scale(ax, "y")
        legend: dict[str, object] = {}
        for ax in axes.ravel()[: len(panels)]:
            for handle, name in zip(*ax.get_legend_handles_labels(), strict=True):
                legend.setdefault(name, handle)
        handles, names = list(legend.values()), list(legend)
        shown = ["measured"]
        shown += ["fitted"] if any(p.fitted_s is not None for p in panels) else []
        shown += ["roofline"] if any(p.roofline_s is not None for p in panels) else []
        fig.suptitle(
            "Calibration: " + " vs ".join(shown) + (f" on {label(device, 40)}" if device else "")
        )
        legend_below(fig, handles, names, 3)
        return save(fig, path)

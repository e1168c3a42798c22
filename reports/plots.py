"""One function per plot, each `(…, path) -> path`: a PNG written with matplotlib's Agg backend.

Per-run plots take the `RunResult`s of one scenario (systems in a fixed order, so a system keeps
its color across plots). This module holds utilization, latency and preemption plots; the KV
memory plots live in `reports.memory_plots`, the request timeline in `reports.timeline`, sweep
and calibration plots in `reports.curves`, and all are re-exported here: this is the index of
plots. Long steps frames are averaged into time buckets (`reports.frames`) before plotting.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from pagesim.reports.calibration_plots import parse_calibration, plot_calibration
from pagesim.reports.curves import (
    plot_block_size_ablation,
    plot_latency_vs_rate,
    plot_sweep_curves,
)
from pagesim.reports.frames import (
    activity_means,
    as_number,
    bucket_edges,
    cdf_points,
    cumulative_counts,
    finished,
    numeric,
)
from pagesim.reports.memory_plots import (
    has_sharing,
    plot_kv_memory,
    plot_memory_saved,
    plot_waste_breakdown,
)
from pagesim.reports.style import (
    LINE_STYLES,
    figure,
    label,
    legend_below,
    log_scale,
    no_data,
    save,
    system_color,
    time_label,
    time_scale,
)
from pagesim.reports.timeline import plot_request_timeline
from pagesim.simulator.metrics.result import RunResult

__all__ = [
    "has_sharing",
    "parse_calibration",
    "plot_block_size_ablation",
    "plot_calibration",
    "plot_kv_memory",
    "plot_latency_cdfs",
    "plot_latency_vs_rate",
    "plot_memory_saved",
    "plot_preemptions_swaps",
    "plot_request_timeline",
    "plot_sweep_curves",
    "plot_utilization",
    "plot_waste_breakdown",
]


_UTILIZATION = {
    "slot_utilization": "Batch slot utilization",
    "mfu": "Compute utilization (MFU)",
    "mbu": "Bandwidth utilization (MBU)",
}


def plot_utilization(results: Sequence[RunResult], path: Path) -> Path:
    """Slot, compute (MFU) and bandwidth (MBU) utilization over time, systems overlaid; each
    panel's title gives each system's mean for that panel's measure (the summary's, over busy
    time), the legend only which line is which system.

    Needs steps columns start_s, duration_s, slot_utilization, mfu, mbu; idle time counts as 0.
    A fleet's line is the mean over its replicas.
    """
    with figure(3, 1, 7.5, sharex=True) as (fig, axes):
        handles = [
            Line2D([], [], color=system_color(i), ls=LINE_STYLES[i % len(LINE_STYLES)])
            for i in range(len(results))
        ]
        edges = [bucket_edges(result.steps) for result in results]
        means = [  # every measure of a system at once: a fleet's steps are split once
            activity_means(r.steps, [c for c in _UTILIZATION if c in r.steps], e)
            for r, e in zip(results, edges, strict=True)
        ]
        for row, (column, title) in enumerate(_UTILIZATION.items()):
            ax = axes[row, 0]
            ax.set_title(label(title + _means(results, column), 150), loc="left")
            ax.set_ylabel("%")
            plotted = False
            for i, result in enumerate(results):
                if len(edges[i]) < 2 or column not in result.steps:
                    continue
                y = 100 * means[i][column]
                ax.plot(
                    edges[i],
                    np.append(y, y[-1]),  # the last bucket drawn to its end
                    color=system_color(i),
                    ls=LINE_STYLES[i % len(LINE_STYLES)],
                    lw=1.2,
                    drawstyle="steps-post",
                )
                plotted = True
            if not plotted:
                no_data(ax, "no steps recorded")
            ax.set_ylim(bottom=0)
            ax.set_xlim(left=0)
        axes[-1, 0].set_xlabel(time_label(results))
        fig.suptitle("Utilization over time: batch slots, compute, bandwidth (bucketed means)")
        names = [label(r.system) for r in results]
        legend_below(fig, handles, names, min(4, len(names)))
        return save(fig, path)


MEANS_IN_TITLE = 4  # systems whose means a panel's title lists (more: the summary table has them)


def _means(results: Sequence[RunResult], column: str) -> str:
    """' — busy-time mean: a 12%, b 0.4%' from the systems' summaries (which average over the
    steps after warm-up, idle time left out), for a panel's title."""
    parts = []
    for result in results[:MEANS_IN_TITLE]:
        mean = as_number(result.summary.get(column))
        if mean is not None:
            pct = 100 * mean
            parts.append(
                f"{label(result.system, 20)} {pct:.0f}%"
                if pct >= 10
                else f"{label(result.system, 20)} {pct:.2g}%"
            )
    return (" — busy-time mean: " + ", ".join(parts)) if parts else ""


_LATENCIES = {"ttft_s": "TTFT", "tpot_s": "TPOT", "e2e_s": "E2E latency"}
LOG_SPAN = 4.0  # latency CDFs spanning more than this factor get a log time axis


def plot_latency_cdfs(results: Sequence[RunResult], path: Path) -> Path:
    """CDFs of TTFT, TPOT and E2E over finished (in-window) requests, systems overlaid.

    Needs request columns status, ttft_s, tpot_s, e2e_s (in_window optional). Times shown in
    µs, ms or s by their size; log x-axis when they span more than a factor of
    LOG_SPAN (a long tail on a linear axis squeezes the body of the distribution into a
    corner: TPOT's especially). Systems differ in line style as well as color, so identical
    curves stay visible.
    """
    with figure(1, 3, 4.2) as (fig, axes):
        handles, names = [], []
        for col, (column, title) in enumerate(_LATENCIES.items()):
            ax = axes[0, col]
            ax.set_title(title, loc="left")
            curves = []
            for result in results:
                done = finished(result.requests)
                curves.append(cdf_points(numeric(done, column)))
            every = np.concatenate([x for x, _ in curves]) if curves else np.empty(0)
            scale, unit = time_scale(every)
            ax.set_xlabel(f"{title} ({unit})")
            for i, ((x, y), result) in enumerate(zip(curves, results, strict=True)):
                # Start each curve at 0 so its first step is drawn.
                (line,) = ax.plot(
                    scale * np.insert(x, 0, x[:1]),
                    np.insert(y, 0, [0.0] * min(1, len(y))),
                    color=system_color(i),
                    ls=LINE_STYLES[i % len(LINE_STYLES)],
                    lw=1.6,
                    drawstyle="steps-post",
                )
                if col == 0:
                    handles.append(line)
                    empty = "" if len(x) else " (no finished requests)"
                    names.append(label(result.system) + empty)
            positive = every[every > 0]
            if len(positive) == 0:
                no_data(ax, "no finished requests")
            elif positive.max() / positive.min() > LOG_SPAN:
                log_scale(ax, "x")
            else:
                ax.xaxis.set_major_locator(MaxNLocator(5))
            ax.set_ylim(0, 1.02)
            for q in (0.5, 0.9, 0.99):
                ax.axhline(q, color="#a0aec0", lw=0.6, ls=":")
        axes[0, 0].set_ylabel("share of requests (dotted: p50, p90, p99)")
        fig.suptitle("Latency distributions (finished requests)")
        legend_below(fig, handles, names, min(4, len(names)))
        return save(fig, path)


_EVENT_COLUMNS = ("num_preemptions", "num_swap_out_blocks", "num_swap_in_blocks")


def has_preemptions(results: Sequence[RunResult]) -> bool:
    """Whether any system preempted or swapped (else the plot below would be empty: the report
    says so in a line instead)."""
    keys = ("num_preemptions", "num_swaps", "swapped_blocks")
    return any((as_number(r.summary.get(k)) or 0) > 0 for r in results for k in keys)


def plot_preemptions_swaps(results: Sequence[RunResult], path: Path) -> Path:
    """Cumulative preemptions and swapped blocks (out solid, in dashed) over time, systems overlaid.

    Needs steps columns start_s, num_preemptions, num_swap_out_blocks, num_swap_in_blocks.
    """
    with figure(1, 2, 4.2, sharex=True) as (fig, axes):
        left, right = axes[0, 0], axes[0, 1]
        left.set_title("Preemptions (swap or recompute)", loc="left")
        left.set_ylabel("cumulative preemptions")
        right.set_title("KV blocks swapped to / from CPU", loc="left")
        right.set_ylabel("cumulative blocks")
        handles, names, any_event = [], [], False
        for i, result in enumerate(results):
            steps = result.steps
            if steps.empty:
                continue
            edges = bucket_edges(steps)
            color = system_color(i)
            series = cumulative_counts(steps, _EVENT_COLUMNS, edges)
            any_event |= any(s[-1] > 0 for s in series.values())
            (line,) = left.plot(
                edges, series["num_preemptions"], color=color, drawstyle="steps-post"
            )
            right.plot(edges, series["num_swap_out_blocks"], color=color, drawstyle="steps-post")
            right.plot(
                edges, series["num_swap_in_blocks"], color=color, ls="--", drawstyle="steps-post"
            )
            handles.append(line)
            names.append(
                f"{label(result.system)} ({series['num_preemptions'][-1]:,.0f} preemptions)"
            )
        if not any_event:
            for ax in (left, right):
                no_data(ax, "no preemptions or swaps" if handles else "no steps recorded")
        for ax in (left, right):
            ax.set_xlabel(time_label(results))
            ax.set_ylim(bottom=0)
            ax.set_xlim(left=0)
        handles += [Line2D([], [], color="black"), Line2D([], [], color="black", ls="--")]
        names += ["swapped out (GPU → CPU)", "swapped in (CPU → GPU)"]
        fig.suptitle("Preemptions and swaps over time")
        legend_below(fig, handles, names, 3)
        return save(fig, path)

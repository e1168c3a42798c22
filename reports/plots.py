"""One function per plot, each `(…, path) -> path`: a PNG written with matplotlib's Agg backend.

Per-run plots take the `RunResult`s of one scenario (systems in a fixed order, so a system keeps
its color across plots); sweep and calibration plots live in `reports.curves` and are re-exported
here. Long steps frames are averaged into time buckets (`reports.frames`) before plotting.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot

import numpy as np
from matplotlib.collections import PolyCollection
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from pagesim.reports.curves import (
    parse_calibration,
    plot_block_size_ablation,
    plot_calibration,
    plot_latency_vs_rate,
)
from pagesim.reports.frames import (
    activity_means,
    as_number,
    assign_lanes,
    bucket_edges,
    cdf_points,
    cumulative_counts,
    finished,
    numeric,
    state_means,
)
from pagesim.reports.glossary import WASTE_SHARES
from pagesim.reports.style import (
    KV_COLORS,
    LINE_STYLES,
    figure,
    label,
    legend_below,
    log_scale,
    no_data,
    save,
    system_color,
    time_scale,
)
from pagesim.simulator.metrics.result import KV_CATEGORIES, RunResult

__all__ = [
    "parse_calibration",
    "plot_block_size_ablation",
    "plot_calibration",
    "plot_kv_memory",
    "plot_latency_cdfs",
    "plot_latency_vs_rate",
    "plot_preemptions_swaps",
    "plot_request_timeline",
    "plot_utilization",
    "plot_waste_breakdown",
]

TIME_LABEL = "simulated time (s)"
PREFILL_COLOR = "#dd6b20"
DECODE_COLOR = "#2b6cb0"
HELD_COLOR = "#cbd5e0"  # a finished request still holding its slot (static batching)


def _kv_handles() -> list[Patch]:
    return [Patch(color=KV_COLORS[c], label=name) for c, name in KV_CATEGORIES.items()]


def plot_kv_memory(results: Sequence[RunResult], path: Path) -> Path:
    """KV capacity over time, stacked by category (share of capacity), one panel per system.

    Needs steps columns start_s, duration_s and the five KV_CATEGORIES slot counts. A panel
    whose memory in use never passes 40% is zoomed (its title says so), so that a light load is
    not a flat line under a sea of free memory.
    """
    n = max(1, len(results))
    with figure(n, 1, 1.0 + 2.0 * n, sharex=True) as (fig, axes):
        for ax, result in zip(axes[:, 0], results, strict=False):
            capacity = as_number(result.summary.get("kv_capacity_tokens"))
            title = label(result.system, 60)
            title += f" (capacity {capacity:,.0f} tokens)" if capacity is not None else ""
            ax.set_title(title, loc="left")
            ax.set_ylabel("share of KV capacity (%)")
            ax.set_ylim(0, 100)
            edges = bucket_edges(result.steps)
            if len(edges) < 2:
                no_data(ax, "no steps recorded")
                continue
            means = state_means(result.steps, list(KV_CATEGORIES), edges)
            total = np.sum([means[c] for c in KV_CATEGORIES], axis=0)
            with np.errstate(invalid="ignore", divide="ignore"):
                shares = [100 * means[c] / total for c in KV_CATEGORIES]
            ax.stackplot(
                edges,
                [np.append(s, s[-1]) for s in shares],
                colors=[KV_COLORS[c] for c in KV_CATEGORIES],
                step="post",
                linewidth=0,
            )
            ax.set_xlim(left=0)
            peak_used = float(np.nanmax(100 - shares[-1], initial=0.0))  # the last one is free
            if peak_used < 40:
                top = next(t for t in (0.5, 1, 2, 5, 10, 20, 30, 50) if t >= 1.15 * peak_used)
                ax.set_ylim(0, top)
                ax.set_title(f"{title}: y-axis zoomed to 0–{top}%", loc="left")
        axes[-1, 0].set_xlabel(TIME_LABEL)
        fig.suptitle("KV memory over time by category")
        legend_below(fig, _kv_handles(), list(KV_CATEGORIES.values()), 5)
        return save(fig, path)


def _waste_shares(result: RunResult) -> tuple[list[float] | None, bool]:
    """The five category shares from the summary, else a display average of the steps frame.

    Returns (shares or None, True when they came from the steps frame).
    """
    values = [as_number(result.summary.get(k)) for k in WASTE_SHARES]
    if all(v is not None for v in values):
        return [v for v in values if v is not None], False
    edges = bucket_edges(result.steps)
    if len(edges) < 2:
        return None, False
    whole = np.array([edges[0], edges[-1]])
    means = state_means(result.steps, list(WASTE_SHARES.values()), whole)
    slots = np.array([float(means[c][0]) for c in WASTE_SHARES.values()])
    total = slots.sum()
    return (list(slots / total), True) if total > 0 else (None, False)


def plot_waste_breakdown(results: Sequence[RunResult], path: Path) -> Path:
    """Where KV memory went, time-averaged, one stacked bar per system (100% = capacity).

    Needs summary keys kv_token_share, kv_reserved_share, kv_internal_frag_share,
    kv_external_frag_share, kv_free_share (falls back to the steps' KV columns when missing).
    """
    n = max(1, len(results))
    with figure(1, 1, 1.6 + 0.55 * n) as (fig, axes):
        ax = axes[0, 0]
        names, from_steps = [], False
        for i, result in enumerate(results):
            shares, derived = _waste_shares(result)
            from_steps |= derived
            names.append(label(result.system, 28) + (" *" if derived else ""))
            if shares is None:
                ax.text(1, i, "no data", va="center", color="#718096", style="italic")
                continue
            left = 0.0
            for share, column in zip(shares, WASTE_SHARES.values(), strict=True):
                ax.barh(i, 100 * share, left=100 * left, color=KV_COLORS[column], height=0.6)
                if share >= 0.05:
                    dark = column in ("kv_token_slots", "kv_internal_frag_slots")
                    ax.text(
                        100 * (left + share / 2),
                        i,
                        f"{100 * share:.0f}%",
                        ha="center",
                        va="center",
                        fontsize=8,
                        color="white" if dark else "black",
                    )
                left += share
            waste = sum(shares[1:4])
            ax.text(101, i, f"waste {100 * waste:.0f}%", va="center", fontsize=9)
        ax.set_yticks(range(len(names)), names)
        ax.set_ylim(len(names) - 0.5 if names else 0.5, -0.5)
        ax.set_xlim(0, 100)
        note = (
            "\n* averaged from the steps frame (the summary lacks the shares)" if from_steps else ""
        )
        ax.set_xlabel("share of KV capacity, time-averaged (%)" + note)
        ax.grid(axis="y", visible=False)
        ax.set_title(
            "KV memory waste (waste = reservation + internal + external fragmentation)", loc="left"
        )
        if not results:
            no_data(ax, "no systems")
        legend_below(fig, _kv_handles(), list(KV_CATEGORIES.values()), 5)
        return save(fig, path)


_UTILIZATION = {
    "slot_utilization": "Batch slot utilization",
    "mfu": "Compute utilization (MFU)",
    "mbu": "Bandwidth utilization (MBU)",
}


def plot_utilization(results: Sequence[RunResult], path: Path) -> Path:
    """Slot, compute (MFU) and bandwidth (MBU) utilization over time, systems overlaid.

    Needs steps columns start_s, duration_s, slot_utilization, mfu, mbu; idle time counts as 0.
    """
    with figure(3, 1, 7.5, sharex=True) as (fig, axes):
        handles, names = [], []
        for row, (column, title) in enumerate(_UTILIZATION.items()):
            ax = axes[row, 0]
            ax.set_title(title, loc="left")
            ax.set_ylabel("%")
            plotted = False
            for i, result in enumerate(results):
                edges = bucket_edges(result.steps)
                if len(edges) < 2 or column not in result.steps:
                    continue
                y = 100 * activity_means(result.steps, [column], edges)[column]
                (line,) = ax.plot(
                    edges,
                    np.append(y, y[-1]),  # the last bucket drawn to its end
                    color=system_color(i),
                    ls=LINE_STYLES[i % len(LINE_STYLES)],
                    lw=1.2,
                    drawstyle="steps-post",
                )
                plotted = True
                if row == 0:
                    mean = as_number(result.summary.get(column))
                    note = f" (mean {100 * mean:.0f}%)" if mean is not None else ""
                    handles.append(line)
                    names.append(label(result.system) + note)
            if not plotted:
                no_data(ax, "no steps recorded")
            ax.set_ylim(bottom=0)
            ax.set_xlim(left=0)
        axes[-1, 0].set_xlabel(TIME_LABEL)
        fig.suptitle("GPU utilization over time (time-bucketed means)")
        legend_below(fig, handles, names, min(3, len(names)))
        return save(fig, path)


def _bars(
    lane: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    color: str,
    edgecolor: str = "none",
    hatch: str | None = None,
) -> PolyCollection:
    """Horizontal bars [start, end) centered on each lane, as one collection."""
    low, high = lane - 0.375, lane + 0.375
    corners = [(start, low), (end, low), (end, high), (start, high)]
    verts = np.stack([np.column_stack(c) for c in corners], axis=1)  # [n, 4, 2]
    return PolyCollection(
        list(verts), facecolors=color, edgecolors=edgecolor, linewidths=0.8, hatch=hatch
    )


def plot_request_timeline(results: Sequence[RunResult], path: Path, max_requests: int = 50) -> Path:
    """Batch slots over time: each request a bar from admission to finish (prefill, then decode).

    Shows the first `max_requests` admitted requests of each system (a contiguous window keeps
    the slot picture true). Needs request columns request_id, admitted_s, first_token_s,
    finish_s; num_preemptions (optional) hatches preempted requests.
    """
    chosen, lanes = [], []
    for result in results:
        r = result.requests
        if r.empty or "admitted_s" not in r:
            chosen.append(r.iloc[0:0])
            lanes.append(np.empty(0, dtype=int))
            continue
        admitted, finish = numeric(r, "admitted_s"), numeric(r, "finish_s")
        last = numeric(r, "last_token_s") if "last_token_s" in r else finish
        last = np.where(np.isfinite(last), last, finish)
        ok = np.isfinite(admitted) & np.isfinite(finish)
        window = (
            r[ok]
            .assign(admitted_s=admitted[ok], finish_s=finish[ok], last_token_s=last[ok])
            .sort_values("admitted_s", kind="stable")
            .head(max_requests)
        )
        chosen.append(window)
        # A slot is busy until finish: static batching holds a done member's slot to batch end.
        lanes.append(assign_lanes(numeric(window, "admitted_s"), numeric(window, "finish_s")))
    heights = [max(3, int(lane.max()) + 1 if len(lane) else 3) for lane in lanes] or [3]
    total_in = min(16.0, 1.2 + 0.22 * sum(heights) + 0.6 * len(heights))
    with figure(len(heights), 1, total_in, sharex=True, height_ratios=heights) as (fig, axes):
        for ax, result, window, lane in zip(axes[:, 0], results, chosen, lanes, strict=False):
            total = int(np.isfinite(numeric(result.requests, "admitted_s")).sum())
            shown = (
                f"all {total} admitted requests"
                if len(window) == total
                else f"first {len(window)} of {total} admitted requests"
            )
            ax.set_title(
                f"{label(result.system, 60)}: {shown if total else 'none admitted'}", loc="left"
            )
            ax.set_ylabel("batch slot")
            if window.empty:
                no_data(ax, "no admitted requests")
                ax.set_yticks([])
                continue
            admitted, finish = numeric(window, "admitted_s"), numeric(window, "finish_s")
            first_token = numeric(window, "first_token_s")
            first = np.clip(
                np.where(np.isfinite(first_token), first_token, finish), admitted, finish
            )
            preempted = np.nan_to_num(numeric(window, "num_preemptions")) > 0
            # Whole bar in the decode color with white edges (so back-to-back requests in one
            # slot stay apart), the prefill part over its start; one collection per kind, not
            # one patch per bar, keeps drawing fast.
            last = numeric(window, "last_token_s")
            held = finish > last
            if held.any():
                ax.add_collection(
                    _bars(lane[held], last[held], finish[held], HELD_COLOR, edgecolor="white")
                )
            ax.add_collection(_bars(lane, admitted, last, DECODE_COLOR, edgecolor="white"))
            ax.add_collection(_bars(lane, admitted, first, PREFILL_COLOR))
            if preempted.any():
                hatched = _bars(
                    lane[preempted], admitted[preempted], finish[preempted], "none", hatch="///"
                )
                hatched.set_edgecolor("white")
                ax.add_collection(hatched)
            if len(window) <= 30:
                for rid, x, y in zip(window["request_id"], admitted, lane, strict=True):
                    ax.text(x, y, f" {rid}", va="center", ha="left", fontsize=7, color="white")
            ax.set_ylim(int(lane.max()) + 0.6, -0.6)
            ax.yaxis.get_major_locator().set_params(integer=True)
            ax.grid(axis="y", visible=False)
        spans = [w[["admitted_s", "finish_s"]].to_numpy(dtype=float) for w in chosen if len(w)]
        if spans:
            low, high = float(min(s.min() for s in spans)), float(max(s.max() for s in spans))
            pad = 0.02 * (high - low) or 1.0
            axes[0, 0].set_xlim(low - pad, high + pad)  # shared by every panel
        axes[-1, 0].set_xlabel(TIME_LABEL)
        fig.suptitle("Request timeline: batch slots over time")
        names = [
            "admitted → first token (prefill)",
            "first → last token (decode)",
            "done, slot held until the batch returns",
            "was preempted",
        ]
        handles = [
            Patch(color=PREFILL_COLOR),
            Patch(color=DECODE_COLOR),
            Patch(color=HELD_COLOR),
            Patch(facecolor=DECODE_COLOR, edgecolor="white", hatch="///"),
        ]
        legend_below(fig, handles, names, 4)
        return save(fig, path)


_LATENCIES = {"ttft_s": "TTFT", "tpot_s": "TPOT", "e2e_s": "E2E latency"}


def plot_latency_cdfs(results: Sequence[RunResult], path: Path) -> Path:
    """CDFs of TTFT, TPOT and E2E over finished (in-window) requests, systems overlaid.

    Needs request columns status, ttft_s, tpot_s, e2e_s (in_window optional). Times shown in
    µs, ms or s by their size; log x-axis when they span more than two decades. Systems differ
    in line style as well as color, so identical curves stay visible.
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
            elif positive.max() / positive.min() > 100:
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
            ax.set_xlabel(TIME_LABEL)
            ax.set_ylim(bottom=0)
            ax.set_xlim(left=0)
        handles += [Line2D([], [], color="black"), Line2D([], [], color="black", ls="--")]
        names += ["swapped out (GPU → CPU)", "swapped in (CPU → GPU)"]
        fig.suptitle("Preemptions and swaps over time")
        legend_below(fig, handles, names, 3)
        return save(fig, path)

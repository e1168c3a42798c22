"""KV memory plots: capacity over time stacked by category, the time-averaged waste per system,
and the memory sharing saved.

Both take the `RunResult`s of one scenario; categories and their colors are the metrics'
(`KV_CATEGORIES`, `reports.style.KV_COLORS`). Long steps frames are averaged into time buckets
(`reports.frames`) before plotting.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from pagesim.reports.frames import as_number, bucket_edges, state_means
from pagesim.reports.glossary_memory import WASTE_SHARES
from pagesim.reports.style import (
    KV_COLORS,
    figure,
    label,
    legend_below,
    no_data,
    save,
    system_color,
    time_label,
)
from pagesim.simulator.metrics.result import KV_CATEGORIES, RunResult


def _kv_handles() -> list[Patch]:
    return [Patch(color=KV_COLORS[c], label=name) for c, name in KV_CATEGORIES.items()]


def _kv_shares(result: RunResult) -> tuple[np.ndarray, list[np.ndarray]] | None:
    """(bucket edges, the five categories' shares of capacity in % per bucket), or None."""
    edges = bucket_edges(result.steps)
    if len(edges) < 2:
        return None
    means = state_means(result.steps, list(KV_CATEGORIES), edges)
    total = np.sum([means[c] for c in KV_CATEGORIES], axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return edges, [100 * means[c] / total for c in KV_CATEGORIES]


def plot_kv_memory(results: Sequence[RunResult], path: Path) -> Path:
    """KV capacity over time, stacked by category (share of capacity), one panel per system.

    Needs steps columns start_s, duration_s and the five KV_CATEGORIES slot counts. Every panel
    has the same y-axis, so that equal heights mean equal shares; when no system ever uses 40%
    of its capacity, all are zoomed alike (the title says so), so that a light load is not a
    flat line under a sea of free memory. Each panel has its own time axis: systems finish at
    different times, and a shared axis would squeeze the quick ones.
    """
    n = max(1, len(results))
    shares = [_kv_shares(r) for r in results]
    peak_used = max(
        (float(np.nanmax(100 - s[-1], initial=0.0)) for _, s in filter(None, shares)),
        default=100.0,
    )  # the last category is free
    top = 100.0
    if peak_used < 40:
        top = next(t for t in (0.5, 1, 2, 5, 10, 20, 30, 50) if t >= 1.15 * peak_used)
    with figure(n, 1, 1.0 + 2.0 * n) as (fig, axes):
        for ax, result, found in zip(axes[:, 0], results, shares, strict=False):
            capacity = as_number(result.summary.get("kv_capacity_tokens"))
            title = label(result.system, 60)
            title += f" (capacity {capacity:,.0f} tokens)" if capacity is not None else ""
            ax.set_title(title, loc="left")
            ax.set_ylabel("share of KV capacity (%)")
            ax.set_ylim(0, top)
            ax.set_xlabel(time_label(results))
            if found is None:
                no_data(ax, "no steps recorded")
                continue
            edges, panel = found
            ax.stackplot(
                edges,
                [np.append(s, s[-1]) for s in panel],
                colors=[KV_COLORS[c] for c in KV_CATEGORIES],
                step="post",
                linewidth=0,
            )
            ax.set_xlim(edges[0], edges[-1])
        zoom = f" (every panel zoomed to 0–{top:g}%: none uses more)" if top < 100 else ""
        fig.suptitle(f"KV memory over time by category{zoom}")
        legend_below(fig, _kv_handles(), list(KV_CATEGORIES.values()), 5)
        return save(fig, path)


_SAVED = {"kv_prefix_saved_slots": ("prefix caching", "-"), "kv_fork_saved_slots": ("forks", "--")}


def has_sharing(results: Sequence[RunResult]) -> bool:
    """Whether any system saved memory by sharing (the plot below has something to show)."""
    return any((as_number(r.summary.get("kv_saved_share")) or 0) > 0 for r in results)


def plot_memory_saved(results: Sequence[RunResult], path: Path) -> Path:
    """Memory saved by sharing over time, as a share of the KV capacity: by prefix caching
    (solid) and by forks (dashed), a line per system; the legend gives the time average and
    the peak of each system.

    Needs steps columns start_s, duration_s, kv_prefix_saved_slots, kv_fork_saved_slots and
    the five KV categories (their sum is the capacity).
    """
    with figure(1, 1, 4.2) as (fig, axes):
        ax = axes[0, 0]
        handles, names = [], []
        for i, result in enumerate(results):
            steps = result.steps
            edges = bucket_edges(steps)
            if len(edges) < 2 or not all(c in steps for c in _SAVED):
                continue
            means = state_means(steps, [*KV_CATEGORIES, *_SAVED], edges)
            capacity = np.sum([means[c] for c in KV_CATEGORIES], axis=0)
            for column, (_, style) in _SAVED.items():
                with np.errstate(invalid="ignore", divide="ignore"):
                    y = 100 * means[column] / capacity
                if not np.nanmax(y, initial=0.0) > 0:
                    continue
                ax.plot(
                    edges,
                    np.append(y, y[-1]),
                    color=system_color(i),
                    ls=style,
                    lw=1.4,
                    drawstyle="steps-post",
                )
            mean = as_number(result.summary.get("kv_saved_share"))
            peak = as_number(result.summary.get("peak_kv_saved_share"))
            of_unshared = as_number(result.summary.get("kv_saved_of_unshared_share"))
            handles.append(Line2D([], [], color=system_color(i)))
            names.append(
                label(result.system)
                + (f": mean {100 * mean:.1f}%" if mean is not None else "")
                + (f", peak {100 * peak:.1f}% of capacity" if peak is not None else "")
                + (f"; saving {100 * of_unshared:.0f}%" if of_unshared else "")
            )
        if not handles:
            no_data(ax, "no sharing recorded")
        ax.set_ylabel("saved, share of KV capacity (%)")
        ax.set_xlabel(time_label(results))
        ax.set_ylim(bottom=0)
        ax.set_xlim(left=0)
        handles += [Line2D([], [], color="black", ls=s) for _, s in _SAVED.values()]
        names += [f"saved by {what}" for what, _ in _SAVED.values()]
        fig.suptitle("Memory saved by sharing KV blocks (copies not held)")
        legend_below(fig, handles, names, 2)
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


WASTE_WORTH_NAMING = 0.01  # below this for every system, bars are not labelled "waste 0%"


def plot_waste_breakdown(results: Sequence[RunResult], path: Path) -> Path:
    """Where KV memory went, time-averaged, one stacked bar per system (100% = capacity);
    labelled with each system's waste when some system wastes 1% or more.

    Needs summary keys kv_token_share, kv_reserved_share, kv_internal_frag_share,
    kv_external_frag_share, kv_free_share (falls back to the steps' KV columns when missing).
    """
    n = max(1, len(results))
    wastes = [as_number(r.summary.get("kv_waste_share")) or 0.0 for r in results]
    show_waste = max(wastes, default=0.0) >= WASTE_WORTH_NAMING
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
            if show_waste:
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
            "KV memory waste (waste = reservation + internal + external fragmentation)"
            if show_waste
            else "Where KV memory went (no system wasted as much as 1%)",
            loc="left",
        )
        if not results:
            no_data(ax, "no systems")
        legend_below(fig, _kv_handles(), list(KV_CATEGORIES.values()), 5)
        return save(fig, path)

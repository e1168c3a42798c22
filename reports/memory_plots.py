"""KV memory plots: capacity over time stacked by category, and the time-averaged waste per system.

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
from matplotlib.patches import Patch

from pagesim.reports.frames import as_number, bucket_edges, state_means
from pagesim.reports.glossary import WASTE_SHARES
from pagesim.reports.style import (
    KV_COLORS,
    TIME_LABEL,
    figure,
    label,
    legend_below,
    no_data,
    save,
)
from pagesim.simulator.metrics.result import KV_CATEGORIES, RunResult


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

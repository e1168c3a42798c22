"""Plots of fleets (runs whose step table has a `replica` column): each replica's load, KV use and
prefix hit rate over time, and routers (systems) side by side.

Load and KV use come from the step table (time-weighted bucket means; a replica's idle time counts
as zero, as it holds nothing); the hit rate from the request table (prompt tokens served from the
cache over prompt tokens, by first admission, in coarser buckets since requests are sparser than
steps). Nothing here is simulated again.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.reports.bars import Panel, plot_side_by_side
from pagesim.reports.frames import activity_means, as_number, bucket_edges, numeric
from pagesim.reports.style import (
    figure,
    label,
    legend_below,
    no_data,
    save,
    system_color,
    time_label,
)
from pagesim.simulator.metrics.result import KV_CATEGORIES, RunResult

MAX_LINES = 8  # more replicas than this: their range (min to max) and median, not a line each
MAX_FLEETS = 4  # panels drawn for at most this many fleet systems (the summary has them all)
HIT_BUCKETS = 30  # hit-rate buckets over the run (requests are sparser than steps)
COMPARED = (  # summary key, title, axis label, share shown as %
    ("prefix_hit_rate", "Prefix-cache hit rate", "%", True),
    ("ttft_mean_s", "TTFT mean", "s", False),
    ("ttft_p99_s", "TTFT p99", "s", False),
    ("load_imbalance", "Load imbalance", "max / mean", False),
)


def num_replicas(result: RunResult) -> int:
    """Replicas in a run's step table (1 for a single replica's run)."""
    steps = result.steps
    return int(steps["replica"].nunique()) if "replica" in steps and not steps.empty else 1


def fleets(results: Sequence[RunResult]) -> list[RunResult]:
    """The runs of several replicas."""
    return [r for r in results if num_replicas(r) > 1]


def has_fleet(results: Sequence[RunResult]) -> bool:
    return bool(fleets(results))


def has_router_comparison(results: Sequence[RunResult]) -> bool:
    return len(fleets(results)) > 1


def has_prefix_hits(results: Sequence[RunResult]) -> bool:
    """Whether a replica of some fleet served a prompt token from its prefix cache. Where none
    did, the hit-rate panels (a flat zero, or no value at all) are left out."""
    return any(np.nansum(numeric(r.requests, "num_cached_tokens")) > 0 for r in fleets(results))


def _per_replica(
    result: RunResult, hits: bool = True
) -> tuple[np.ndarray, list[dict[str, np.ndarray]]]:
    """Bucket edges, and per replica its load, KV used share and (with `hits`) hit rate per
    bucket."""
    steps = result.steps
    edges = bucket_edges(steps)
    total = sum(numeric(steps, c) for c in KV_CATEGORIES)
    with np.errstate(invalid="ignore", divide="ignore"):
        used = np.where(total > 0, 1.0 - numeric(steps, "kv_free_slots") / total, 0.0)
    steps = pd.DataFrame(  # only what the means need: filtering a fleet's every column is slow
        {
            "replica": steps["replica"].to_numpy(),
            "start_s": numeric(steps, "start_s"),
            "duration_s": numeric(steps, "duration_s"),
            "_load": numeric(steps, "num_running") + numeric(steps, "num_waiting"),
            "_kv_used": used,
        }
    )
    requests = result.requests
    hit_edges = np.linspace(edges[0], edges[-1], HIT_BUCKETS + 1) if len(edges) else edges
    out = []
    for replica in sorted(steps["replica"].unique()):
        own = steps[steps["replica"] == replica]
        means = activity_means(own, ["_load", "_kv_used"], edges)
        series = {"load": means["_load"], "kv": means["_kv_used"]}
        if hits:
            mine = requests[requests["replica"] == replica] if "replica" in requests else requests
            series["hit"] = _hit_rate(mine, hit_edges)
        out.append(series)
    return edges, out


def _hit_rate(requests: pd.DataFrame, edges: np.ndarray) -> np.ndarray:
    """Cached prompt tokens / prompt tokens of the requests first admitted in each bucket."""
    if len(edges) < 2:
        return np.empty(0)
    admitted = numeric(requests, "admitted_s")
    keep = np.isfinite(admitted)
    where = np.clip(np.searchsorted(edges, admitted[keep], side="right") - 1, 0, len(edges) - 2)
    cached = np.bincount(
        where, numeric(requests, "num_cached_tokens")[keep], minlength=len(edges) - 1
    )
    prompt = np.bincount(where, numeric(requests, "prompt_len")[keep], minlength=len(edges) - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(prompt > 0, cached / prompt, np.nan)


def plot_replicas(results: Sequence[RunResult], path: Path) -> Path:
    """Per fleet system (a row each): load (requests running or waiting), KV used share and
    prefix hit rate of each replica over time; no hit rate where no fleet had a prefix hit."""
    shown = fleets(results)[:MAX_FLEETS]
    hits = has_prefix_hits(results)
    columns = [("load", "requests at the replica"), ("kv", "KV used %")]
    columns += [("hit", "hit rate %")] if hits else []
    with figure(max(1, len(shown)), len(columns), 1.2 + 2.3 * max(1, len(shown))) as (fig, axes):
        if not shown:
            no_data(axes[0, 0], "no fleet")
            return save(fig, path)
        for row, result in enumerate(shown):
            edges, replicas = _per_replica(result, hits)
            hit_edges = np.linspace(edges[0], edges[-1], HIT_BUCKETS + 1)
            for col, (key, unit) in enumerate(columns):
                ax = axes[row, col]
                ax.set_title(f"{label(result.system, 28)}: {unit}", loc="left", fontsize=9)
                x = hit_edges if key == "hit" else edges
                scale = 1.0 if key == "load" else 100.0
                series = [scale * r[key] for r in replicas]
                _draw_replicas(ax, x, series)
                ax.set_ylim(bottom=0)
                ax.set_xlim(left=0)
            axes[row, 1].set_ylim(0, 100)
        for col in range(len(columns)):
            axes[-1, col].set_xlabel(time_label(shown))
        many = any(num_replicas(r) > MAX_LINES for r in shown)
        note = "range and median of the replicas" if many else "a line per replica"
        if not many:
            lines = axes[0, 0].get_lines()
            legend_below(fig, lines, [f"replica {i}" for i in range(len(lines))], 8)
        what = "load, KV use, prefix hit rate" if hits else "load, KV use"
        fig.suptitle(f"Replicas over time: {what} ({note})")
        return save(fig, path)


def _draw_replicas(ax: object, x: np.ndarray, series: list[np.ndarray]) -> None:
    from matplotlib.axes import Axes

    assert isinstance(ax, Axes)
    if not series or len(x) < 2:
        no_data(ax, "no steps recorded")
        return
    if len(series) <= MAX_LINES:
        for i, y in enumerate(series):
            ax.plot(x, np.append(y, y[-1]), color=system_color(i), lw=1.0, drawstyle="steps-post")
        return
    stack = np.vstack(series)
    with warnings.catch_warnings():  # a bucket where no replica admitted anything: NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        low, mid, high = (np.nanpercentile(stack, q, axis=0) for q in (0, 50, 100))
    ax.fill_between(x, np.append(low, low[-1]), np.append(high, high[-1]), step="post", alpha=0.3)
    ax.plot(x, np.append(mid, mid[-1]), color=system_color(0), lw=1.0, drawstyle="steps-post")


def plot_router_comparison(results: Sequence[RunResult], path: Path) -> Path:
    """Fleet systems (routers, in a router comparison) side by side: hit rate (where some fleet
    had a prefix hit), TTFT mean and p99, load imbalance, from their summaries."""
    shown = fleets(results)
    hits = has_prefix_hits(results)
    panels = []
    for key, title, unit, is_share in COMPARED:
        if key == "prefix_hit_rate" and not hits:
            continue
        values = [as_number(r.summary.get(key)) for r in shown]
        scaled = [None if v is None else (100 * v if is_share else v) for v in values]
        panels.append(Panel(title, "%" if is_share else unit, scaled))
    names = [r.system for r in shown]
    return plot_side_by_side(path, names, panels, "Routers side by side (each system a fleet)")

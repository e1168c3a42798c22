"""The request timeline plot: batch slots over time, one bar per request from admission to
finish (prefill, then decode; the slot a finished request still holds under static batching;
hatched when it was preempted)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot

import numpy as np
import pandas as pd
from matplotlib.collections import PolyCollection
from matplotlib.patches import Patch

from pagesim.reports.frames import assign_lanes, numeric
from pagesim.reports.style import figure, label, legend_below, no_data, save, time_label
from pagesim.simulator.metrics.result import RunResult

PREFILL_COLOR = "#dd6b20"
DECODE_COLOR = "#2b6cb0"
HELD_COLOR = "#cbd5e0"  # a finished request still holding its slot (static batching)


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


def _span(window: pd.DataFrame) -> tuple[float, float] | None:
    """(first admission, last finish) of the requests shown, or None when there are none."""
    if window.empty:
        return None
    times = window[["admitted_s", "finish_s"]].to_numpy(dtype=float)
    return float(times.min()), float(times.max())


def _shared_span(spans: list[tuple[float, float] | None]) -> tuple[float, float] | None:
    """One time axis for every panel when the systems' windows mostly overlap (the same
    arrivals served side by side: one axis compares them); None when some window is under
    half of their union (a capacity report's systems run at different rates: a shared axis
    would squeeze the quick ones into a corner)."""
    found = [s for s in spans if s is not None]
    if not found:
        return None
    low, high = min(s[0] for s in found), max(s[1] for s in found)
    if high <= low or all(s[1] - s[0] >= 0.5 * (high - low) for s in found):
        return low, high
    return None


def plot_request_timeline(results: Sequence[RunResult], path: Path, max_requests: int = 50) -> Path:
    """Batch slots over time: each request a bar from admission to finish (prefill, then decode).

    Shows the first `max_requests` admitted requests of each system (a contiguous window keeps
    the slot picture true). Needs request columns request_id, admitted_s, first_token_s,
    finish_s; num_preemptions (optional) hatches preempted requests. Panels share one time
    axis only when the systems' windows mostly overlap (see `_shared_span`).
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
    spans = [_span(w) for w in chosen]
    shared = _shared_span(spans)
    with figure(len(heights), 1, total_in, height_ratios=heights) as (fig, axes):
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
        for ax, span in zip(axes[:, 0], spans, strict=False):
            low, high = shared or span or (0.0, 1.0)
            pad = 0.02 * (high - low) or 1.0
            ax.set_xlim(low - pad, high + pad)
            ax.set_xlabel(time_label(results))
        same = " (one time axis)" if shared and len(results) > 1 else ""
        fig.suptitle(f"Request timeline: batch slots over time{same}")
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

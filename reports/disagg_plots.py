"""Plots of disaggregated fleets (runs whose request table has the TTFT split of
simulator/cluster/disagg_result.py) beside the run's other systems, colocated twins included:
where the time to first token goes, how busy the KV link is over time, and what each fleet
delivers per GPU against its TPOT.

A colocated run has no transfer and no separate first-decode step: its first token comes out of
the step that computes the prompt's last chunk. Its split is therefore queueing (arrival to first
admission) and prefill (admission to the first token), the transfer and first-decode parts zero.
Nothing here is simulated again.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.reports.bars import Panel, figure_height, plot_side_by_side, system_rows
from pagesim.reports.curves import panel
from pagesim.reports.fleet_plots import COMPARED as FLEET_COMPARED
from pagesim.reports.fleet_plots import has_prefix_hits, has_router_comparison
from pagesim.reports.frames import as_number, finished, numeric
from pagesim.reports.style import figure, label, legend_below, no_data, save, system_color
from pagesim.reports.style import time_label as _time_label
from pagesim.simulator.metrics.result import RunResult

PART_LABELS = ("queueing", "prefill", "KV transfer", "first decode")
PART_COLORS = ("#bbbbbb", "#e8a33d", "#c0392b", "#3b75af")
LINK_BINS = 60  # link-utilization bins over the run
PANELS = {  # summary key: title, unit, scale of its panel side by side
    "goodput_req_s_per_gpu": ("Goodput per GPU", "req/s", 1.0),
    "tpot_p50_s": ("TPOT p50", "ms", 1e3),
    "tpot_p99_s": ("TPOT p99", "ms", 1e3),
    "ttft_p50_s": ("TTFT p50", "s", 1.0),
    "ttft_p99_s": ("TTFT p99", "s", 1.0),
}
COMPARED = ("goodput_req_s_per_gpu", "tpot_p50_s", "tpot_p99_s", "ttft_p99_s")
MAX_PANELS = 8  # side by side: the [report] metrics, COMPARED's others, the routers' figure's


def is_disaggregated(result: RunResult) -> bool:
    return "ttft_transfer_s" in result.requests


# simulator/cluster/disagg_result.py is imported where a disaggregated run is drawn, not with
# this module: it imports the cluster simulator (~60 ms of every report, disaggregated or not).


def _ttft_part_names() -> tuple[str, ...]:
    from pagesim.simulator.cluster.disagg_result import TTFT_PARTS

    return tuple(TTFT_PARTS)


def _link_utilization(requests: pd.DataFrame, ports: int, bin_s: float) -> pd.DataFrame:
    from pagesim.simulator.cluster.disagg_result import link_utilization

    return link_utilization(requests, ports, bin_s)


def has_disaggregated(results: Sequence[RunResult]) -> bool:
    return any(is_disaggregated(r) for r in results)


def ttft_parts(result: RunResult) -> pd.DataFrame:
    """The finished in-window requests' TTFT parts (columns TTFT_PARTS): a disaggregated run's
    own; for any other run queueing = admitted - arrival, prefill = first token - admitted,
    the other two zero."""
    parts = _ttft_part_names()
    done = finished(result.requests)
    if is_disaggregated(result):
        return done[list(parts)].astype(float).reset_index(drop=True)
    queue = numeric(done, "admitted_s") - numeric(done, "arrival_s")
    prefill = numeric(done, "first_token_s") - numeric(done, "admitted_s")
    zero = np.zeros(len(done))
    return pd.DataFrame(dict(zip(parts, (queue, prefill, zero, zero), strict=True)))


def _gpus(result: RunResult) -> str:
    gpus = as_number(result.summary.get("num_gpus"))
    return "" if gpus is None else f" ({gpus:.0f} GPUs)"


def plot_ttft_split(results: Sequence[RunResult], path: Path) -> Path:
    """Each system's TTFT as stacked parts: means (adding up to the TTFT mean) and medians (each
    part's own; a dot marks the TTFT median, which they need not add up to). A bar per system,
    its name written whole on the left (reports.bars)."""
    names = [r.system + _gpus(r) for r in results]
    split = [ttft_parts(r) for r in results]  # once a system, for both panels' every part
    with figure(1, 2, figure_height(len(results)) + 0.4) as (fig, axes):
        for col, (how, title) in enumerate((("mean", "Means"), ("median", "Medians"))):
            ax = axes[0, col]
            ax.set_title(f"{title} of the TTFT parts", loc="left", fontsize=9)
            rows = np.arange(len(results))
            left = np.zeros(len(results))
            for i, part in enumerate(_ttft_part_names()):
                widths = np.array(
                    [float(getattr(parts[part], how)()) for parts in split], dtype=float
                )
                widths = np.nan_to_num(widths)
                ax.barh(rows, widths, left=left, color=PART_COLORS[i], label=PART_LABELS[i])
                left += widths
            if how == "median":
                ttft = [
                    float(np.nanmedian(numeric(finished(r.requests), "ttft_s"))) for r in results
                ]
                ax.plot(ttft, rows, "o", color="black", ms=4, label="TTFT median")
            ax.set_xlabel("s")
            system_rows(ax, names, (), labelled=col == 0)
        handles, labels = axes[0, 1].get_legend_handles_labels()
        legend_below(fig, handles, labels, len(labels))
        fig.suptitle("Where the time to first token goes")
        return save(fig, path)


def plot_link_utilization(results: Sequence[RunResult], path: Path) -> Path:
    """Each disaggregated system's link: the ports' busy share per time bin (a transfer holds
    its prefill replica's port and its decode replica's)."""
    shown = [r for r in results if is_disaggregated(r)]
    with figure(1, 1, 3.0) as (fig, axes):
        ax = axes[0, 0]
        end = max(
            (float(np.nanmax(numeric(r.requests, "transfer_end_s"), initial=0.0)) for r in shown),
            default=0.0,
        )
        if end <= 0:
            no_data(ax, "no KV transfer")
            return save(fig, path)
        bin_s = end / LINK_BINS
        for i, result in enumerate(shown):
            ports = int(as_number(result.summary.get("num_replicas")) or 1)
            util = _link_utilization(result.requests, ports, bin_s)
            x = np.append(util["start_s"].to_numpy(), util["start_s"].iloc[-1] + bin_s)
            y = 100 * util["busy_share"].to_numpy()
            mean = as_number(result.summary.get("link_busy_share"))
            tail = "" if mean is None else f": {100 * mean:.1f}% of the run"
            ax.plot(
                x,
                np.append(y, y[-1]),
                drawstyle="steps-post",
                color=system_color(i),
                label=label(result.system, 28) + tail,
            )
        ax.set_ylim(0, 100)
        ax.set_xlim(left=0)
        ax.set_ylabel("ports busy %")
        ax.set_xlabel(_time_label(shown))
        handles, labels = ax.get_legend_handles_labels()
        legend_below(fig, handles, labels, min(3, len(labels)))
        fig.suptitle("KV link utilization over time (mean over ports)")
        return save(fig, path)


def router_keys(results: Sequence[RunResult]) -> list[str]:
    """The routers' figure's metrics (fleet_plots.COMPARED, the hit rate only where some fleet
    had a prefix hit) when it would be drawn (several fleets), else none: with a disaggregated
    fleet they join the side-by-side figure, which compares the same fleets."""
    if not has_router_comparison(results):
        return []
    hits = has_prefix_hits(results)
    return [key for key, *_ in FLEET_COMPARED if hits or key != "prefix_hit_rate"]


def compared(asked: Sequence[str] = (), routers: Sequence[str] = ()) -> list[str]:
    """The side-by-side figure's metrics: `asked` (the scenario's [report] metrics) first, so
    that it answers the scenario's question, then COMPARED's others, then `routers`' others
    (router_keys); MAX_PANELS at most."""
    return list(dict.fromkeys([*asked, *COMPARED, *routers]))[:MAX_PANELS]


def panel_title(key: str) -> tuple[str, str, float]:
    """(title, unit, scale) of a metric's panel: PANELS's or the routers' figure's, else the
    glossary's (in the title)."""
    if key in PANELS:
        return PANELS[key]
    for fleet_key, title, unit, is_share in FLEET_COMPARED:
        if key == fleet_key:
            return title, "%" if is_share else unit, 100.0 if is_share else 1.0
    heading, scale = panel(key)
    return heading, "", scale


def plot_disagg_vs_colocated(
    results: Sequence[RunResult],
    path: Path,
    missing: Sequence[tuple[str, str]] = (),
    asked: Sequence[str] = (),
) -> Path:
    """Every system side by side: `asked` (the scenario's [report] metrics) first, then goodput
    per GPU, TPOT p50 and p99, TTFT p99, then the routers' figure's metrics where it would be
    drawn (`compared`). `missing`: (name, why) of systems the comparison lacks (a capacity
    search's colocated fleet that never met the SLO has no best configuration to run), shown
    as empty rows saying why."""
    panels = []
    for key in compared(asked, router_keys(results)):
        title, unit, scale = panel_title(key)
        values = [_scaled(as_number(r.summary.get(key)), scale) for r in results]
        panels.append(Panel(title, unit, values))
    names = [r.system + _gpus(r) for r in results]
    title = "Disaggregated and colocated side by side"
    return plot_side_by_side(path, names, panels, title, missing)


def _scaled(value: float | None, scale: float) -> float | None:
    return None if value is None else scale * value

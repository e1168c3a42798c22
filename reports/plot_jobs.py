"""Which plots a report draws (reports/plot_drawing.py draws them).

A report draws only what has something to show: the preemption plot when some system preempted
or swapped, the memory-saved plot when some system shared blocks, the fleet plots' hit-rate panels
when some replica had a prefix hit, the sweep plots the table's axes call for (the rate curve,
the block-size ablation, metrics against any other numeric axis). It draws nothing twice: a run
with a disaggregated fleet draws one side-by-side figure with the question's metrics and the
routers' figure's. A plot left out leaves a note saying why, so that its absence is itself a
finding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pagesim.reports import disagg_plots, fleet_plots, frontier_plots, offload_plots, plots
from pagesim.reports.curves import (
    LATENCY_COLUMNS,
    RATE_COLUMN,
    curve_metrics,
    is_slo_axis,
    other_axis,
    slo_metrics,
    sweep_column,
)
from pagesim.reports.sweep_axes import is_categorical, numeric_axes
from pagesim.reports.sweep_bars import plot_sweep_bars
from pagesim.simulator.core.config import ReportConfig
from pagesim.simulator.metrics.result import RunResult


@dataclass(frozen=True)
class PlotJob:
    stem: str  # file name, without .png
    title: str
    caption: str
    draw: Callable[[Path], Path]  # writes the PNG at the path given, returns it
    cost: float = 1.0  # relative drawing time, for ordering the work


# (stem, function, title, caption, cost, worth drawing?) of the plots a run report may hold.
RunPlot = tuple[
    str,
    Callable[[Sequence[RunResult], Path], Path],
    str,
    str,
    float,
    Callable[[Sequence[RunResult]], bool],
]
MAX_PANELS = 4  # metrics in one plot of the question's: the scenario's [report] ones first
_ALWAYS: Callable[[Sequence[RunResult]], bool] = lambda results: True  # noqa: E731
RUN_PLOTS: tuple[RunPlot, ...] = (
    (
        "kv_memory",
        plots.plot_kv_memory,
        "KV memory over time",
        "The KV-cache capacity of each system split, step by step, into token states (useful), "
        "reservation, internal and external fragmentation, and free slots; time-bucketed means. "
        "Every panel has the same y-axis.",
        1.0,
        _ALWAYS,
    ),
    (
        "waste_breakdown",
        plots.plot_waste_breakdown,
        "Memory waste by system",
        "Time-averaged shares of the KV capacity. Waste = reservation + internal + external "
        "fragmentation: memory held that holds no token state and cannot serve another request.",
        0.5,
        _ALWAYS,
    ),
    (
        "memory_saved",
        plots.plot_memory_saved,
        "Memory saved by sharing",
        "Block copies that sharing avoided, as a share of the KV capacity: prefix-cache hits on "
        "blocks in use (solid) and forked sequences, parallel samples or beams (dashed). The "
        "legend gives each system's time average, peak, and saving as a share of what its "
        "requests would have held unshared.",
        0.8,
        plots.has_sharing,
    ),
    (
        "utilization",
        plots.plot_utilization,
        "Utilization over time",
        "Useful batch slots / batch capacity, model FLOPs / peak FLOPs (MFU) and HBM bytes / "
        "peak bandwidth (MBU), time-weighted within each bucket; idle time counts as zero, "
        "and a fleet's line is the mean over its replicas. Each panel's title gives each "
        "system's mean over its busy time after warm-up (the summary's).",
        1.3,
        _ALWAYS,
    ),
    (
        "request_timeline",
        plots.plot_request_timeline,
        "Request timeline",
        "Each bar is one request in a batch slot, from admission to its last token (prefill "
        "orange, decode blue). Gaps are idle slots: static batching holds a slot until the whole "
        "batch ends; continuous batching refills it at once. Hatched requests were preempted at "
        "least once; their bar also spans the time they were out of the batch.",
        1.2,
        _ALWAYS,
    ),
    (
        "latency_cdfs",
        plots.plot_latency_cdfs,
        "Latency distributions",
        "Empirical CDFs over finished requests counted after warm-up. Further left is faster; "
        "where a curve meets the dotted p99 line is its 99th-percentile latency. A time axis "
        "spanning a wide range is logarithmic, so that a long tail does not hide the body.",
        1.3,
        _ALWAYS,
    ),
    (
        "preemptions_swaps",
        plots.plot_preemptions_swaps,
        "Preemptions and swaps",
        "Cumulative preemptions (left) and KV blocks copied between GPU and CPU memory (right); "
        "a steep rise marks memory pressure.",
        1.0,
        plots.has_preemptions,
    ),
    (
        "replicas",
        fleet_plots.plot_replicas,
        "Replicas over time",
        "For each fleet, each replica's load (requests running or waiting there) and KV-cache "
        "use over time; time-bucketed means, idle time counting as zero. A skewed router shows "
        "as lines apart.",
        1.3,
        fleet_plots.has_fleet,
    ),
    (
        "router_comparison",
        fleet_plots.plot_router_comparison,
        "Routers side by side",
        "Each fleet system's TTFT mean and p99, and its load imbalance (time-averaged max / "
        "mean of requests in flight, 1 = even).",
        0.6,
        lambda results: (
            fleet_plots.has_router_comparison(results)
            and not disagg_plots.has_disaggregated(results)
        ),
    ),
    (
        "ttft_split",
        disagg_plots.plot_ttft_split,
        "Where the time to first token goes",
        "Each system's TTFT over its finished requests, split into queueing (arrival to first "
        "admission), prefill (to the last prompt chunk), KV transfer (prefill end to the KV "
        "landing on the decode replica, waits for memory and for the link included) and first "
        "decode (to the first token). A colocated system has no transfer and no separate first "
        "decode: its first token comes with its last prompt chunk, counted in prefill. Means add "
        "up to the TTFT mean; the parts' medians need not add up to the TTFT median (the dot).",
        0.5,
        disagg_plots.has_disaggregated,
    ),
    (
        "link_utilization",
        disagg_plots.plot_link_utilization,
        "KV link utilization over time",
        "Share of the disaggregated fleet's link ports (one per replica) carrying KV data in "
        "each of 60 bins over the run; a transfer holds its prefill and its decode replica's "
        "ports. The legend gives each fleet's mean over the run.",
        0.4,
        disagg_plots.has_disaggregated,
    ),
    (
        "hits_by_tier",
        offload_plots.plot_hits_by_tier,
        "Prompt KV by tier",
        "Where each system's prompt tokens came from at first admission: hits in the GPU "
        "prefix cache, loads from the CPU tier (a KV offload tier), or computed; beside it, "
        "TTFT median and p99. A load from the CPU tier waits for the host link, which TTFT "
        "includes.",
        0.4,
        offload_plots.has_offload,
    ),
    (
        "disagg_vs_colocated",
        disagg_plots.plot_disagg_vs_colocated,
        "Disaggregated and colocated side by side",
        "Goodput per GPU (requests meeting the SLO per second, over the fleet's GPUs), TPOT p50 "
        "and p99, TTFT p99, for every system of the run: a disaggregated fleet beside its "
        "colocated twin on the same GPUs (a system with nothing to show, such as one that never "
        "met the SLO in a capacity search, keeps an empty row saying so). Goodput counts "
        "requests finished within the arrival window: read an overloaded fleet's figure with "
        "its SLO attainment.",
        0.5,
        disagg_plots.has_disaggregated,
    ),
)
LEFT_OUT = {  # why a plot is not drawn, shown in its place
    "preemptions_swaps": "No system preempted or swapped a request: no preemption plot.",
}
HIT_CAPTIONS = {  # said of the fleet plots' hit-rate panels, drawn where some fleet had a hit
    "replicas": " The third column is each replica's prefix-cache hit rate: cached / prompt "
    "tokens of the requests first admitted in each bucket.",
    "router_comparison": " The first panel is each system's prefix-cache hit rate, pooled over "
    "its replicas.",
}
NO_HITS = (
    "No replica of any system served a prompt token from its prefix cache: the fleet plots "
    "leave out their hit-rate panels."
)
ASKED_FIRST = (  # the side-by-side figure's caption, when it carries the scenario's question
    "First the metrics the scenario's [report] asks about ({}), which the headlines answer; "
    "then those of the following it does not ask about ({} panels at most). "
)
ROUTERS_SIDE_BY_SIDE = (  # its caption, when it carries the routers' figure's metrics too
    " Last, the metrics of the routers' figure that it lacks ({}): with a disaggregated fleet "
    "that figure is not drawn, as both compare the same fleets."
)
ROUTERS_NOTE = (
    "The routers' figure's metrics join the figure of disaggregated and colocated side by "
    "side, which compares the same fleets: no separate routers figure."
)
ANSWERED_SIDE_BY_SIDE = (
    "The metrics the scenario's [report] asks about lead the figure of disaggregated and "
    "colocated side by side: no separate figure of them."
)


def run_plot_jobs(
    results: Sequence[RunResult],
    question: ReportConfig | None = None,
    missing: Sequence[tuple[str, str]] = (),
) -> tuple[list[PlotJob], list[str]]:
    """The per-run plots worth drawing for `results`, and notes on those left out: first the
    scenario's [report] metrics by system (when two systems or more have them), unless the
    disaggregated side-by-side figure is drawn: it leads with them instead, one figure where
    two said much the same, and takes the routers' figure's metrics too. `missing`: (system,
    why) of systems the comparison lacks, which the side-by-side plot names."""
    jobs, notes = [], []
    table = pd.DataFrame([{"system": r.system, **r.summary} for r in results])
    metrics = _asked(table, question or ReportConfig())
    if metrics and disagg_plots.has_disaggregated(results):  # the side-by-side figure's, first
        notes.append(ANSWERED_SIDE_BY_SIDE)
    elif metrics:
        jobs.append(_question_job(table, metrics))
    hits = fleet_plots.has_prefix_hits(results)
    for stem, fn, title, caption, cost, worth in RUN_PLOTS:
        if worth(results):
            draw = _bind(fn, results)
            if stem == "disagg_vs_colocated":
                draw = _bind_side_by_side(results, missing, metrics)
                caption = _side_by_side_caption(results, metrics, caption)
            caption += HIT_CAPTIONS.get(stem, "") if hits else ""
            jobs.append(PlotJob(stem, title, caption, draw, cost))
        elif stem in LEFT_OUT:
            notes.append(LEFT_OUT[stem])
    if fleet_plots.has_fleet(results) and not hits:
        notes.append(NO_HITS)
    if disagg_plots.has_disaggregated(results) and disagg_plots.router_keys(results):
        notes.append(ROUTERS_NOTE)
    return jobs, notes


def _side_by_side_caption(results: Sequence[RunResult], asked: list[str], caption: str) -> str:
    """The side-by-side figure's caption: which of its panels are the question's, which the
    routers' figure's."""

    def titles(keys: Sequence[str]) -> str:
        return ", ".join(disagg_plots.panel_title(key)[0] for key in keys)

    lead = ASKED_FIRST.format(titles(asked), disagg_plots.MAX_PANELS) if asked else ""
    shown = disagg_plots.compared(asked, disagg_plots.router_keys(results))
    routers = [key for key in disagg_plots.router_keys(results) if key in shown]
    routers = [key for key in routers if key not in (*asked, *disagg_plots.COMPARED)]
    return lead + caption + (ROUTERS_SIDE_BY_SIDE.format(titles(routers)) if routers else "")


def _asked(table: pd.DataFrame, question: ReportConfig) -> list[str]:
    """The scenario's [report] metrics that two systems or more have values of (one bar answers
    nothing), MAX_PANELS at most."""
    return [
        m
        for m in (question.key_metric, *question.metrics)
        if m is not None
        and m in table
        and pd.to_numeric(table[m], errors="coerce").notna().sum() >= 2
    ][:MAX_PANELS]


def _question_job(table: pd.DataFrame, metrics: list[str]) -> PlotJob:
    """Bars of the metrics the scenario asks about, one per system: its answer as a picture."""
    return PlotJob(
        "question",
        "What the scenario asks, by system",
        "The metrics the scenario's [report] asks about (the headlines' first sentences), one "
        "bar per system.",
        _bars(table, metrics, "The scenario's key metrics by system"),
        0.6,
    )


def _bind_side_by_side(
    results: Sequence[RunResult], missing: Sequence[tuple[str, str]], asked: Sequence[str]
) -> Callable[[Path], Path]:
    return lambda path: disagg_plots.plot_disagg_vs_colocated(results, path, missing, asked)


def _bind(
    fn: Callable[[Sequence[RunResult], Path], Path], results: Sequence[RunResult]
) -> Callable[[Path], Path]:
    return lambda path: fn(results, path)


def sweep_plot_jobs(sweep: pd.DataFrame, question: ReportConfig | None = None) -> list[PlotJob]:
    """The curves a sweep table's axes call for: latency vs rate, the block-size ablation, the
    scenario's [report] metrics and the key metrics against any other numeric axis (a second
    axis as line groups), or, with no numeric axis, bars of them at every point. `sweep` has
    its axis values in words (sweep_axes.label_axes)."""
    jobs = []
    rate = sweep_column(sweep, RATE_COLUMN)
    if rate is not None and "normalized_latency_mean_s" in sweep:
        facet = other_axis(sweep, rate)
        jobs.append(
            PlotJob(
                "latency_vs_rate",
                "Normalized latency vs request rate",
                "Mean (solid) and p90 (dashed) end-to-end latency per output token as the arrival "
                "rate grows; the knee is where a system runs out of capacity.",
                lambda path: plots.plot_latency_vs_rate(sweep, path, rate_column=rate, facet=facet),
                1.0,
            )
        )
    block = sweep_column(sweep, "block_size")
    if block is not None and sweep[block].nunique() > 1:
        jobs.append(
            PlotJob(
                "block_size_ablation",
                "Block-size ablation",
                "KV waste, throughput and mean normalized latency against the paged block size "
                "(tokens per block).",
                lambda path: plots.plot_block_size_ablation(sweep, path, block_column=block),
                1.0,
            )
        )
    frontier = frontier_plots.sweep_frontier(sweep)
    if frontier is not None:  # tokens/s per GPU vs per user, cost vs p99 TTFT
        jobs.append(
            PlotJob(
                "frontier",
                frontier_plots.TITLE,
                frontier_plots.CAPTION,
                lambda path: frontier_plots.plot_frontier(frontier, path),
                1.0,
            )
        )
    metrics = _panels(sweep, question or ReportConfig())
    numeric = numeric_axes(sweep)
    if is_categorical(sweep) and metrics and len(sweep) > 1:
        jobs.append(
            PlotJob(
                "sweep_points",
                "Metrics at every point",
                "The scenario's key metrics at each point of the sweep, one bar per point, "
                "named by what differs between the points.",
                _bars(sweep, metrics, "The key metrics at every point of the sweep"),
                1.0,
            )
        )
    for axis in numeric:
        slo = is_slo_axis(axis)
        panels = slo_metrics(sweep) if slo else metrics
        if axis == block or (axis == rate and not _asks_beyond_latency(question)) or not panels:
            continue
        group = other_axis(sweep, axis)
        short = axis.rsplit(".", 1)[-1]
        what = (
            f"Goodput and SLO attainment at each value of {axis}: an SLO bound changes no "
            "simulation, only which requests count as meeting it"
            if slo
            else f"The key metrics at each value of {axis}"
        )
        jobs.append(
            PlotJob(
                f"sweep_{short}",
                f"{'Goodput' if slo else 'Metrics'} vs {short}",
                what + (f", a line per value of {group}" if group else "") + " (and per system).",
                _curves(sweep, axis, group, panels),
                1.2,
            )
        )
    return jobs


def _asks_beyond_latency(question: ReportConfig | None) -> bool:
    """Whether the scenario asks about a metric the latency-vs-rate plot does not draw."""
    asked = () if question is None else (question.key_metric, *question.metrics)
    return any(m is not None and m not in LATENCY_COLUMNS for m in asked)


def _panels(sweep: pd.DataFrame, question: ReportConfig) -> list[str]:
    """The scenario's [report] metrics the table has values of, then the general ones."""
    asked = [m for m in (question.key_metric, *question.metrics) if m is not None]
    present = [
        m for m in asked if m in sweep and pd.to_numeric(sweep[m], errors="coerce").notna().any()
    ]
    more = [m for m in curve_metrics(sweep) if m not in present]
    return (present + more)[:MAX_PANELS]


def _bars(table: pd.DataFrame, metrics: list[str], title: str) -> Callable[[Path], Path]:
    return lambda path: plot_sweep_bars(table, path, metrics=metrics, title=title)


def _curves(
    sweep: pd.DataFrame, axis: str, group: str | None, metrics: list[str]
) -> Callable[[Path], Path]:
    return lambda path: plots.plot_sweep_curves(sweep, path, x=axis, group=group, metrics=metrics)


# --- drawing ---------------------------------------------------------------------------

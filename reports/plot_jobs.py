"""Which plots a report draws, and drawing them in parallel.

A report draws only what has something to show: the preemption plot when some system preempted
or swapped, the memory-saved plot when some system shared blocks, the sweep plots the table's
axes call for (the rate curve, the block-size ablation, metrics against any other numeric axis).
A plot left out leaves a note saying why, so that its absence is itself a finding.

Drawing is a report's main cost (matplotlib lays out text and rasterizes in Python), and the
plots are independent: `draw_all` deals them into shares of about equal cost, draws one here
and the others in worker processes forked from this one (which hold the results already, so
nothing is copied or pickled but the indices of the plots), and draws them all here where fork
is unavailable or one core is all. Every worker costs CPU time of its own (its start, the
pages it copies), so this process is one of them rather than waiting idle.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
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
from pagesim.simulator.core.collector import collector_paused
from pagesim.simulator.core.config import ReportConfig
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.studies.worker_watch import watch_driver


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
        "For each fleet, each replica's load (requests running or waiting there), KV-cache use "
        "and prefix-cache hit rate (cached / prompt tokens of the requests first admitted in "
        "each bucket), over time; time-bucketed means, idle time counting as zero. A skewed "
        "router shows as lines apart.",
        1.3,
        fleet_plots.has_fleet,
    ),
    (
        "router_comparison",
        fleet_plots.plot_router_comparison,
        "Routers side by side",
        "Each fleet system's prefix-cache hit rate (pooled over its replicas), TTFT mean and p99, "
        "and load imbalance (time-averaged max / mean of requests in flight, 1 = even).",
        0.6,
        fleet_plots.has_router_comparison,
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


def run_plot_jobs(
    results: Sequence[RunResult],
    question: ReportConfig | None = None,
    missing: Sequence[tuple[str, str]] = (),
) -> tuple[list[PlotJob], list[str]]:
    """The per-run plots worth drawing for `results`, and notes on those left out: first the
    scenario's [report] metrics by system (when two systems or more have them). `missing`:
    (system, why) of systems the comparison lacks, which the side-by-side plot names."""
    jobs, notes = [], []
    asked = _question_job(results, question or ReportConfig())
    if asked is not None:
        jobs.append(asked)
    for stem, fn, title, caption, cost, worth in RUN_PLOTS:
        if worth(results):
            draw = _bind(fn, results)
            if stem == "disagg_vs_colocated" and missing:
                draw = _bind_missing(results, missing)
            jobs.append(PlotJob(stem, title, caption, draw, cost))
        elif stem in LEFT_OUT:
            notes.append(LEFT_OUT[stem])
    return jobs, notes


def _question_job(results: Sequence[RunResult], question: ReportConfig) -> PlotJob | None:
    """Bars of the metrics the scenario asks about, one per system: its answer as a picture."""
    table = pd.DataFrame([{"system": r.system, **r.summary} for r in results])
    metrics = [
        m
        for m in (question.key_metric, *question.metrics)
        if m is not None
        and m in table
        and pd.to_numeric(table[m], errors="coerce").notna().sum() >= 2
    ][:MAX_PANELS]
    if not metrics:
        return None
    return PlotJob(
        "question",
        "What the scenario asks, by system",
        "The metrics the scenario's [report] asks about (the headlines' first sentences), one "
        "bar per system.",
        _bars(table, metrics, "The scenario's key metrics by system"),
        0.6,
    )


def _bind_missing(
    results: Sequence[RunResult], missing: Sequence[tuple[str, str]]
) -> Callable[[Path], Path]:
    return lambda path: disagg_plots.plot_disagg_vs_colocated(results, path, missing)


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

_pending: list[tuple[PlotJob, Path]] = []  # what forked workers draw, by index


def _draw(index: int) -> Path:
    job, path = _pending[index]
    with collector_paused():  # a figure's thousands of artists are no work for the collector
        done = job.draw(path)
    gc.collect()  # but a closed figure is a web of cycles: freed now, one figure at a time
    return done


def _draw_share(indices: Sequence[int]) -> None:
    for index in indices:
        _draw(index)


def shares(costs: Sequence[float], num_shares: int) -> list[list[int]]:
    """The indices of `costs` dealt into `num_shares` lists of about equal total cost: the
    most expensive first, each to the lightest share so far (each share in that order)."""
    dealt: list[list[int]] = [[] for _ in range(num_shares)]
    totals = [0.0] * num_shares
    for index in sorted(range(len(costs)), key=lambda i: -costs[i]):
        lightest = totals.index(min(totals))
        dealt[lightest].append(index)
        totals[lightest] += costs[index]
    return dealt


@contextmanager
def _heap_frozen() -> Iterator[None]:
    """Every object there is now out of the collector's sight until the block ends: so that
    collecting after each figure looks at that figure's objects only, not at the results'
    frames and everything imported, and forked workers, which inherit this, never write to
    the pages of those objects (a collection writes to each object it visits)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def draw_all(jobs: Sequence[PlotJob], plot_dir: Path, num_workers: int | None = None) -> None:
    """Draw every job's PNG into `plot_dir`, in `num_workers` processes: this one and workers
    forked from it (default: the CPUs, at most one per plot), each a share of about equal
    cost; serially with one worker or where fork is unavailable."""
    plot_dir.mkdir(parents=True, exist_ok=True)
    work = [(job, plot_dir / f"{job.stem}.png") for job in jobs]
    if num_workers is None:
        num_workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    num_workers = min(num_workers, len(work))
    _pending[:] = work
    try:
        with _heap_frozen():
            if num_workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
                _draw_share(range(len(work)))
            else:
                _draw_in_parallel(shares([job.cost for job in jobs], num_workers))
    finally:
        _pending.clear()


def _start_worker(driver_pid: int) -> None:
    """A forked plot worker: it leaves when its driver does (a driver killed outright leaves no
    worker behind), and its signals are the defaults, not the driver's handlers it inherited by
    the fork (pagesim/interrupts.py raises on SIGTERM): the driver stops a worker with SIGTERM,
    which must end it quietly, and a Ctrl-C at the terminal, which the whole process group gets,
    is the driver's to handle."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch_driver(driver_pid)


def _draw_in_parallel(dealt: list[list[int]]) -> None:
    """The first share drawn here, the others by workers forked from this process."""
    pool = ProcessPoolExecutor(
        max_workers=len(dealt) - 1,
        mp_context=multiprocessing.get_context("fork"),
        initializer=_start_worker,
        initargs=(os.getpid(),),
    )
    try:
        futures = [pool.submit(_draw_share, share) for share in dealt[1:]]
        _draw_share(dealt[0])
        for future in futures:
            future.result()
    except BaseException:  # a failed plot, Ctrl-C, SIGTERM: stop the other workers at once
        workers = list(getattr(pool, "_processes", {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.join(timeout=10)
        raise
    else:
        pool.shutdown(wait=True)

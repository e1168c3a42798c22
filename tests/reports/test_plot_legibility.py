"""Every figure a report draws can be read: no tick label overlaps another or is cut by the
figure's edge, no title, axis label or legend is cut, one number format per axis (issue 34,
items 5 and 7). Measured with the renderer (tests/plot_checks.py) on a few built-ins at reduced
size, whose figures cover every kind of plot a run or sweep report draws; then what item 7 saw
in particular: moe_decode's crowded batch axis and missing TPOT, disaggregated_vs_colocated's
cut names, missing colocated bar and flat SLO curves, the utilization legend, a fleet's
utilization above 100%."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from plot_checks import draw_figures, illegible, kept_figures, problems, tick_texts

from pagesim.reports import disagg_plots, plots, render
from pagesim.reports.frames import activity_means, state_means
from pagesim.reports.plot_jobs import ROUTERS_NOTE, run_plot_jobs, sweep_plot_jobs
from pagesim.reports.saved import read_saved
from pagesim.reports.style import log_scale
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.studies.executors import SerialExecutor
from pagesim.simulator.studies.runs import load_run, simulate_run
from pagesim.simulator.studies.sweep import plan_sweep, run_points

SMALL = ["workload.num_requests=40"]


@pytest.fixture(scope="module")
def disagg_run() -> list[RunResult]:
    """A P/D fleet beside its colocated twin: fleet, disaggregation and per-run plots."""
    return simulate_run(load_run("disaggregated_vs_colocated", SMALL)).results


def sweep_table(name: str) -> pd.DataFrame:
    return run_points(plan_sweep(name, SMALL), SerialExecutor()).table()


def check(figures: Sequence[tuple[str, plt.Figure]]) -> None:
    found = [f"{stem}: {p}" for stem, fig in figures for p in problems(fig)]
    assert not found, "\n".join(found)


def test_the_check_finds_crowded_cut_and_mixed_labels() -> None:
    """The check can fail: the defects item 7 saw, drawn on purpose."""
    with kept_figures():
        fig, axes = plt.subplots(1, 3, figsize=(6, 2), dpi=110)
        axes[0].plot([1, 2, 4, 8, 16, 32, 64, 128], range(8))
        axes[0].set_xticks([1, 2, 4, 8, 16, 32, 64, 128])  # moe_decode's "1248"
        axes[1].set_ylabel("a label far too long to fit " * 6)  # runs off the top and bottom
        axes[2].set_xscale("log")
        axes[2].set_xticks([0.6, 1, 2, 3], ["6e-01", "1", "2", "3"])
        axes[2].set_xlim(0.5, 4)
        found = "\n".join(problems(fig))
    assert "tick labels '1' and '2' overlap" in found
    assert "is cut by the figure edge" in found
    assert "mix formats" in found


def test_a_run_of_a_fleet_draws_only_legible_figures(
    disagg_run: list[RunResult], tmp_path: Path
) -> None:
    question = load_run("disaggregated_vs_colocated", SMALL).scenario.report
    jobs, notes = run_plot_jobs(disagg_run, question)
    assert len(jobs) >= 8
    found = illegible(jobs, tmp_path)
    assert not found, "\n".join(found)
    # Its two fleets share their router: the routers' figure's metrics join the side-by-side
    # one, after the question's and the P/D comparison's own, in two rows of panels.
    assert "router_comparison" not in [job.stem for job in jobs] and ROUTERS_NOTE in notes
    (job,) = [job for job in jobs if job.stem == "disagg_vs_colocated"]
    assert "(TTFT mean, Load imbalance)" in job.caption
    for _, fig in draw_figures([job], tmp_path):
        titles = [ax.get_title(loc="left") for ax in fig.axes if ax.get_visible()]
    assert titles == [
        "Goodput per GPU (req/s)",
        "TPOT p50 (ms)",
        "TTFT p50 (s)",
        "TPOT p99 (ms)",
        "TTFT p99 (s)",
        "TTFT mean (s)",
        "Load imbalance (max / mean)",
    ]


@pytest.mark.parametrize("name", ["moe_decode", "disaggregated_vs_colocated"])
def test_sweeps_draw_only_legible_figures(name: str, tmp_path: Path) -> None:
    jobs = sweep_plot_jobs(sweep_table(name))
    assert jobs
    found = illegible(jobs, tmp_path)
    assert not found, "\n".join(found)


def test_moe_decode_sweep_reads_every_batch_and_plots_tpot(tmp_path: Path) -> None:
    (job,) = [j for j in sweep_plot_jobs(sweep_table("moe_decode")) if j.stem != "frontier"]
    for _, fig in draw_figures([job], tmp_path):
        shown = [ax for ax in fig.axes if ax.get_visible()]
        assert "TPOT, median (ms)" in [ax.get_title(loc="left") for ax in shown]
        for ax in shown:
            assert tick_texts(ax.xaxis) == ["1", "2", "4", "8", "16", "32", "64", "128"]


def test_an_slo_axis_plots_goodput_not_flat_lines(tmp_path: Path) -> None:
    """The SLO judges one simulation: throughput or latency against it would be flat lines."""
    table = sweep_table("disaggregated_vs_colocated")
    (job,) = [j for j in sweep_plot_jobs(table) if j.stem != "frontier"]
    assert job.title == "Goodput vs ttft_s" and "changes no simulation" in job.caption
    for _, fig in draw_figures([job], tmp_path):
        titles = [ax.get_title(loc="left") for ax in fig.axes if ax.get_visible()]
        assert titles == [
            "Goodput per GPU (req/s meeting the SLO)",
            "SLO attainment (% of requests)",
        ]


def test_side_by_side_names_each_system_whole_and_says_why_one_is_missing(
    disagg_run: list[RunResult], tmp_path: Path
) -> None:
    """A capacity report's best fleets: long names alike in their first 16 characters (once cut
    to the same text), and a colocated system that never met the SLO (once no bar, no word)."""
    names = ["disaggregated P:D TP1:TP1 3P1D", "disaggregated P:D TP2:TP1 2P1D"]
    fleets = [dataclasses.replace(disagg_run[0], system=name) for name in names]
    missing = [("colocated", "no fleet met the SLO (28 simulated)")]
    with kept_figures() as figures:
        disagg_plots.plot_disagg_vs_colocated(fleets, tmp_path / "a.png", missing)
        disagg_plots.plot_ttft_split(fleets, tmp_path / "b.png")
        check([("disagg_vs_colocated", figures[0]), ("ttft_split", figures[1])])
        rows = tick_texts(figures[0].axes[0].yaxis)
    assert rows[0].startswith(names[0]) and rows[1].startswith(names[1])
    assert rows[2] == "colocated\nno fleet met the SLO (28 simulated)"


def test_the_utilization_legend_names_systems_and_each_panel_its_means(
    disagg_run: list[RunResult], tmp_path: Path
) -> None:
    with kept_figures() as figures:
        plots.plot_utilization(disagg_run, tmp_path / "u.png")
        (fig,) = figures
        legend = [t.get_text() for t in fig.legends[0].get_texts()]
        titles = [ax.get_title(loc="left") for ax in fig.axes]
    assert legend == ["disaggregated", "colocated"]
    assert all("busy-time mean: disaggregated" in t and "colocated" in t for t in titles)


def test_a_fleets_utilization_is_the_mean_over_its_replicas() -> None:
    """Two replicas busy at once, one at 100% and one at 50%, read 75%: not 150%."""
    steps = pd.DataFrame(
        {
            "start_s": [0.0, 0.0, 1.0, 1.0],
            "duration_s": [1.0, 1.0, 1.0, 1.0],
            "mfu": [1.0, 0.5, 1.0, 0.5],
            "kv_token_slots": [10.0, 30.0, 10.0, 30.0],
            "replica": [0, 1, 0, 1],
        }
    )
    edges = np.array([0.0, 1.0, 2.0])
    assert activity_means(steps, ["mfu"], edges)["mfu"].tolist() == [0.75, 0.75]
    assert state_means(steps, ["kv_token_slots"], edges)["kv_token_slots"].tolist() == [40, 40]


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (33.6, 199.0, ["40", "50", "60", "80", "100", "150"]),  # spec_decode's TTFT, in ms
        (8.2, 37.8, ["10", "15", "20", "30"]),
        (0.26, 101.0, ["0.5", "1", "2", "5", "10", "20", "50", "100"]),
        (0.5, 3.7, ["0.5", "1", "2", "3"]),
        # a latency-rate axis: 1-2-3-5 would crowd 0.03 against 0.05 on a panel this narrow
        (0.0205, 1.5, ["0.05", "0.1", "0.2", "0.5", "1"]),
        (0.51, 3.7, ["0.6", "0.8", "1", "1.5", "2", "3"]),
    ],
)
def test_a_log_axis_has_plain_ticks_near_its_ends(
    low: float, high: float, expected: list[str]
) -> None:
    with kept_figures():
        fig, ax = plt.subplots(figsize=(3.3, 2), dpi=110, layout="constrained")
        ax.plot([low, high], [0, 1])
        ax.set_xlim(low, high)
        log_scale(ax, "x")
        fig.canvas.draw()
        assert tick_texts(ax.xaxis) == expected
        assert problems(fig) == []


@pytest.mark.parametrize("width_in", [1.4, 2.0, 2.6])
@pytest.mark.parametrize(("low", "high"), [(0.0205, 1.5), (0.13, 0.71), (8.2, 37.8), (0.26, 101.0)])
def test_a_narrow_log_axis_drops_to_a_coarser_ladder_rather_than_crowd_its_labels(
    width_in: float, low: float, high: float
) -> None:
    with kept_figures():
        fig, ax = plt.subplots(figsize=(width_in, 2), dpi=110, layout="constrained")
        ax.plot([low, high], [0, 1])
        ax.set_xlim(low, high)
        log_scale(ax, "x")
        fig.canvas.draw()
        assert tick_texts(ax.xaxis), "at least one labelled tick"
        assert problems(fig) == []


def test_the_missing_systems_travel_with_the_saved_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """report.json keeps `missing`, so `pagesim report` redraws the empty row; a damaged value
    is one clear error naming the file."""
    inputs = {
        "title": "t",
        "scenario_text": "",
        "provenance": {},
        "findings": None,
        "calibration": None,
        "folders": [],
        "detail": None,
        "missing": [["colocated", "no fleet met the SLO"]],
    }
    (tmp_path / "sweep.csv").write_text("system,x.y\na,1\n")
    (tmp_path / "report.json").write_text(json.dumps(inputs))
    seen: dict[str, object] = {}
    monkeypatch.setattr(render, "write_report", lambda *a, **kw: seen.update(kw) or tmp_path)
    render.render_saved(read_saved(tmp_path), tmp_path)
    assert seen["missing"] == [("colocated", "no fleet met the SLO")]
    for bad in (5, [["colocated"]], [["a", 1]]):
        (tmp_path / "report.json").write_text(json.dumps(inputs | {"missing": bad}))
        with pytest.raises(InputError, match=r"report.json: 'missing' must be a list"):
            read_saved(tmp_path)

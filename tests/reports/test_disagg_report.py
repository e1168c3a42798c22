"""Disaggregation in reports: the TTFT split worked out by hand for a disaggregated and a
colocated run, the three panels drawn only when a run holds a disaggregated fleet, and a
glossary entry for every key and column a disaggregated fleet adds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from plot_checks import draw_figures

from pagesim.reports import disagg_plots, plot_jobs
from pagesim.reports.glossary import SUMMARY_BY_KEY, glossary_sections, replica_metric
from pagesim.reports.html import summary_table
from pagesim.simulator.cluster.disagg_result import TTFT_PARTS
from pagesim.simulator.core.config import ReportConfig
from pagesim.simulator.metrics.result import REQUEST_COLUMNS, RunResult
from pagesim.simulator.scenario.load import BUILTIN_DIR
from tests.sim_helpers import poisson_workload
from tests.simulator.cluster.disagg_helpers import fleet, run, v1_scenario

PANELS = {"ttft_split", "link_utilization", "disagg_vs_colocated"}


def disaggregated() -> RunResult:
    # Two finished requests: parts (1, 2, 0.5, 0.25) and (3, 0, 0.5, 0.75) s; one rejected.
    requests = pd.DataFrame(
        {
            "status": ["finished", "finished", "rejected"],
            "in_window": [True, True, True],
            "ttft_s": [3.75, 4.25, np.nan],
            "ttft_queue_s": [1.0, 3.0, np.nan],
            "ttft_prefill_s": [2.0, 0.0, np.nan],
            "ttft_transfer_s": [0.5, 0.5, np.nan],
            "ttft_first_decode_s": [0.25, 0.75, np.nan],
            "transfer_start_s": [3.0, 3.5, np.nan],
            "transfer_end_s": [3.5, 4.0, np.nan],
        }
    )
    summary = {"num_replicas": 2, "num_gpus": 2, "link_busy_share": 0.25}
    return RunResult("s", "disagg", requests, pd.DataFrame(), summary)


def colocated() -> RunResult:
    # Arrivals 0 and 1, admitted 0.5 and 3, first tokens 2 and 3.5; a warm-up request left out.
    requests = pd.DataFrame(
        {
            "status": ["finished", "finished", "finished"],
            "in_window": [True, True, False],
            "arrival_s": [0.0, 1.0, 0.0],
            "admitted_s": [0.5, 3.0, 0.0],
            "first_token_s": [2.0, 3.5, 9.0],
            "ttft_s": [2.0, 2.5, 9.0],
        }
    )
    return RunResult("s", "colocated", requests, pd.DataFrame(), {"num_gpus": 2})


def test_the_ttft_split_by_hand() -> None:
    parts = disagg_plots.ttft_parts(disaggregated())
    assert parts.mean().tolist() == [2.0, 1.0, 0.5, 0.5]  # adds up to the TTFT mean, 4.0
    assert list(parts.columns) == list(TTFT_PARTS)
    own = disagg_plots.ttft_parts(colocated())
    assert own["ttft_queue_s"].tolist() == [0.5, 2.0]
    assert own["ttft_prefill_s"].tolist() == [1.5, 0.5]
    assert own["ttft_transfer_s"].tolist() == [0.0, 0.0]
    assert own["ttft_first_decode_s"].tolist() == [0.0, 0.0]


def test_the_panels_only_when_a_run_holds_a_disaggregated_fleet() -> None:
    jobs, _ = plot_jobs.run_plot_jobs([colocated()])
    assert PANELS.isdisjoint(job.stem for job in jobs)
    jobs, _ = plot_jobs.run_plot_jobs([disaggregated(), colocated()])
    assert {job.stem for job in jobs} >= PANELS


# disaggregated_vs_colocated's [report]: goodput per GPU, then TPOT p50 and TTFT p50.
QUESTION = ReportConfig("goodput_req_s_per_gpu", ("tpot_p50_s", "ttft_p50_s"))


def summarized(result: RunResult, goodput: float, tpot_ms: float, ttft_s: float) -> RunResult:
    """`result` with the side-by-side figure's summary keys (p99s twice the p50s)."""
    summary = result.summary | {
        "goodput_req_s_per_gpu": goodput,
        "tpot_p50_s": tpot_ms / 1e3,
        "tpot_p99_s": 2 * tpot_ms / 1e3,
        "ttft_p50_s": ttft_s,
        "ttft_p99_s": 2 * ttft_s,
    }
    return RunResult(result.scenario, result.system, result.requests, result.steps, summary)


def test_a_disaggregated_run_answers_its_question_side_by_side(tmp_path: Path) -> None:
    runs = [summarized(disaggregated(), 1.5, 8.0, 4.0), summarized(colocated(), 1.0, 40.0, 0.5)]
    jobs, notes = plot_jobs.run_plot_jobs(runs, QUESTION)
    assert "question" not in [job.stem for job in jobs]  # one figure, not two saying the same
    assert plot_jobs.ANSWERED_SIDE_BY_SIDE in notes
    (job,) = [job for job in jobs if job.stem == "disagg_vs_colocated"]
    assert job.caption.startswith(
        "First the metrics the scenario's [report] asks about (Goodput per GPU, TPOT p50, "
        "TTFT p50), which the headlines answer; then those of the following it does not ask "
        "about (8 panels at most). Goodput per GPU (requests meeting"
    )
    for _, fig in draw_figures([job], tmp_path):
        panels = {ax.get_title(loc="left"): [t.get_text() for t in ax.texts] for ax in fig.axes}
    assert panels == {  # the question's metrics in its order, then the others not asked about
        "Goodput per GPU (req/s)": [" 1.5", " 1"],
        "TPOT p50 (ms)": [" 8", " 40"],
        "TTFT p50 (s)": [" 4", " 0.5"],
        "TPOT p99 (ms)": [" 16", " 80"],
        "TTFT p99 (s)": [" 8", " 1"],
    }
    assert [title.split(" (")[0] for title in panels] == [
        "Goodput per GPU",
        "TPOT p50",
        "TTFT p50",
        "TPOT p99",
        "TTFT p99",
    ]


def test_without_a_disaggregated_fleet_the_question_keeps_its_own_figure() -> None:
    twins = [summarized(colocated(), 1.0, 40.0, 0.5), summarized(colocated(), 1.2, 30.0, 0.4)]
    jobs, notes = plot_jobs.run_plot_jobs(twins, QUESTION)
    assert jobs[0].stem == "question" and plot_jobs.ANSWERED_SIDE_BY_SIDE not in notes
    # Nor with no question: the side-by-side figure is its four metrics alone.
    assert disagg_plots.compared() == list(disagg_plots.COMPARED)
    jobs, notes = plot_jobs.run_plot_jobs([disaggregated(), colocated()])
    assert plot_jobs.ANSWERED_SIDE_BY_SIDE not in notes
    (job,) = [job for job in jobs if job.stem == "disagg_vs_colocated"]
    assert job.caption.startswith("Goodput per GPU (requests meeting")


def test_a_real_fleet_and_its_twin_draw_every_panel(tmp_path: Path) -> None:
    sc = v1_scenario(poisson_workload(30, 30.0, 300, 20), max_seq_len=1024, num_kv_blocks=200)
    _, result = run(sc, fleet(sc, 1, 1))
    # The same requests on the same two GPUs' worth of scenario, with no split: the twin.
    twin = RunResult(
        "s", "colocated", result.requests.drop(columns=list(TTFT_PARTS)), result.steps, {}
    )
    parts = disagg_plots.ttft_parts(result)
    done = result.requests[result.requests["status"] == "finished"]
    assert np.allclose(parts.sum(axis=1), done["ttft_s"].to_numpy())
    for stem, draw in (
        ("ttft_split", disagg_plots.plot_ttft_split),
        ("link_utilization", disagg_plots.plot_link_utilization),
        ("disagg_vs_colocated", disagg_plots.plot_disagg_vs_colocated),
    ):
        path = draw([result, twin], tmp_path / f"{stem}.png")
        assert path.stat().st_size > 1000
    html = summary_table([result])
    assert "Disaggregation" in html and "TTFT KV transfer mean" in html and "Other" not in html


def test_link_utilization_without_transfers_says_so(tmp_path: Path) -> None:
    frame = disaggregated().requests.assign(transfer_start_s=np.nan, transfer_end_s=np.nan)
    empty = RunResult("s", "d", frame, pd.DataFrame(), {})
    assert disagg_plots.plot_link_utilization([empty], tmp_path / "l.png").exists()


def test_the_glossary_covers_every_key_a_disaggregated_fleet_summarizes() -> None:
    golden = json.loads(
        (Path(BUILTIN_DIR) / "golden" / "disaggregated_vs_colocated.json").read_text()
    )
    for summary in golden.values():
        unknown = [k for k in summary if k not in SUMMARY_BY_KEY and replica_metric(k) is None]
        assert unknown == []
    assert "ttft_transfer_mean_s" in golden["disaggregated"]


def test_the_glossary_names_every_column_a_disaggregated_fleet_adds() -> None:
    sc = v1_scenario(poisson_workload(5, 10.0, 100, 5), max_seq_len=1024, num_kv_blocks=100)
    _, result = run(sc, fleet(sc, 1, 1))
    added = set(result.requests.columns) - set(REQUEST_COLUMNS)
    assert added >= {"prefill_replica", *TTFT_PARTS, "transfer_bytes"}
    names = {e.name for _, entries in glossary_sections() for e in entries}
    assert added - {"replica"} <= names


@pytest.mark.parametrize("key", ["num_prefill_gpus", "ttft_queue_p99_s", "link_busy_share"])
def test_disaggregation_keys_sit_in_their_group(key: str) -> None:
    assert SUMMARY_BY_KEY[key].section == "Disaggregation"

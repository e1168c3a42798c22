"""The frontier in reports: a sweep report draws it (and frontier.csv beside it) when its table
has what a frontier needs, and leaves it out otherwise."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pagesim.reports.folders import write_frontier
from pagesim.reports.render import write_report

RATE = "workload.arrival.rate_per_s"


def _sweep() -> pd.DataFrame:
    rows = []
    for system, speed in (("vllm", 1.0), ("orca", 0.6)):
        for rate in (1.0, 2.0, 4.0):
            rows.append(
                {
                    RATE: rate,
                    "system": system,
                    "num_gpus": 1,
                    "throughput_tok_s": 100.0 * rate * speed,
                    "tpot_p50_s": 0.02 * rate / speed,
                    "ttft_p99_s": 0.1 * rate,
                    "duration_s": 100.0 / rate,
                    "num_tokens_served": 10_000,
                    "normalized_latency_mean_s": 0.03 * rate,
                }
            )
    return pd.DataFrame(rows)


def test_a_sweep_report_draws_the_frontier_and_writes_its_csv(tmp_path: Path) -> None:
    sweep = _sweep()
    html = write_report([], tmp_path, title="t", scenario_text="", provenance={}, sweep=sweep)
    assert (tmp_path / "plots" / "frontier.png").exists()
    assert "Pareto frontier" in html.read_text()
    write_frontier(sweep, tmp_path)
    frontier = pd.read_csv(tmp_path / "frontier.csv")
    assert list(frontier["config"])[:2] == ["vllm rate_per_s=1", "vllm rate_per_s=2"]
    # orca is slower per user at the same rate and no cheaper: all of its points are dominated
    assert not frontier[frontier["system"] == "orca"]["on_throughput_frontier"].any()
    assert frontier[frontier["system"] == "vllm"]["on_throughput_frontier"].all()


def test_a_table_without_the_frontier_keys_has_no_frontier(tmp_path: Path) -> None:
    sweep = _sweep().drop(columns=["tpot_p50_s"])
    write_report([], tmp_path, title="t", scenario_text="", provenance={}, sweep=sweep)
    write_frontier(sweep, tmp_path)
    assert not (tmp_path / "plots" / "frontier.png").exists()
    assert not (tmp_path / "frontier.csv").exists()

"""A sweep report's headline findings: where each latency-vs-rate curve has its knee, and how the
key metrics move along another axis; `--detail` picks the point shown system by system."""

from __future__ import annotations

import pandas as pd
import pytest

from pagesim.reports.sweep_findings import derive_sweep_findings, knee_sentence
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.scenario.load import load_scenario
from pagesim.simulator.studies.sweep import plan_sweep, select_detail

RATE = "workload.arrival.rate_per_s"


def curve(system: str, served: list[float], latency: list[float]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            RATE: [1.0, 2.0, 3.0, 4.0],
            "system": system,
            "throughput_req_s": served,
            "normalized_latency_mean_s": latency,
        }
    )


def test_the_knee_lies_between_the_last_rate_kept_up_with_and_the_next() -> None:
    # Completes what is offered up to 2 req/s; at 3 it completes 2.4 (< 90% of 3): the knee.
    rows = curve("vllm", [1.0, 1.98, 2.4, 2.4], [0.030, 0.032, 0.10, 0.30])
    sentence = knee_sentence("vllm", rows, RATE)
    assert sentence is not None
    assert "keeps up to 2 req/s" in sentence
    assert "the knee lies between 2 and 3 req/s" in sentence


def test_a_curve_without_a_knee_and_one_saturated_from_the_start() -> None:
    table = pd.concat(
        [
            curve("vllm", [1.0, 2.0, 3.0, 3.9], [0.030, 0.031, 0.033, 0.05]),
            curve("static", [0.2, 0.2, 0.2, 0.2], [2.0, 3.0, 4.0, 5.0]),
        ]
    )
    facts = derive_sweep_findings(table)
    assert any(f.startswith("vllm: no knee up to 4 req/s") for f in facts), facts
    assert any(f.startswith("static: already saturated at the lowest rate") for f in facts)


def test_detail_names_one_point_of_the_sweep() -> None:
    points = plan_sweep("latency_vs_rate_sharegpt", [], [f"{RATE}=1,2"])
    systems = len(load_scenario("latency_vs_rate_sharegpt").systems)
    assert select_detail(points, None) == []
    last = select_detail(points, "last")
    assert len(last) == systems and all(p.axes[RATE] == 2 for p in last)
    assert all(p.axes[RATE] == 1 for p in select_detail(points, f"{RATE}=1"))
    with pytest.raises(InputError, match="no such point"):
        select_detail(points, f"{RATE}=7")
    with pytest.raises(InputError, match="expected first, last or path=value"):
        select_detail(points, "middle")

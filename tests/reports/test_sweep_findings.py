"""A sweep report's headline findings: the key metric first (along a numeric axis, or ranked over
points named by what differs), where each latency-vs-rate curve has its knee and whether its
backlog grew, how the key metrics move along another axis; `--detail` picks the point shown
system by system."""

from __future__ import annotations

import pandas as pd
import pytest

from pagesim.reports.plot_jobs import sweep_plot_jobs
from pagesim.reports.sweep_axes import axis_columns, label_axes, value_labels
from pagesim.reports.sweep_findings import derive_sweep_findings, knee_sentence
from pagesim.simulator.core.config import ReportConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.scenario.load import load_scenario
from pagesim.simulator.studies.sweep import plan_sweep, select_detail

RATE = "workload.arrival.rate_per_s"


def curve(
    system: str,
    latency: list[float],
    growth: list[float] | None = None,
    completed: list[float] | None = None,
    window_s: float = 100.0,
) -> pd.DataFrame:
    """A latency-vs-rate curve at 1..4 req/s; `growth` and `completed` are the backlog figures
    (simulator/studies/backlog.py): requests in the system, second half / first half of the
    arrival window, and the share of arrivals completed within it."""
    rows = pd.DataFrame(
        {RATE: [1.0, 2.0, 3.0, 4.0], "system": system, "normalized_latency_mean_s": latency}
    )
    if growth is not None and completed is not None:
        rows = rows.assign(
            backlog_growth=growth,
            window_completed_share=completed,
            window_s=window_s,
            service_p50_s=5.0,
        )
    return rows


STEADY = [1.1, 1.2, 1.1, 1.2]


def test_the_knee_lies_between_the_last_rate_kept_up_with_and_the_next() -> None:
    # The backlog grows at 3 req/s (3x over the window, 60% of arrivals completed): the knee.
    rows = curve("vllm", [0.030, 0.032, 0.10, 0.30], [1.1, 1.2, 3.0, 3.0], [1, 0.97, 0.6, 0.4])
    sentence = knee_sentence("vllm", rows, RATE)
    assert sentence is not None
    assert "keeps up to 2 req/s" in sentence
    assert "at 3 req/s it falls behind (the requests in the system grow 3x" in sentence
    assert "completes 60% of the arrivals" in sentence
    assert "the knee lies between 2 and 3 req/s" in sentence


def test_a_curve_without_a_knee_and_one_behind_from_the_start() -> None:
    table = pd.concat(
        [
            curve("vllm", [0.030, 0.031, 0.033, 0.05], STEADY, [0.99, 0.98, 0.97, 0.95]),
            curve("static", [2.0, 3.0, 4.0, 5.0], [2.8, 2.9, 3.0, 3.0], [0.5, 0.3, 0.2, 0.1]),
        ]
    )
    facts = derive_sweep_findings(table)
    assert any(f.startswith("vllm: no knee up to 4 req/s") for f in facts), facts
    assert any(
        f.startswith("static: at the lowest rate, 1 req/s, it falls behind") for f in facts
    ), facts


def test_completing_fewer_than_offered_with_a_steady_backlog_is_not_falling_behind() -> None:
    # spec_decode at 1 req/s: a Poisson draw offered 0.88 req/s, so it completed 0.87 of the
    # nominal 1 (the old rule said "saturated"); at 12 req/s the run was short: 59% of the
    # arrivals completed within the window, the rest while it drained, with the backlog
    # steady. Neither is falling behind.
    rows = curve("no-spec", [0.026, 0.027, 0.030, 0.041], STEADY, [0.99, 0.95, 0.8, 0.59])
    rows = rows.assign(throughput_req_s=[0.871, 1.7, 2.2, 2.4])
    sentence = knee_sentence("no-spec", rows, RATE)
    assert sentence is not None and sentence.startswith("no-spec: no knee up to 4 req/s")


def test_a_window_shorter_than_two_services_claims_no_backlog() -> None:
    # A short run still filling up looks like a growing backlog; its window (5 s) is shorter
    # than twice a request's median service (5 s each), so no trend is claimed from it.
    rows = curve("v1", [0.03, 0.03, 0.03, 0.03], [3.0] * 4, [0.2] * 4, window_s=5.0)
    sentence = knee_sentence("v1", rows, RATE)
    assert sentence is not None and sentence.startswith("v1: no knee up to 4 req/s")


def test_without_backlog_figures_the_knee_is_judged_by_latency_alone() -> None:
    rows = curve("orca", [0.03, 0.04, 0.07, 0.2])  # a sweep.csv written before they were kept
    sentence = knee_sentence("orca", rows, RATE)
    assert sentence is not None
    assert "keeps up to 2 req/s" in sentence and "falls behind" not in sentence
    assert "at 3 req/s normalized latency is 70 ms/token (2.3x)" in sentence


def test_a_rate_sweep_leads_with_the_key_metric_along_the_rate() -> None:
    table = curve("vllm", [0.03, 0.03, 0.04, 0.05], STEADY, [1, 1, 1, 1])
    table = table.assign(tpot_p50_s=[0.010, 0.012, 0.020, 0.040])
    facts = derive_sweep_findings(table, ReportConfig("tpot_p50_s"))
    assert facts[0] == "TPOT p50, rate_per_s from 1 to 4: vllm 10 ms → 40 ms."


MODELS = [
    {"preset": "deepseek-v3", "tensor_parallel": 8},
    {"config": "models/deepseek-v3-mha-hypothetical.json", "tensor_parallel": 8},
    {"preset": "llama-3.1-405b", "tensor_parallel": 8},
]


@pytest.mark.parametrize("as_text", [False, True])  # in memory, or read back from sweep.csv
def test_a_sweep_over_models_ranks_them_by_name_on_the_key_metric(as_text: bool) -> None:
    table = pd.DataFrame(
        {
            "model": [str(m) for m in MODELS] if as_text else MODELS,
            "system": "vllm-v1",
            "kv_capacity_tokens": [702_336, 94_448, 490_544],
            "tpot_p50_s": [0.0091, 0.0105, 0.0529],
        }
    )
    assert axis_columns(table) == ["model"]  # a whole table swept: no dot in its path
    facts = derive_sweep_findings(table, ReportConfig("kv_capacity_tokens", ("tpot_p50_s",)))
    assert facts[0] == (
        "KV capacity by model: deepseek-v3 702,336 tokens, llama-3.1-405b 490,544 tokens, "
        "deepseek-v3-mha-hypothetical 94,448 tokens (deepseek-v3 highest, 7.4× "
        "deepseek-v3-mha-hypothetical)."
    )
    assert facts[1].startswith("TPOT p50 by model: deepseek-v3 9.1 ms, ")
    assert sweep_plot_jobs(label_axes(table), ReportConfig("kv_capacity_tokens"))


def test_axis_values_are_named_by_what_differs() -> None:
    assert value_labels(MODELS) == ["deepseek-v3", "deepseek-v3-mha-hypothetical", "llama-3.1-405b"]
    tp = [
        {"preset": "llama-3-8b", "tensor_parallel": 1},
        {"preset": "llama-3-8b", "tensor_parallel": 2},
    ]
    assert value_labels(tp) == ["tensor_parallel 1", "tensor_parallel 2"]
    assert value_labels([{"kind": "burst"}]) == ["burst"]  # nothing differs: every key
    assert value_labels(["bf16", 2.0, 0.25]) == ["bf16", "2", "0.25"]


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

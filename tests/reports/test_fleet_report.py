"""Fleet reports: the per-replica series worked out by hand, the panels drawn only for fleets,
the router comparison only for several, and a glossary entry for every key a fleet summarizes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from plot_checks import draw_figures

from pagesim.reports import fleet_plots, plot_jobs
from pagesim.reports.glossary import (
    SUMMARY_BY_KEY,
    SummaryMetric,
    Unit,
    glossary_sections,
    replica_metric,
)
from pagesim.reports.html import summary_table
from pagesim.simulator.metrics.result import KV_CATEGORIES, RunResult
from pagesim.simulator.scenario.load import BUILTIN_DIR

ZERO_KV = dict.fromkeys(KV_CATEGORIES, 0)


def step(replica: int, start: float, running: int, waiting: int, free: int) -> dict[str, object]:
    """A 1-second step of a replica whose 100 KV slots hold `100 - free` tokens."""
    return ZERO_KV | {
        "replica": replica,
        "start_s": start,
        "duration_s": 1.0,
        "num_running": running,
        "num_waiting": waiting,
        "kv_token_slots": 100 - free,
        "kv_free_slots": free,
    }


def fleet(system: str = "rr", **summary: float) -> RunResult:
    # Replica 0 steps in [0, 1) with 2 running + 1 waiting and half its KV used; replica 1 in
    # [1, 2) with 1 running and a quarter used. Replica 0 admitted two 100-token prompts at
    # t = 0 and 0.01, one with 50 tokens cached; replica 1 one 64-token prompt with 48 cached.
    steps = pd.DataFrame([step(0, 0.0, 2, 1, 50), step(1, 1.0, 1, 0, 75)])
    requests = pd.DataFrame(
        {
            "request_id": [0, 1, 2],
            "replica": [0, 0, 1],
            "admitted_s": [0.0, 0.01, 1.5],
            "prompt_len": [100, 100, 64],
            "num_cached_tokens": [50, 0, 48],
        }
    )
    return RunResult("s", system, requests, steps, dict(summary))


def test_per_replica_load_kv_and_hit_rate_by_hand() -> None:
    edges, replicas = fleet_plots._per_replica(fleet())
    assert list(edges) == [0.0, 1.0, 2.0]
    assert list(replicas[0]["load"]) == [3.0, 0.0]  # idle time counts as zero
    assert list(replicas[1]["load"]) == [0.0, 1.0]
    assert list(replicas[0]["kv"]) == [0.5, 0.0]
    assert list(replicas[1]["kv"]) == [0.0, 0.25]
    hit0, hit1 = replicas[0]["hit"], replicas[1]["hit"]
    assert len(hit0) == fleet_plots.HIT_BUCKETS
    # 30 buckets of 1/15 s: both of replica 0's admissions fall in the first, (50 + 0) / 200;
    # replica 1's at 1.5 s in bucket 22, 48 / 64.
    assert hit0[0] == 0.25 and np.isnan(hit0[1:]).all()
    assert hit1[22] == 0.75 and np.isnan(np.delete(hit1, 22)).all()


def test_the_panels_are_drawn_for_fleets_only(tmp_path: Path) -> None:
    single = RunResult("s", "one", pd.DataFrame(), pd.DataFrame([step(0, 0.0, 1, 0, 50)]), {})
    assert fleet_plots.num_replicas(single) == 1 and not fleet_plots.has_fleet([single])
    stems = [job.stem for job in plot_jobs.run_plot_jobs([single])[0]]
    assert "replicas" not in stems and "router_comparison" not in stems
    one, two = fleet("rr", prefix_hit_rate=0.1), fleet("prefix", prefix_hit_rate=0.3)
    assert fleet_plots.has_fleet([single, one]) and not fleet_plots.has_router_comparison([one])
    stems = [job.stem for job in plot_jobs.run_plot_jobs([one, two])[0]]
    assert {"replicas", "router_comparison"} <= set(stems)
    for draw in (fleet_plots.plot_replicas, fleet_plots.plot_router_comparison):
        path = draw([single, one, two], tmp_path / f"{draw.__name__}.png")
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def panel_titles(jobs: list[plot_jobs.PlotJob], tmp_path: Path) -> dict[str, list[str]]:
    """Each fleet plot's panel titles, by stem."""
    return {
        stem: [ax.get_title(loc="left") for ax in fig.axes]
        for stem, fig in draw_figures(jobs, tmp_path)
    }


def test_no_prefix_hit_anywhere_leaves_the_hit_rate_panels_out(tmp_path: Path) -> None:
    hit, same = fleet("rr", prefix_hit_rate=0.3), fleet("prefix", prefix_hit_rate=0.3)
    jobs, notes = plot_jobs.run_plot_jobs([hit, same])
    fleet_jobs = [job for job in jobs if job.stem in ("replicas", "router_comparison")]
    titles = panel_titles(fleet_jobs, tmp_path)
    assert titles["replicas"][2] == "rr: hit rate %" and len(titles["replicas"]) == 6
    assert titles["router_comparison"][0] == "Prefix-cache hit rate (%)"
    assert all("hit rate" in job.caption for job in fleet_jobs)
    assert plot_jobs.NO_HITS not in notes
    # The same fleets, no prompt token ever served from the cache: a flat zero is nothing to see.
    cold = [
        RunResult(r.scenario, r.system, r.requests.assign(num_cached_tokens=0), r.steps, {})
        for r in (hit, same)
    ]
    assert not fleet_plots.has_prefix_hits(cold)
    jobs, notes = plot_jobs.run_plot_jobs(cold)
    fleet_jobs = [job for job in jobs if job.stem in ("replicas", "router_comparison")]
    titles = panel_titles(fleet_jobs, tmp_path)
    assert titles["replicas"] == [
        "rr: requests at the replica",
        "rr: KV used %",
        "prefix: requests at the replica",
        "prefix: KV used %",
    ]
    assert titles["router_comparison"] == [
        "TTFT mean (s)",
        "TTFT p99 (s)",
        "Load imbalance (max / mean)",
    ]
    assert not any("hit rate" in job.caption for job in fleet_jobs)
    assert notes == [plot_jobs.LEFT_OUT["preemptions_swaps"], plot_jobs.NO_HITS]


def test_many_replicas_draw_as_a_band(tmp_path: Path) -> None:
    steps = pd.DataFrame([step(i, float(i), 1, 0, 90) for i in range(fleet_plots.MAX_LINES + 1)])
    requests = pd.DataFrame(
        {"replica": [0], "admitted_s": [0.0], "prompt_len": [10], "num_cached_tokens": [0]}
    )
    result = RunResult("s", "big", requests, steps, {})
    path = fleet_plots.plot_replicas([result], tmp_path / "band.png")
    assert path.exists()


def test_replica_keys_get_a_label_with_their_number() -> None:
    metric = replica_metric("replica_12_kv_used_share")
    assert metric == SummaryMetric(
        "replica_12_kv_used_share",
        "Replica 12: KV used",
        Unit.SHARE,
        "Fleet",
        "Time-averaged share of replica i's KV capacity in use (1 − its free share).",
    )
    assert replica_metric("replica_1_unknown") is None
    assert replica_metric("replicas") is None


def test_the_glossary_covers_every_key_a_fleet_summarizes() -> None:
    names = {e.name for _, entries in glossary_sections() for e in entries}
    fleet_keys = {"num_replicas", "num_gpus", "goodput_req_s_per_gpu", "load_imbalance"}
    assert fleet_keys <= names and "replica_<i>_prefix_hit_rate" in names
    golden = json.loads((Path(BUILTIN_DIR) / "golden" / "router_comparison.json").read_text())
    for summary in golden.values():
        unknown = [k for k in summary if k not in SUMMARY_BY_KEY and replica_metric(k) is None]
        assert unknown == []


def test_the_summary_table_names_replica_rows_in_replica_order() -> None:
    summary = {
        "replica_10_num_requests": 1,
        "replica_2_prefix_hit_rate": 0.5,
        "replica_2_num_requests": 3,
        "load_imbalance": 1.25,
    }
    html = summary_table([RunResult("s", "rr", pd.DataFrame(), pd.DataFrame(), summary)])
    rows = [
        'Load imbalance</th><td class="num">1.25',
        'Replica 2: requests</th><td class="num">3',
        'Replica 2: prefix-cache hit rate</th><td class="num">50.0%',
        'Replica 10: requests</th><td class="num">1',
    ]
    positions = [html.index(row) for row in rows]
    assert positions == sorted(positions)
    assert "Other" not in html


@pytest.mark.parametrize("key", ["num_replicas", "num_gpus", "load_imbalance"])
def test_fleet_keys_sit_in_the_fleet_group(key: str) -> None:
    assert SUMMARY_BY_KEY[key].section == "Fleet"


def test_the_glossary_covers_every_key_of_every_built_in_golden_summary() -> None:
    for path in sorted((Path(BUILTIN_DIR) / "golden").glob("*.json")):
        for summary in json.loads(path.read_text()).values():
            unknown = [k for k in summary if k not in SUMMARY_BY_KEY and replica_metric(k) is None]
            assert unknown == [], path.name


def test_a_fleet_shows_its_spec_and_moe_keys_in_their_groups_and_per_replica() -> None:
    """The keys cluster/model_keys.py adds to a fleet's summary: documented, grouped with a
    single run's, and a row per replica in the fleet's group."""
    summary = {
        "spec_acceptance_rate": 30 / 57,
        "moe_experts_touched_per_layer": 7.5,
        "replica_0_spec_acceptance_rate": 1.0,
        "replica_1_spec_acceptance_rate": 0.0,
        "replica_1_moe_experts_touched_per_layer": 8.0,
        "replica_0_num_requests": 1,
    }
    html = summary_table([RunResult("s", "f", pd.DataFrame(), pd.DataFrame(), summary)])
    rows = [
        'Speculative decoding</th></tr><tr><th title="spec_acceptance_rate">Draft acceptance '
        'rate</th><td class="num">52.6%',
        'Mixture of experts</th></tr><tr><th title="moe_experts_touched_per_layer">Experts read '
        'per MoE layer</th><td class="num">7.5',
        'Replica 0: requests</th><td class="num">1',
        'Replica 0: draft acceptance rate</th><td class="num">100.0%',
        'Replica 1: draft acceptance rate</th><td class="num">0.0%',
        'Replica 1: experts read per MoE layer</th><td class="num">8<',
    ]
    positions = [html.index(row) for row in rows]
    assert positions == sorted(positions)
    assert "Other" not in html

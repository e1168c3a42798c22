"""The cheapest-fleet search: bisection on the replica count (exact stories and properties), the
answer checked against every size simulated, resuming from the cache, the ranking by GPUs and by
cost, cost per million tokens by hand, and bad search axes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagesim.simulator.core.capacity import CapacityConfig
from pagesim.simulator.core.catalog import get_gpu
from pagesim.simulator.core.cluster import RouterKind
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.engine import simulate
from pagesim.simulator.scenario.load import load_scenario
from pagesim.simulator.studies.bisection import ReplicaSearch
from pagesim.simulator.studies.capacity_search import Criteria
from pagesim.simulator.studies.executors import SerialExecutor
from pagesim.simulator.studies.fleet_ranking import (
    answer_lines,
    cost_per_million_tokens,
    fleet_ranking,
)
from pagesim.simulator.studies.fleet_search import (
    REPLICAS,
    FleetSearchRun,
    FleetShape,
    plan_fleets,
    search_fleets,
    start_size,
)
from pagesim.simulator.studies.point_cache import PointCache
from pagesim.simulator.studies.points import Point, extra_metrics
from pagesim.simulator.studies.sweep import PointRecord

# Llama-3-8B on A100-80GB at 40 req/s of 500-1,500-token prompts: one TP1 replica is swamped
# (TTFT p99 > 3 s); worked out by simulating every size (test_the_answer_is_the_fewest...).
TINY = """
name = "tiny_fleet"
seed = 3
[model]
preset = "llama-3-8b"
[gpu]
preset = "a100-80gb"
[workload]
num_requests = 60
[workload.arrival]
kind = "poisson"
rate_per_s = 40
[workload.prompt]
kind = "uniform"
low = 500
high = 1500
[workload.output]
kind = "uniform"
low = 20
high = 120
[[systems]]
name = "v1"
policy = "vllm-v1"
[slo]
ttft_s = 0.3
tpot_s = 0.04
[capacity]
max_replicas = 6
tensor_parallel = [1, 2]
routers = ["round-robin", "least-outstanding"]
price_per_gpu_hour = { a100-80gb = 2.0 }
"""


def write(tmp_path: Path, text: str = TINY) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(text)
    return path


def walk(search: ReplicaSearch, meets_from: int) -> list[int]:
    """Drive `search` with 'meets the SLO from `meets_from` replicas on'; the sizes tried."""
    tried = []
    while (size := search.next_value()) is not None:
        tried.append(size)
        search.record(size, size >= meets_from)
    return tried


def test_doubling_then_bisecting_from_one_replica() -> None:
    search = ReplicaSearch(1, 1, 32)
    # 1, 2, 4 fail; 8 meets; bisect (4, 8): 6 meets, 5 meets -> adjacent to 4.
    assert walk(search, 5) == [1, 2, 4, 8, 6, 5]
    assert (search.ok, search.bad, search.num_evaluations) == (5, 4, 6)


def test_a_start_at_the_answer_confirms_it_in_two_runs() -> None:
    search = ReplicaSearch(5, 1, 32)
    # 5 meets; halve to 2 (fails); bisect (2, 5): 3 fails, 4 fails -> adjacent.
    assert walk(search, 5) == [5, 2, 3, 4]
    exact = ReplicaSearch(4, 4, 32)  # 4 is also the least allowed: nothing below to try
    assert walk(exact, 4) == [4]
    assert (exact.ok, exact.bad) == (4, None)


def test_the_range_bounds_the_search_both_ways() -> None:
    never = ReplicaSearch(3, 1, 10)
    assert walk(never, 11) == [3, 6, 10]  # doubling stops at max_replicas
    assert (never.ok, never.bad) == (None, 10)
    always = ReplicaSearch(8, 2, 10)
    assert walk(always, 1) == [8, 4, 2]
    assert (always.ok, always.bad) == (2, None)


def test_a_non_monotone_answer_is_flagged() -> None:
    search = ReplicaSearch(4, 1, 8)
    search.record(4, True)
    search.record(6, False)  # more replicas failed: the assumption broke
    assert not search.is_monotone
    assert search.next_value() is None


@given(
    low=st.integers(1, 20),
    span=st.integers(0, 200),
    start=st.integers(1, 300),
    offset=st.integers(0, 230),
)
def test_bisection_finds_any_threshold_in_logarithmic_runs(
    low: int, span: int, start: int, offset: int
) -> None:
    high = low + span
    threshold = low + offset  # > high: nothing meets
    search = ReplicaSearch(start, low, high)
    tried = walk(search, threshold)
    assert len(set(tried)) == len(tried)  # no size twice
    assert all(low <= n <= high for n in tried)
    if threshold <= high:
        assert search.ok == threshold
        assert search.bad == (None if threshold == low else threshold - 1)
    else:
        assert (search.ok, search.bad) == (None, high)
    assert len(tried) <= 2 * (high.bit_length() + 1) + 2


def test_bad_replica_range() -> None:
    with pytest.raises(InputError, match="need 1 <= min_replicas <= max_replicas, got 5, 3"):
        ReplicaSearch(1, 5, 3)


# --- on real simulations -------------------------------------------------------------------


def test_the_answer_is_the_fewest_replicas_that_meet_the_slo_and_a_rerun_resumes(
    tmp_path: Path,
) -> None:
    plan = plan_fleets(write(tmp_path))
    assert [s.label for s in plan.shapes] == [
        "v1 a100-80gb TP1 round-robin",
        "v1 a100-80gb TP1 least-outstanding",
        "v1 a100-80gb TP2 round-robin",
        "v1 a100-80gb TP2 least-outstanding",
    ]
    criteria = Criteria()
    cache = PointCache(tmp_path / "cache")
    run = search_fleets(plan.shapes, plan.settings, SerialExecutor(), cache=cache)
    assert run.num_cached == 0
    for shape, search in zip(run.shapes, run.searches, strict=True):
        meets = []
        for n in range(1, plan.settings.max_replicas + 1):  # every size, simulated directly
            point = shape.with_replicas(n)
            result = simulate(point.scenario, point.system)
            meets.append(criteria.is_sustained(dict(result.summary) | extra_metrics(result)))
        fewest = meets.index(True) + 1
        assert meets == [False] * (fewest - 1) + [True] * (len(meets) - fewest + 1)  # monotone
        assert (search.ok, search.bad) == (fewest, fewest - 1), shape.label
    # Worked out above: 4 TP1 replicas or 2 TP2 replicas, 4 GPUs either way.
    assert [s.ok for s in run.searches] == [4, 4, 2, 2]
    again = search_fleets(plan.shapes, plan.settings, SerialExecutor(), cache=cache)
    assert (again.num_computed, again.num_cached) == (0, run.num_computed + run.num_cached)
    assert [s.ok for s in again.searches] == [4, 4, 2, 2]
    ranking = fleet_ranking(again, criteria)
    assert list(ranking["num_gpus"]) == [4, 4, 4, 4]
    assert list(ranking["cost_per_hour"]) == [8.0] * 4  # 4 GPUs x 2.0 per GPU-hour
    row = ranking.iloc[0]
    record = again.at(again.shapes[0], 4)
    assert record is not None
    summary = record.summary
    hours = summary["duration_s"] / 3600
    assert row["cost_per_mtok"] == pytest.approx(8.0 * hours / summary["num_tokens_served"] * 1e6)


def test_the_start_keeps_the_scenarios_gpu_count() -> None:
    plan_scenario = load_scenario(
        "fleet_capacity", ["cluster.pools[0].count=3", "model.tensor_parallel=4"]
    )
    shapes = [
        FleetShape({}, plan_scenario, plan_scenario.systems[0], get_gpu("h100-sxm"), tp, r)
        for tp, r in (
            (2, RouterKind.ROUND_ROBIN),
            (4, RouterKind.ROUND_ROBIN),
            (8, RouterKind.RANDOM),
        )
    ]
    # The pool's 3 x TP4 = 12 GPUs: 6 replicas of TP2, 3 of TP4, 2 of TP8 (12/8 rounded up).
    assert [start_size(s) for s in shapes] == [6, 3, 2]


def test_extra_metrics_count_a_fleets_gpus_and_served_tokens(tmp_path: Path) -> None:
    plan = plan_fleets(write(tmp_path))
    point = plan.shapes[2].with_replicas(3)  # 3 replicas of TP2
    result = simulate(point.scenario, point.system)
    extra = extra_metrics(result)
    assert extra["num_gpus"] == 6
    finished = result.requests[result.requests["status"] == "finished"]
    served = int(finished["prompt_len"].sum() + finished["num_output_tokens"].sum())
    assert extra["num_tokens_served"] == served
    assert len(finished) == 60


# --- ranking and cost, by hand -------------------------------------------------------------


def test_cost_per_million_tokens_by_hand() -> None:
    # 4 GPUs at 2.5 per GPU-hour for 30 minutes = 5.0; 2,000,000 tokens -> 2.5 per million.
    summary = {"num_gpus": 4, "duration_s": 1800.0, "num_tokens_served": 2_000_000}
    assert cost_per_million_tokens(2.5, summary) == pytest.approx(2.5)
    assert cost_per_million_tokens(None, summary) is None
    assert cost_per_million_tokens(2.5, summary | {"num_tokens_served": 0}) is None


def fake_run(tmp_path: Path) -> FleetSearchRun:
    """An A100 TP2 shape that met at 3 replicas (6 GPUs) and an H100 TP4 shape that met at 1
    (4 GPUs): fewer GPUs, but 4 x 2.49 = 9.96 per hour against 6 x 1.49 = 8.94."""
    scenario = load_scenario(write(tmp_path))
    settings = CapacityConfig(price_per_gpu_hour=(("a100-80gb", 1.49), ("h100-sxm", 2.49)))
    a100 = FleetShape({}, scenario, scenario.systems[0], get_gpu("a100-80gb"), 2, RouterKind.RANDOM)
    h100 = FleetShape({}, scenario, scenario.systems[0], get_gpu("h100-sxm"), 4, RouterKind.RANDOM)
    searches = [ReplicaSearch(3, 1, 8), ReplicaSearch(1, 1, 8)]
    run = FleetSearchRun([a100, h100], searches, settings)
    for shape, search, size, gpus in ((a100, searches[0], 3, 6), (h100, searches[1], 1, 4)):
        search.record(size, True)
        summary = {
            "num_gpus": gpus,
            "duration_s": 3600.0,
            "num_tokens_served": 1_000_000,
            "slo_share": 0.95,
            "queue_delay_p99_s": 0.1,
        }
        point = Point({REPLICAS: size}, scenario, scenario.systems[0], f"key{size}")
        run.evaluations.append((shape, PointRecord(point, summary, False, 0.0), True))
    return run


def test_ranked_by_gpus_and_by_cost_when_they_disagree(tmp_path: Path) -> None:
    ranking = fleet_ranking(fake_run(tmp_path), Criteria())
    assert list(ranking["gpu"]) == ["h100-sxm", "a100-80gb"]  # fewest GPUs first
    assert list(ranking["rank_by_gpus"]) == [1, 2]
    assert list(ranking["rank_by_cost"]) == [2, 1]
    assert list(ranking["cost_per_hour"]) == pytest.approx([9.96, 8.94])
    # One hour of the fleet per million tokens: the cost per hour.
    assert list(ranking["cost_per_mtok"]) == pytest.approx([9.96, 8.94])
    assert answer_lines(ranking, "USD") == [
        "fewest GPUs: 1 x h100-sxm TP4 = 4 GPUs behind random (v1), 9.96 USD/h, "
        "9.96 USD per million tokens",
        "cheapest: 3 x a100-80gb TP2 = 6 GPUs behind random (v1), 8.94 USD/h, "
        "8.94 USD per million tokens",
    ]


def test_shapes_that_never_met_or_cannot_run_come_last_with_why(tmp_path: Path) -> None:
    text = TINY.replace(
        'preset = "llama-3-8b"', 'preset = "llama-3-70b"\ntensor_parallel = 8'
    ).replace("tensor_parallel = [1, 2]", "tensor_parallel = [1, 8]")
    text = text.replace("max_replicas = 6", "max_replicas = 1")
    plan = plan_fleets(write(tmp_path, text))
    unfit = [s for s in plan.shapes if s.unfit]
    assert [s.tensor_parallel for s in unfit] == [1, 1]  # 140 GB of weights on one 80 GB GPU
    assert "no memory left for the KV cache" in str(unfit[0].unfit)
    run = search_fleets(plan.shapes, plan.settings, SerialExecutor())
    ranking = fleet_ranking(run, Criteria())
    assert ranking["num_gpus"].isna().all()  # one TP8 replica cannot keep up with 40 req/s
    notes = list(ranking["why_not"])
    assert notes[0].startswith("none of 1..1 replicas met the SLO (at 1: SLO met by")
    assert notes[2].startswith("cannot run: system 'v1': no memory left for the KV cache")
    assert answer_lines(ranking, "USD") == [
        "no fleet in the range met the SLO; widen [capacity] max_replicas or its axes"
    ]


# --- bad input -----------------------------------------------------------------------------


def test_a_param_the_search_sets_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path)
    for param in ("gpu.preset=h100-sxm", "model.tensor_parallel=2", "cluster.router.kind=random"):
        with pytest.raises(InputError, match="a fleet search sets the GPU, tensor-parallel"):
            plan_fleets(path, params=[param])
    variants = plan_fleets(path, params=["systems.max_num_seqs=8,64"])
    assert len(variants.shapes) == 8  # 2 variants x 4 shapes


def test_a_search_needs_an_slo_and_a_runnable_shape(tmp_path: Path) -> None:
    path = write(tmp_path, TINY.replace("ttft_s = 0.3\ntpot_s = 0.04\n", ""))
    with pytest.raises(InputError, match=r"slo: a fleet search needs an SLO; add \[slo\]"):
        plan_fleets(path)
    text = TINY.replace(
        'preset = "llama-3-8b"', 'preset = "llama-3-70b"\ntensor_parallel = 8'
    ).replace("tensor_parallel = [1, 2]", "tensor_parallel = [1]")
    with pytest.raises(InputError, match="capacity: no fleet shape can run the model: a100-80gb"):
        plan_fleets(write(tmp_path, text))


def test_the_builtins_example_prices_are_the_cited_ones() -> None:
    """fleet_capacity's prices are the low ends of the on-demand ranges its comment cites
    (pricegpu.pages.dev, early 2026: A100 80GB SXM $1.49-2.49, H100 SXM $2.49-3.99 per GPU-hour),
    labelled as example list prices to override."""
    scenario = load_scenario("fleet_capacity")
    assert scenario.capacity is not None
    assert scenario.capacity.price_per_gpu_hour == (("a100-80gb", 1.49), ("h100-sxm", 2.49))
    assert scenario.source is not None
    text = scenario.source.read_text()
    assert "EXAMPLE list prices" in text and "pricegpu.pages.dev" in text

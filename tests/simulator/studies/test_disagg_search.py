"""The disaggregated fleet search: exact candidate enumeration, the answer checked against every
candidate simulated, dominated candidates skipped, colocated twins of the same fleet run once,
a rerun resumes from the cache, the ranking and answer lines, and [capacity] read and written."""

from __future__ import annotations

from pathlib import Path

import pytest

from pagesim.simulator.core.capacity import CapacityConfig
from pagesim.simulator.engine import simulate
from pagesim.simulator.scenario.load import describe_scenario, load_scenario
from pagesim.simulator.studies.capacity_search import Criteria
from pagesim.simulator.studies.disagg_ranking import disagg_answer_lines, disagg_ranking
from pagesim.simulator.studies.disagg_search import (
    DECODE,
    PREFILL,
    DisaggPlan,
    candidates,
    search_disagg,
)
from pagesim.simulator.studies.executors import SerialExecutor
from pagesim.simulator.studies.fleet_search import plan_fleets
from pagesim.simulator.studies.point_cache import PointCache
from pagesim.simulator.studies.points import extra_metrics

# Llama-3-8B on A100-80GB, 30 req/s of 500-1,500-token prompts for 1 s: one prefill replica
# queues past the 0.3 s TTFT bound (worked out by simulating every candidate below).
TINY = """
name = "tiny_disagg"
seed = 3
[model]
preset = "llama-3-8b"
[gpu]
preset = "a100-80gb"
[workload]
num_requests = 30
[workload.arrival]
kind = "poisson"
rate_per_s = 30
[workload.prompt]
kind = "uniform"
low = 500
high = 1500
[workload.output]
kind = "uniform"
low = 20
high = 80
[[systems]]
name = "disagg"
policy = "vllm-v1"
[[systems]]
name = "colocated"
policy = "vllm-v1"
[slo]
ttft_s = 0.3
tpot_s = 0.04
[cluster]
colocated_systems = ["colocated"]
[cluster.link]
preset = "ib-ndr"
[[cluster.pools]]
name = "p"
role = "prefill"
count = 1
[[cluster.pools]]
name = "d"
role = "decode"
count = 1
[capacity]
max_replicas = 3
max_gpus = 4
price_per_gpu_hour = { a100-80gb = 2.0 }
"""


def plan(tmp_path: Path, *overrides: str) -> DisaggPlan:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    found = plan_fleets(path, list(overrides))
    assert isinstance(found, DisaggPlan)
    return found


def test_every_candidate_within_the_bounds_fewest_gpus_first(tmp_path: Path) -> None:
    found = plan(tmp_path, "capacity.prefill_tensor_parallel=[1, 2]")
    assert [s.label for s in found.shapes] == [
        "disagg P:D TP1:TP1",
        "disagg P:D TP2:TP1",
        "colocated colocated TP1:TP1",
        "colocated colocated TP2:TP1",
    ]
    # TP1:TP1, p + d <= 4 GPUs, each count in 1..3.
    assert list(candidates(found.shapes[0], found.settings)) == [
        (1, 1),
        (1, 2),
        (2, 1),
        (1, 3),
        (2, 2),
        (3, 1),
    ]
    # TP2:TP1: 2p + d <= 4.
    assert list(candidates(found.shapes[1], found.settings)) == [(1, 1), (1, 2)]
    wide = CapacityConfig(min_replicas=2, max_replicas=5, max_gpus=9)
    # 2p + d <= 9, p and d in 2..5: (2, 2..5) and (3, 2..3), by GPUs: 6, 7, 8, 8, 9, 9.
    assert list(candidates(found.shapes[1], wide)) == [
        (2, 2),
        (2, 3),
        (2, 4),
        (3, 2),
        (2, 5),
        (3, 3),
    ]
    point = found.shapes[1].with_sizes(1, 2)
    pools = point.scenario.cluster.pools  # type: ignore[union-attr]
    assert [(p.count, p.tensor_parallel, p.role.value) for p in pools] == [
        (1, 2, "prefill"),
        (2, 1, "decode"),
    ]
    assert point.axes == {
        "prefill_tensor_parallel": 2,
        "decode_tensor_parallel": 1,
        PREFILL: 1,
        DECODE: 2,
    }


def test_the_answer_is_the_fewest_gpus_that_meet_the_slo_and_a_rerun_resumes(
    tmp_path: Path,
) -> None:
    found = plan(tmp_path)
    disagg, colocated = found.shapes
    criteria = Criteria()
    meets = {}  # every disaggregated candidate, simulated directly
    for p, d in candidates(disagg, found.settings):
        point = disagg.with_sizes(p, d)
        result = simulate(point.scenario, point.system)
        meets[(p, d)] = criteria.is_sustained(dict(result.summary) | extra_metrics(result))
    for (p, d), ok in meets.items():  # the monotonicity the search assumes holds here
        assert not ok or all(meets[c] for c in meets if c[0] >= p and c[1] >= d)
    cache = PointCache(tmp_path / "cache")
    run = search_disagg(found.shapes, found.settings, SerialExecutor(), cache=cache)
    judged = {
        (r.point.axes[PREFILL], r.point.axes[DECODE]): ok
        for s, r, ok in run.evaluations
        if s is disagg
    }
    assert all(meets[c] == ok for c, ok in judged.items())
    # Skipped: exactly those with at least the replicas of a smaller one that met.
    skipped = set(meets) - set(judged)
    assert run.num_dominated[0] == len(skipped)
    for p, d in skipped:
        assert any(judged.get(c) for c in judged if c[0] <= p and c[1] <= d)
    fewest = min(sum(c) for c, ok in meets.items() if ok)
    ranking = disagg_ranking(run, criteria)
    row = ranking[ranking["system"] == "disagg"].iloc[0]
    assert row["num_gpus"] == fewest and meets[(row[PREFILL], row[DECODE])]
    assert row["cost_per_hour"] == fewest * 2.0
    # Worked out by the loop above: only 3 prefill replicas keep TTFT under 0.3 s; the
    # colocated twin meets the SLO with 3 TP1 replicas, (1, 2) and (2, 1) being one fleet,
    # simulated once, and its three 4-GPU candidates dominated.
    assert [k for k, ok in meets.items() if ok] == [(3, 1)]
    assert (row[PREFILL], row[DECODE]) == (3, 1)
    twin = [(r.point.axes[PREFILL], r.point.axes[DECODE], ok) for s, r, ok in run.evaluations]
    assert twin == [
        (1, 1, False),
        (1, 1, False),
        (1, 2, False),
        (2, 1, False),
        (1, 2, True),
        (2, 1, True),
        (1, 3, False),
        (2, 2, False),
        (3, 1, True),
    ]
    keys = [r.point.key for s, r, _ in run.evaluations if s is colocated]
    assert len(keys) == 3 and keys[1] == keys[2]
    assert run.num_dominated == [0, 3]
    assert run.num_computed == 8
    again = search_disagg(found.shapes, found.settings, SerialExecutor(), cache=cache)
    assert (again.num_computed, again.num_cached) == (0, run.num_computed)
    assert disagg_ranking(again, criteria).equals(ranking)


def test_the_ranking_and_answer_lines(tmp_path: Path) -> None:
    found = plan(tmp_path)
    run = search_disagg(
        found.shapes, found.settings, SerialExecutor(), cache=PointCache(tmp_path / "c")
    )
    ranking = disagg_ranking(run, Criteria())
    lines = disagg_answer_lines(ranking, "USD")
    first = ranking.iloc[0]
    assert lines[0].startswith("fewest GPUs: ")
    assert f"= {int(first['num_gpus'])} GPUs ({first['system']})" in lines[0]
    assert list(ranking["rank_by_gpus"])[: ranking["num_gpus"].notna().sum()] == [
        *range(1, ranking["num_gpus"].notna().sum() + 1)
    ]
    none = disagg_answer_lines(ranking.assign(num_gpus=float("nan")), "USD")
    assert none == [
        "no fleet within the bounds met the SLO; raise [capacity] max_gpus or max_replicas, "
        "or widen the degrees"
    ]


def test_capacity_of_a_disaggregated_scenario_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY.replace("max_gpus = 4", "max_gpus = 6\ndecode_tensor_parallel = [1, 2]"))
    scenario = load_scenario(path)
    assert scenario.capacity == CapacityConfig(
        max_replicas=3,
        max_gpus=6,
        decode_tensor_parallel=(1, 2),
        price_per_gpu_hour=(("a100-80gb", 2.0),),
    )
    again = tmp_path / "again.toml"
    again.write_text(describe_scenario(scenario))
    assert load_scenario(again).capacity == scenario.capacity


def test_max_gpus_defaults_to_twice_the_scenarios_fleet(tmp_path: Path) -> None:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY.replace("max_gpus = 4\n", ""))
    capacity = load_scenario(path).capacity
    assert capacity is not None and capacity.max_gpus == 4  # 1 prefill + 1 decode GPU, x 2


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('gpus = ["h100-sxm"]', "capacity.gpus: not searched for a disaggregated scenario"),
        ("tensor_parallel = [2]", "use prefill_tensor_parallel and decode_tensor_parallel"),
        ('routers = ["random"]', "the phase routers are the scenario's"),
        ("prefill_tensor_parallel = [3]", "3 does not divide llama-3-8b's 32 heads"),
        ("decode_tensor_parallel = []", "expected a non-empty array"),
    ],
)
def test_bad_disaggregated_capacity_is_one_error(tmp_path: Path, line: str, message: str) -> None:
    from pagesim.simulator.core.errors import InputError

    path = tmp_path / "bad.toml"
    path.write_text(TINY + line + "\n")
    with pytest.raises(InputError, match="capacity") as error:
        load_scenario(path)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_max_gpus_below_the_smallest_fleet_and_disaggregated_keys_on_one_pool(
    tmp_path: Path,
) -> None:
    from pagesim.simulator.core.errors import InputError

    path = tmp_path / "bad.toml"
    path.write_text(TINY.replace("max_gpus = 4", "max_gpus = 1"))
    with pytest.raises(InputError) as error:
        load_scenario(path)
    assert str(error.value).endswith(
        "capacity.max_gpus: the smallest fleet searched (1 prefill + 1 decode replicas at the "
        "lowest degrees) has 2 GPUs; raise max_gpus to at least 2"
    )
    one_pool = TINY.split("[cluster]")[0] + "[capacity]\ndecode_tensor_parallel = [1]\n"
    path.write_text(one_pool)
    with pytest.raises(InputError) as error:
        load_scenario(path)
    assert "capacity.decode_tensor_parallel: applies to a disaggregated scenario" in str(
        error.value
    )
    # max_gpus bounds a one-pool search too (its shapes are pruned by it: test_shape_pruning.py)
    path.write_text(TINY.split("[cluster]")[0] + "[capacity]\nmax_gpus = 4\n")
    capacity = load_scenario(path).capacity
    assert capacity is not None and capacity.max_gpus == 4


def test_the_builtins_example_price_is_fleet_capacitys_cited_one() -> None:
    # Both cite the low end of pricegpu.pages.dev's H100 SXM 80GB range (early 2026): $2.49.
    disagg = load_scenario("disaggregated_vs_colocated").capacity
    fleet = load_scenario("fleet_capacity").capacity
    assert disagg is not None and fleet is not None
    assert disagg.price_of("h100-sxm") == fleet.price_of("h100-sxm") == 2.49
    assert (disagg.max_gpus, disagg.prefill_tensor_parallel) == (6, (1, 2))


def test_equal_gpus_and_cost_rank_by_goodput_per_gpu(tmp_path: Path) -> None:
    from pagesim.simulator.studies.disagg_search import DisaggSearchRun
    from pagesim.simulator.studies.sweep import PointRecord

    found = plan(tmp_path, "capacity.prefill_tensor_parallel=[1, 2]")
    tp1, tp2 = found.shapes[:2]
    run = DisaggSearchRun(found.shapes, found.settings, num_dominated=[0, 0, 0, 0])
    # Both 3 GPUs at 2.0 per GPU-hour: 2 x TP1 + 1 decode, and 1 x TP2 + 1 decode.
    for shape, (p, d), goodput in ((tp1, (2, 1), 1.0), (tp2, (1, 1), 2.0)):
        point = shape.with_sizes(p, d)
        run.evaluations.append(
            (shape, PointRecord(point, {"goodput_req_s_per_gpu": goodput}, True, 0.0), True)
        )
    ranking = disagg_ranking(run, Criteria())
    assert list(ranking["config"][:2]) == ["disagg P:D TP2:TP1", "disagg P:D TP1:TP1"]
    assert list(ranking["cost_per_hour"][:2]) == [6.0, 6.0]
    assert list(ranking["rank_by_cost"][:2]) == [1, 2]
    assert list(ranking["rank_by_goodput"][:2]) == [1, 2]
    assert disagg_answer_lines(ranking, "USD") == [
        "fewest GPUs: 1 prefill x a100-80gb TP2 + 1 decode TP1 = 3 GPUs (disagg), goodput 2 req/s "
        "per GPU, 6 USD/h",
        "most goodput per GPU: the same fleet",
        "cheapest: the same fleet",
    ]

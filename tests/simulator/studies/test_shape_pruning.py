"""The TP x PP x DP x EP fleet search: which layouts are pruned before simulating (Mixtral-8x7B on
an H100, weights per GPU by hand), the "which axis won" sentence on a hand-made ranking, and
that the search never returns a pruned shape."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.simulator.core.catalog import GIB, get_gpu, get_model
from pagesim.simulator.core.config import Scenario
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.kv.block_budget import weight_bytes_per_gpu
from pagesim.simulator.scenario.load import load_scenario
from pagesim.simulator.studies.axis_verdict import axis_line
from pagesim.simulator.studies.capacity_search import Criteria
from pagesim.simulator.studies.fleet_ranking import fleet_ranking
from pagesim.simulator.studies.fleet_search import FleetPlan, plan_fleets, search_fleets
from pagesim.simulator.studies.points import Evaluate, PointOutcome, PointTask
from pagesim.simulator.studies.shape_pruning import Layout, prune, pruning_line

MIXTRAL = """
name = "mixtral_search"
[model]
preset = "mixtral-8x7b"
tensor_parallel = 2  # one GPU cannot hold it (test_mixtral_weights_per_gpu_by_hand)
[gpu]
preset = "h100-sxm"
[workload]
num_requests = 20
[workload.arrival]
kind = "poisson"
rate_per_s = 5
[workload.prompt]
kind = "fixed"
value = 100
[workload.output]
kind = "fixed"
value = 10
[[systems]]
name = "v1"
policy = "vllm-v1"
[slo]
ttft_s = 1
[capacity]
max_replicas = 8
"""


def scenario(text: str = MIXTRAL) -> Scenario:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s.toml"
        path.write_text(text)
        return load_scenario(path)


def test_mixtral_weights_per_gpu_by_hand() -> None:
    # 32 layers of q, o (4096 x 4096), k, v (4096 x 1024), a router (4096 x 8) and 8 experts of
    # three 4096 x 14336 matrices; embedding and LM head 32,000 x 4096; all 2 bytes (BF16).
    routed = 2 * 32 * 8 * 3 * 4096 * 14336
    rest = 2 * (32 * (2 * 4096**2 + 2 * 4096 * 1024 + 4096 * 8) + 2 * 32000 * 4096)
    model = get_model("mixtral-8x7b")
    assert weight_bytes_per_gpu(model, 1) == rest + routed  # 87.0 GiB: more than an H100 holds
    assert weight_bytes_per_gpu(model, 1, 2) == rest + routed // 2  # DP2 EP: 45.0 GiB per GPU
    assert (rest + routed) / GIB == pytest.approx(86.99, abs=0.01)


@pytest.mark.parametrize(
    ("layout", "rule"),
    [
        # 87.0 GiB of weights > 80 GiB x 0.9 less activations (71.3 GiB): no KV block fits
        (Layout(1), "weights + KV do not fit"),
        (Layout(1, expert_parallel=True), "weights + KV do not fit"),  # EP over 1 GPU: the same
        (Layout(2), None),  # 43.5 GiB per GPU
        (Layout(1, pipeline_parallel=2), None),  # 16 layers per stage: ~43.5 GiB per GPU
        (Layout(1, data_parallel=2, expert_parallel=True), None),  # 45.0 GiB per GPU
        (Layout(8, expert_parallel=True), None),  # one expert per GPU
        (Layout(8, data_parallel=2, expert_parallel=True), "experts do not split"),  # 16 > 8
        (Layout(1, 2, 2, True), "PP not modelled"),  # stages with DP attention
        (Layout(3), "TP vs heads"),  # 32 heads
        (Layout(16), "TP across nodes"),  # 16 divides the heads, but spans two 8-GPU nodes
        (Layout(1, pipeline_parallel=33), "PP > layers"),  # 32 decoder layers
    ],
)
def test_which_mixtral_layouts_fit_an_h100(layout: Layout, rule: str | None) -> None:
    base = scenario()
    on, system = layout.apply(replace(base, capacity=None), base.systems[0], get_gpu("h100-sxm"))
    found = prune(on, system, layout)
    assert (found.rule if found else None) == rule
    if rule == "weights + KV do not fit":
        assert found is not None and "take 87.0 GiB per GPU" in found.detail


def test_dense_models_and_max_gpus_prune_too() -> None:
    dense = scenario(MIXTRAL.replace("mixtral-8x7b", "llama-3-8b"))
    on, system = Layout(1, data_parallel=2, expert_parallel=True).apply(
        dense, dense.systems[0], dense.gpu
    )
    found = prune(on, system, Layout(1, data_parallel=2, expert_parallel=True))
    assert found is not None and found.rule == "dense model"
    assert found.detail == "data_parallel 2: llama-3-8b has no experts to split"
    big = Layout(4, pipeline_parallel=2)
    on, system = big.apply(dense, dense.systems[0], dense.gpu)
    over = prune(on, system, big, max_gpus=12, min_replicas=2)
    assert over is not None and over.detail == (
        "the smallest fleet of this shape needs 16 GPUs; max_gpus is 12"
    )
    assert prune(on, system, big, max_gpus=16, min_replicas=2) is None


def test_the_plan_counts_pruned_shapes_by_rule() -> None:
    text = MIXTRAL + "tensor_parallel = [1, 2]\npipeline_parallel = [1, 2]\n"
    text += "data_parallel = [1, 2]\nexpert_parallel = [false]\n"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s.toml"
        path.write_text(text)
        plan = plan_fleets(path)
    assert isinstance(plan, FleetPlan)
    # TP x PP x {DP1 EP off, DP2 (always EP)} = 8 shapes; one router each
    assert [s.label for s in plan.shapes if s.pruned_by] == [
        "v1 h100-sxm TP1 round-robin",  # 87.0 GiB per GPU
        "v1 h100-sxm TP1xPP2xDP2 EP",  # stages with DP attention
        "v1 h100-sxm TP2xPP2xDP2 EP",
    ]
    assert pruning_line([s.pruned_by for s in plan.shapes]) == (
        "pruned 3 of 8 shapes before simulating: 2 PP not modelled, 1 weights + KV do not fit"
    )


def test_the_axis_sentence_compares_the_winner_with_its_one_axis_neighbours() -> None:
    def row(tp: int, pp: int, dp: int, ep: bool, gpus: int | None, **more: object) -> dict:
        return {
            "system": "v1",
            "gpu": "h100-sxm",
            "tensor_parallel": tp,
            "pipeline_parallel": pp,
            "data_parallel": dp,
            "expert_parallel": ep,
            "router": "round-robin",
            "replicas": None if gpus is None else gpus // (tp * pp * dp),
            "num_gpus": gpus,
            "cost_per_hour": None,
            "pruned_by": None,
        } | more

    ranking = pd.DataFrame(
        [
            row(2, 2, 1, False, 8),  # the winner: 2 replicas of TP2 x PP2
            row(2, 1, 1, False, 12),  # PP1: 12 GPUs
            row(4, 2, 1, False, 8, cost_per_hour=20.0),  # TP4: a tie on GPUs
            row(4, 1, 1, False, 16),  # two axes away: not a neighbour
            row(2, 1, 2, True, None),  # DP2 (EP on): never met
            row(1, 2, 1, False, None, pruned_by="weights + KV do not fit"),
        ]
    )
    assert axis_line(ranking, "USD") == (
        "TP2 x PP2 wins (2 x TP2 x PP2 on h100-sxm = 8 GPUs): vs TP4, a tie; vs TP1, pruned "
        "(weights + KV do not fit); vs PP1, 12 GPUs (+4)"
    )
    # DP2 differs from the winner in PP as well: no neighbour; with PP1 it is PP1's neighbour
    ranking.loc[0, "cost_per_hour"], ranking.loc[2, "cost_per_hour"] = 8.0, 9.5
    line = axis_line(ranking, "USD")
    assert line is not None and "vs TP4, the same GPUs at +1.5 USD/h" in line
    assert axis_line(ranking.assign(num_gpus=None), "USD") is None  # nothing met the SLO
    assert axis_line(ranking.head(1), "USD") is None  # nothing varied


class FakeExecutor:
    """Meets the SLO from `gpus` GPUs on, without simulating: what the search makes of it."""

    def __init__(self, gpus: int) -> None:
        self.gpus = gpus

    def run(self, tasks: list[PointTask], evaluate: Evaluate) -> list[PointOutcome]:
        out = []
        for task in tasks:
            s, system = task.scenario, task.system
            count = s.cluster.pools[0].count if s.cluster is not None else 1
            gpus = count * s.tensor_parallel * system.pipeline_parallel * s.data_parallel
            share = 1.0 if gpus >= self.gpus else 0.5
            out.append(PointOutcome(task.key, {"slo_share": share, "queue_delay_p99_s": 0.0}))
        return out

    def close(self) -> None:
        pass


@settings(max_examples=15, deadline=None)
@given(
    # TP above the GPU's domain is refused when the file is read (tests/cli/test_gpu_fit_cli.py)
    tp=st.sets(st.sampled_from([1, 2, 3, 8]), min_size=1),
    pp=st.sets(st.sampled_from([1, 2, 40]), min_size=1),
    dp=st.sets(st.sampled_from([1, 2, 4]), min_size=1),
    ep=st.sets(st.booleans(), min_size=1),
    needs=st.integers(1, 24),
)
def test_the_search_never_returns_a_pruned_shape(
    tp: set[int], pp: set[int], dp: set[int], ep: set[bool], needs: int
) -> None:
    heads_ok = sorted(t for t in tp if 32 % t == 0) or [2]
    text = MIXTRAL + f"tensor_parallel = {heads_ok}\npipeline_parallel = {sorted(pp)}\n"
    text += f"data_parallel = {sorted(dp)}\nexpert_parallel = {str(sorted(ep)).lower()}\n"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s.toml"
        path.write_text(text.replace("True", "true").replace("False", "false"))
        try:
            plan = plan_fleets(path)
        except InputError as error:  # every shape pruned: said so, nothing searched
            assert "no fleet shape can run the model" in str(error)
            return
    assert isinstance(plan, FleetPlan)
    run = search_fleets(plan.shapes, plan.settings, FakeExecutor(needs))  # type: ignore[arg-type]
    assert all(shape.pruned_by is None for shape, _, _ in run.evaluations)
    ranking = fleet_ranking(run, Criteria())
    pruned = ranking[ranking["pruned_by"].notna()]
    assert pruned["num_gpus"].isna().all() and pruned["replicas"].isna().all()
    met = ranking[ranking["num_gpus"].notna()]
    if not met.empty:
        assert pd.isna(met.iloc[0]["pruned_by"])

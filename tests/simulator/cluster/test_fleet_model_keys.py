"""A fleet's speculative-decoding and mixture-of-experts keys (cluster/model_keys.py): each
replica's result carries what its single run would, one replica keeps the single run's summary,
and the fleet's values are the pooled counts' (not means of the replicas' rates)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.simulator.cluster.fleet import run_fleet
from pagesim.simulator.cluster.result import fleet_result
from pagesim.simulator.core.catalog import get_gpu
from pagesim.simulator.core.cluster import (
    ClusterConfig,
    PoolConfig,
    RouterConfig,
    RouterKind,
)
from pagesim.simulator.core.config import (
    Policy,
    Scenario,
    SpecMethod,
    SpeculativeConfig,
    SystemConfig,
)
from pagesim.simulator.core.link import LinkConfig
from pagesim.simulator.engine import simulate
from tests.sim_helpers import explicit_workload, poisson_workload, scenario, system
from tests.simulator.cluster.disagg_helpers import fleet, run

MOE = "qwen3-30b-a3b"  # 128 routed experts, 8 per token, 48 MoE layers (config.json)


def ngram(rate: float, name: str = "spec") -> SystemConfig:
    return system(Policy.VLLM_V1, name, speculative=SpeculativeConfig(SpecMethod.NGRAM, 3, rate))


def one_pool(sc: Scenario, count: int = 1, kind: RouterKind = RouterKind.ROUND_ROBIN) -> Scenario:
    pool = PoolConfig("pool", count, sc.gpu, sc.tensor_parallel)
    return replace(sc, cluster=ClusterConfig((pool,), RouterConfig(kind)))


def touched(num_tokens: int) -> float:
    """Expected distinct experts of 128, 8 per token, over `num_tokens` tokens (moe_cost.py)."""
    return 128 * (1 - (1 - 8 / 128) ** num_tokens)


@pytest.mark.parametrize(
    ("model", "gpu", "spec"),
    [(MOE, "h100-sxm", False), ("llama-3-8b", "h100-sxm", True), (MOE, "h200-sxm", True)],
)
def test_one_replica_keeps_the_single_runs_spec_and_moe_keys(
    model: str, gpu: str, spec: bool
) -> None:
    sys_ = ngram(0.6) if spec else system(Policy.VLLM_V1, "v1")
    rows = [(300, 40, 0.0), (120, 17, 0.05), (900, 60, 0.2)]
    sc = scenario(explicit_workload(rows), sys_, model=model, gpu=gpu)
    alone = simulate(sc)
    keys = {k for k in alone.summary if k.startswith(("spec_", "moe_"))}
    assert ("spec_acceptance_rate" in keys) == spec
    assert ("moe_experts_touched_per_layer" in keys) == (model == MOE)
    fleet_sc = one_pool(sc)
    as_fleet = simulate(fleet_sc)
    assert {k: as_fleet.summary[k] for k in alone.summary} == alone.summary
    run_ = run_fleet(fleet_sc, fleet_sc.cluster)  # type: ignore[arg-type]
    fleet_result(run_, sc.name, "x", 0.0)
    assert run_.results[0].summary == alone.summary  # the replica's own result, too
    for key in ("spec_acceptance_rate", "moe_experts_touched_per_layer"):
        if key in keys:
            assert as_fleet.summary[f"replica_0_{key}"] == alone.summary[key]


def test_acceptance_is_the_pooled_counts_not_a_mean_of_the_replicas_rates() -> None:
    """Replica 0 accepts every draft, replica 1 none (k = 3, n-gram). Output 41 at acceptance 1:
    after the prompt step 10 verifications of 3 drafts, all kept (30 of 30); output 10 at
    acceptance 0: 9 verifications of 3 drafts, none kept (0 of 27). Fleet: 30 / 57, not 0.5;
    30 / 19 accepted per verification."""
    base = scenario(
        explicit_workload([(100, 41, 0.0), (100, 10, 0.0)]),
        ngram(1.0, "all"),
        ngram(0.0, "none"),
        model="llama-3-8b",
        gpu="h100-sxm",
    )
    h100 = get_gpu("h100-sxm")
    pools = (PoolConfig("a", 1, h100, 1, "all"), PoolConfig("b", 1, h100, 1, "none"))
    sc = replace(base, cluster=ClusterConfig(pools, RouterConfig(RouterKind.ROUND_ROBIN)))
    s = simulate(sc).summary
    assert (s["spec_num_draft_tokens"], s["spec_num_accepted_tokens"]) == (57, 30)
    assert s["spec_acceptance_rate"] == 30 / 57
    assert s["spec_mean_accepted_tokens"] == 30 / 19
    assert s["spec_mean_acceptance_length"] == 1 + 30 / 19
    assert (s["replica_0_spec_acceptance_rate"], s["replica_1_spec_acceptance_rate"]) == (1.0, 0.0)
    # n-gram drafts: 20 µs of host time per drafting sequence (an estimate), 19 verifications
    assert s["spec_draft_s"] == pytest.approx(19 * 20e-6, rel=1e-12)
    assert s["spec_draft_share"] == pytest.approx(19 * 20e-6 / s["busy_s"], rel=1e-12)  # type: ignore[operator]


def test_expert_reads_are_weighted_by_each_replicas_steps() -> None:
    """Replica 0 prefills 100 tokens then decodes 2 steps of 1; replica 1 prefills 10 then
    decodes 1 step. Per layer: touched(100), 8, 8 and touched(10), 8: the fleet's mean is over
    the 5 steps, not the mean of (t100 + 16) / 3 and (t10 + 8) / 2."""
    sc = scenario(explicit_workload([(100, 3, 0.0), (10, 2, 0.0)]), model=MOE, gpu="h100-sxm")
    result = simulate(one_pool(sc, 2))
    s = result.summary
    assert result.steps["replica"].tolist().count(0) == 3
    assert result.steps["replica"].tolist().count(1) == 2
    assert touched(1) == 8.0
    want = (touched(100) + 8 + 8 + touched(10) + 8) / 5
    assert s["moe_experts_touched_per_layer"] == pytest.approx(want, rel=1e-12)
    assert s["replica_0_moe_experts_touched_per_layer"] == pytest.approx(
        (touched(100) + 16) / 3, rel=1e-12
    )
    assert s["replica_1_moe_experts_touched_per_layer"] == pytest.approx(
        (touched(10) + 8) / 2, rel=1e-12
    )
    # bytes per step: the same GPUs read the same bytes per expert touched
    per_touched = s["moe_expert_bytes_per_step"] / s["moe_experts_touched_per_layer"]  # type: ignore[operator]
    one = simulate(sc).summary
    assert per_touched == pytest.approx(
        one["moe_expert_bytes_per_step"] / one["moe_experts_touched_per_layer"],  # type: ignore[operator]
        rel=1e-12,
    )


def test_a_disaggregated_moe_fleet_pools_prefill_and_decode_steps() -> None:
    """One request, prompt 100: the prefill replica's one step reads touched(100) experts a layer;
    every decode-replica step runs one token (8 experts)."""
    sc = scenario(explicit_workload([(100, 5, 0.0)]), model=MOE, gpu="h100-sxm")
    _, result = run(sc, fleet(sc, link=LinkConfig(1e12, 0.0)))
    s = result.summary
    num_decode_steps = result.steps["replica"].tolist().count(1)
    assert result.steps["replica"].tolist().count(0) == 1 and num_decode_steps >= 1
    assert s["replica_0_moe_experts_touched_per_layer"] == pytest.approx(touched(100), rel=1e-12)
    assert s["replica_1_moe_experts_touched_per_layer"] == 8.0
    want = (touched(100) + 8 * num_decode_steps) / (1 + num_decode_steps)
    assert s["moe_experts_touched_per_layer"] == pytest.approx(want, rel=1e-12)


def test_runs_without_speculation_or_experts_add_no_such_key() -> None:
    sc = scenario(poisson_workload(20, 20.0, 200, 30))
    s = simulate(one_pool(sc, 2)).summary
    assert not [k for k in s if "spec_" in k or "moe_" in k]


@settings(max_examples=8, deadline=None)
@given(
    count=st.integers(2, 3),
    rate=st.sampled_from([0.0, 0.3, 0.8]),
    seed=st.integers(0, 50),
)
def test_fleet_counts_are_the_replicas_counts_summed(count: int, rate: float, seed: int) -> None:
    sc = scenario(
        poisson_workload(12, 30.0, 150, 25),
        ngram(rate),
        model="llama-3-8b",
        gpu="h100-sxm",
        seed=seed,
    )
    fleet_sc = one_pool(sc, count, RouterKind.LEAST_OUTSTANDING)
    run_ = run_fleet(fleet_sc, fleet_sc.cluster)  # type: ignore[arg-type]
    s = fleet_result(run_, sc.name, "spec", 0.0).summary
    own = [r.summary for r in run_.results]
    for key in ("spec_num_draft_tokens", "spec_num_accepted_tokens", "spec_draft_s"):
        assert s[key] == pytest.approx(sum(o[key] for o in own), rel=1e-12)  # type: ignore[misc]
    drafted, accepted = s["spec_num_draft_tokens"], s["spec_num_accepted_tokens"]
    assert s["spec_acceptance_rate"] == (accepted / drafted if drafted else None)  # type: ignore[operator]
    for i, o in enumerate(own):
        assert s[f"replica_{i}_spec_acceptance_rate"] == o["spec_acceptance_rate"]

"""Whole-simulation checks: closed forms, the textbook examples, conservation, determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sim_helpers import explicit_workload, poisson_workload, scenario, system

from pagesim.simulator.core.catalog import GIB
from pagesim.simulator.core.config import Policy, PreemptionPolicy, PrefixGroup, Scenario
from pagesim.simulator.core.defaults import resolve_system
from pagesim.simulator.core.plan import SeqWork, StepPlan
from pagesim.simulator.engine import simulate
from pagesim.simulator.execution.factory import make_execution_model
from pagesim.simulator.execution.frontend import frontend_of
from pagesim.simulator.execution.roofline import RooflineModel
from pagesim.simulator.kv.block_budget import kv_capacity

PAGED = (Policy.VLLM_V0, Policy.VLLM_V1)
ALL_POLICIES = (Policy.STATIC, Policy.ORCA, Policy.VLLM_V0, Policy.VLLM_V1)


def roofline_for(s: Scenario) -> RooflineModel:
    """The model the engine prices the first system's steps with: its era's host overhead and
    CUDA graphs (execution/factory.py)."""
    resolved = resolve_system(s.systems[0], s.model, s.gpu, s.tensor_parallel).system
    model = make_execution_model(s, resolved)
    assert isinstance(model, RooflineModel)
    return model


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_one_request_alone_ttft_is_its_prefill_step(policy: Policy) -> None:
    s = scenario(explicit_workload([(300, 20, 0.5)]), system(policy))
    result = simulate(s, check_invariants=True)
    row = result.requests.iloc[0]
    prefill = roofline_for(s).price(StepPlan.build([SeqWork(0, 0, 300, 300, True)]))
    # As its client sees it: the served front end, and under vllm-v0 the token leaving the engine
    # once the next step's host work is done (execution/frontend.py).
    client = frontend_of(s.execution, s.systems[0])
    late = client.delivery_after_s if client.delivers_late else 0.0
    assert row["ttft_s"] == pytest.approx(prefill.duration_s + late + client.frontend_s, rel=1e-12)
    assert row["status"] == "finished"
    # Then 19 decode steps, each at the context it attends over; the last token leaves at once.
    decode = sum(
        roofline_for(s).price(StepPlan.build([SeqWork(0, 0, 1, 300 + k, False)])).duration_s
        for k in range(1, 20)
    )
    assert row["e2e_s"] == pytest.approx(prefill.duration_s + decode + client.frontend_s, rel=1e-9)


def test_static_batching_makespan_matches_the_formula() -> None:
    # 10 identical requests at t=0, batches of 4: ceil(10/4) = 3 batches, each one prefill step
    # of 4 (or 2) prompts plus (output - 1) decode steps over all members.
    prompt, output, batch = 64, 30, 4
    s = scenario(
        explicit_workload([(prompt, output, 0.0)] * 10),
        system(Policy.STATIC, static_batch_size=batch),
    )
    result = simulate(s, check_invariants=True)
    model = roofline_for(s)
    expected = 0.0
    for size in (4, 4, 2):
        work = [SeqWork(i, i, prompt, prompt, True) for i in range(size)]
        expected += model.price(StepPlan.build(work)).duration_s
        for k in range(1, output):
            work = [SeqWork(i, i, 1, prompt + k, False) for i in range(size)]
            expected += model.price(StepPlan.build(work)).duration_s
    assert result.summary["duration_s"] == pytest.approx(expected, rel=1e-9)
    assert result.summary["num_steps"] == 3 * output


def test_textbook_four_requests_continuous_beats_static() -> None:
    # Outputs 100, 50, 200, 30 on two batch slots: static runs {100, 50} then {200, 30};
    # continuous refills a slot the moment a request finishes.
    workload = explicit_workload([(32, 100, 0.0), (32, 50, 0.0), (32, 200, 0.0), (32, 30, 0.0)])
    s = scenario(
        workload,
        system(Policy.STATIC, static_batch_size=2, max_num_seqs=2, num_kv_blocks=1024),
        system(Policy.VLLM_V1, max_num_seqs=2, num_kv_blocks=1024),
    )
    static = simulate(s, s.systems[0], check_invariants=True)
    continuous = simulate(s, s.systems[1], check_invariants=True)
    assert continuous.summary["duration_s"] < 0.9 * static.summary["duration_s"]
    assert continuous.summary["e2e_mean_s"] < static.summary["e2e_mean_s"]
    # Static: useful slot-steps 380 of 2 x (100 + 200) = 63%; continuous keeps both slots busy
    # until the 200-token request runs alone.
    assert static.summary["slot_utilization"] < 0.7
    assert continuous.summary["slot_utilization"] > static.summary["slot_utilization"] + 0.1


def test_shared_system_prompt_is_stored_once() -> None:
    # Ten requests on Llama-2-13B sharing a 2,000-token system prompt, arriving while the
    # first ones still decode, so all ten hold KV at once.
    s_on = scenario(
        poisson_workload(
            10, 20.0, prompt_mean=16, output_mean=400, prefix_groups=(PrefixGroup(2000, 1.0),)
        ),
        system(Policy.VLLM_V1, "cache on", enable_prefix_cache=True),
        system(Policy.VLLM_V1, "cache off", enable_prefix_cache=False),
        model="llama-2-13b",
    )
    on = simulate(s_on, s_on.systems[0], check_invariants=False)
    off = simulate(s_on, s_on.systems[1])
    per_token = s_on.model.kv_bytes_per_token()
    assert per_token == 819_200
    # Peak bytes of computed KV: without sharing each request stores the prompt itself.
    peak_on = on.steps["kv_token_slots"].max() * per_token / GIB
    peak_off = off.steps["kv_token_slots"].max() * per_token / GIB
    prompt_gib = 2000 * per_token / GIB  # 1.53 GiB
    assert peak_off > 9 * prompt_gib  # ~15 GiB of prompt copies (plus user prompts and output)
    assert peak_on < 1.6 * prompt_gib + (peak_off - 10 * prompt_gib)
    saved = 1 - (peak_on / peak_off)
    assert saved > 0.75
    assert on.summary["prefix_hit_rate"] > 0.8
    assert (on.requests["num_cached_tokens"] > 0).sum() >= 9


@pytest.mark.parametrize("mode", [PreemptionPolicy.SWAP, PreemptionPolicy.RECOMPUTE])
@pytest.mark.parametrize("policy", PAGED)
def test_overload_completes_every_request(policy: Policy, mode: PreemptionPolicy) -> None:
    s = scenario(
        poisson_workload(120, 40.0, prompt_mean=120, output_mean=200),
        system(policy, num_kv_blocks=120, preemption=mode, swap_space_gib=1.0),
    )
    result = simulate(s, check_invariants=True)
    summary = result.summary
    assert summary["num_finished"] + summary["num_rejected"] == 120
    assert summary["num_unfinished"] == 0
    assert summary["num_preemptions"] > 0
    if mode is PreemptionPolicy.SWAP:
        assert summary["swapped_bytes"] > 0 and summary["swap_time_s"] > 0
        assert summary["num_recomputed_tokens"] == 0
    else:
        assert summary["swapped_bytes"] == 0 and summary["num_recomputed_tokens"] > 0


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_unbounded_kv_never_preempts_and_conserves_tokens(policy: Policy) -> None:
    s = scenario(poisson_workload(150, 8.0), system(policy, num_kv_blocks=100_000))
    result = simulate(s)
    requests, steps = result.requests, result.steps
    assert result.summary["num_preemptions"] == 0
    assert (requests["status"] == "finished").all()
    # Every output token after the first is one decode token per sequence.
    if policy is not Policy.STATIC:  # static also computes padding for finished members
        expected_decode = ((requests["output_len"] - 1) * requests["num_seqs"]).sum()
        assert steps["num_decode_tokens"].sum() == expected_decode
        assert steps["num_prefill_tokens"].sum() == requests["prompt_len"].sum()


def test_same_seed_same_summary_different_seed_differs() -> None:
    s = scenario(poisson_workload(80, 10.0), system(Policy.VLLM_V0, num_kv_blocks=150))
    a, b = simulate(s), simulate(s)
    assert a.summary == b.summary
    assert a.requests.equals(b.requests)
    c = simulate(scenario(s.workload, *s.systems, seed=1))
    assert c.summary != a.summary


def test_rejections_name_their_reason_and_counts_reconcile() -> None:
    workload = explicit_workload([(5000, 10, 0.0), (100, 10, 0.0), (1000, 3000, 0.0)])
    s = scenario(workload, system(Policy.VLLM_V1, num_kv_blocks=100))
    result = simulate(s, check_invariants=True)
    status = result.requests.set_index("request_id")["status"]
    reasons = result.requests.set_index("request_id")["rejection_reason"]
    assert status[0] == "rejected" and "maximum length of 4096" in reasons[0]
    assert status[1] == "finished" and reasons[1] == ""
    assert status[2] == "rejected" and "the cache holds 100" in reasons[2]
    s = result.summary
    assert s["num_finished"] + s["num_rejected"] + s["num_unfinished"] == s["num_requests"] == 3


def test_parallel_sampling_shares_the_prompt() -> None:
    from pagesim.simulator.core.request import SamplingKind

    workload = explicit_workload([(200, 50, 0.0)], sampling=SamplingKind.PARALLEL, num_seqs=4)
    s = scenario(workload, system(Policy.VLLM_V0))
    result = simulate(s, check_invariants=True)
    steps = result.steps
    # After the prompt, four sequences decode in lockstep; each last partial block of the prompt
    # is copied once per writer except the last holder.
    assert steps["num_seqs"].max() == 4
    assert steps["num_cow_copies"].sum() == 3
    # Stored KV: the prompt's 12 full blocks once; the partial block (8 prompt tokens) was
    # copied per writer. Peak after the next-to-last step (248 tokens per sequence):
    # 192 + 4 x (248 - 192) = 416, where four unshared copies would hold 4 x 248 = 992.
    peak = steps["kv_token_slots"].max()
    assert peak == 192 + 4 * (248 - 192)


def test_warmup_requests_are_excluded_from_latency_stats() -> None:
    from dataclasses import replace

    from pagesim.simulator.core.config import StopConfig

    s = scenario(poisson_workload(100, 5.0), system(Policy.VLLM_V1))
    s = replace(s, stop=StopConfig(warmup_s=5.0))
    result = simulate(s)
    window = result.requests[result.requests["in_window"]]
    assert len(window) < 100
    assert result.summary["num_in_window"] == len(window)
    assert result.summary["e2e_mean_s"] == pytest.approx(window["e2e_s"].mean())


def test_stop_time_leaves_unfinished_requests_accounted() -> None:
    from dataclasses import replace

    from pagesim.simulator.core.config import StopConfig

    s = scenario(poisson_workload(500, 50.0), system(Policy.VLLM_V0, num_kv_blocks=300))
    s = replace(s, stop=StopConfig(max_time_s=3.0))
    result = simulate(s)
    summary = result.summary
    assert summary["num_unfinished"] > 0
    assert (
        summary["num_finished"] + summary["num_rejected"] + summary["num_unfinished"]
        == (summary["num_requests"])
    )
    assert result.requests["arrival_s"].max() <= 3.0


def test_capacity_from_gpu_memory() -> None:
    """Row 12. vLLM's rule (v0.11.0 v1/worker/gpu_worker.py determine_available_memory):
    utilization x the memory the driver reports, less the weights, less the activation peak
    of a profiling run at max_num_batched_tokens (pagesim's estimate,
    core.defaults.activation_reserve_bytes)."""
    s = scenario(poisson_workload(1, 1.0), system(Policy.VLLM_V0))
    cap = kv_capacity(s, s.systems[0])
    block_bytes = 16 * 524_288
    driver = 80 * GIB * 79.2 / 80  # A100-80GB: ~99% of 80 GiB, as the H100's 79.2 GiB (FACTS)
    tokens = 4096  # V0's default cap: max(max_model_len 4096, 2048)
    activations = tokens * 2 * (4096 + 3 * 11008)  # hidden + gate/up/act, 16-bit
    logits = 2 * 4 * 32000 * 256  # fp32 logits and probabilities for max_num_seqs 256 rows
    reserve = activations + logits + 0.5 * GIB
    expected = (driver * 0.9 - 6.74e9 * 2 - reserve) // block_bytes
    assert cap.num_gpu_blocks == expected
    assert cap.num_cpu_blocks == 4 * GIB // block_bytes
    assert math.isclose(cap.block_bytes, block_bytes)


def test_summary_shares_add_up() -> None:
    s = scenario(poisson_workload(100, 10.0), system(Policy.ORCA, num_kv_blocks=2000))
    summary = simulate(s).summary
    total = sum(
        summary[k]
        for k in (
            "kv_token_share",
            "kv_reserved_share",
            "kv_internal_frag_share",
            "kv_external_frag_share",
            "kv_free_share",
        )
    )
    assert total == pytest.approx(1.0)
    assert 0 < summary["kv_waste_share"] < 1
    assert np.isfinite(summary["mfu"]) and 0 < summary["mfu"] < 1
    assert 0 < summary["mbu"] < 1


def test_beam_search_reforks_share_generated_blocks() -> None:
    from pagesim.simulator.core.request import SamplingKind

    beam = simulate(
        scenario(
            explicit_workload([(64, 80, 0.0)], sampling=SamplingKind.BEAM, num_seqs=4),
            system(Policy.VLLM_V0, enable_prefix_cache=True),
        ),
        check_invariants=True,
    )
    parallel = simulate(
        scenario(
            explicit_workload([(64, 80, 0.0)], sampling=SamplingKind.PARALLEL, num_seqs=4),
            system(Policy.VLLM_V0),
        ),
        check_invariants=True,
    )
    # Beams keep re-forking from the leader: far more copy-on-write copies than independent
    # samples (whose prompt ends on a block boundary, so they never copy) and less stored KV.
    assert parallel.steps["num_cow_copies"].sum() == 0
    assert beam.steps["num_cow_copies"].sum() > 20
    assert beam.steps["kv_token_slots"].max() < parallel.steps["kv_token_slots"].max()
    assert (beam.requests["status"] == "finished").all()


def test_builtin_textbook_scenario_shows_the_textbook_gap() -> None:
    from pagesim.simulator.scenario.load import load_scenario

    s = load_scenario("textbook_static_vs_continuous")
    static, continuous = (simulate(s, system) for system in s.systems)
    # Static: slot-steps used 380 of 2 x (100 + 200); continuous: 380 of 2 x 250.
    assert static.summary["slot_utilization"] == pytest.approx(380 / 600, abs=0.02)
    assert continuous.summary["slot_utilization"] == pytest.approx(380 / 500, abs=0.02)
    assert continuous.summary["duration_s"] < 0.85 * static.summary["duration_s"]
    # Static returns a batch's answers together: the 50-token request waits for the 100-token one.
    rows = static.requests.set_index("output_len")
    assert rows.loc[50, "finish_s"] == rows.loc[100, "finish_s"]
    assert rows.loc[50, "last_token_s"] < rows.loc[50, "finish_s"]


@pytest.mark.parametrize(
    ("policy", "words"), [(Policy.VLLM_V0, "fitted"), (Policy.VLLM_V1, "estimate")]
)
def test_the_host_overhead_is_among_the_era_defaults_a_run_names(
    policy: Policy, words: str
) -> None:
    """core.defaults' knobs and the execution model's host overhead (overhead.py, by era) are
    listed side by side, each with its source: one rule for the host overhead, named once."""
    from pagesim.simulator.core.defaults import HOST_OVERHEAD_KEY

    s = scenario(explicit_workload([(30, 3, 0.0)]), system(policy))
    found = simulate(s).provenance["defaults_from"]
    assert "max_num_seqs" in found and words in found[HOST_OVERHEAD_KEY]


def test_a_fleet_is_not_run_as_one_replica_behind_a_step_hook() -> None:
    # A step hook or a measured execution model (fidelity checks) drives one replica; a fleet
    # scenario used to run its first replica alone, silently.
    from pagesim.simulator.core.errors import InputError
    from pagesim.simulator.scenario.load import load_scenario

    fleet = load_scenario("router_comparison")
    with pytest.raises(InputError, match="runs a fleet"):
        simulate(fleet, on_step=lambda now_s: None)

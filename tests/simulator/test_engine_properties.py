"""Randomized runs of every policy: invariants after every step, conservation, no leak at drain."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sim_helpers import poisson_workload, scenario, system

from pagesim.simulator.core.config import (
    AdmissionOrder,
    Policy,
    PreemptionPolicy,
    PrefixGroup,
    Scenario,
    VictimPolicy,
)
from pagesim.simulator.core.request import SamplingKind
from pagesim.simulator.engine import simulate

KV_COLUMNS = [
    "kv_token_slots",
    "kv_reserved_slots",
    "kv_internal_frag_slots",
    "kv_external_frag_slots",
    "kv_free_slots",
]


@st.composite
def runs(draw: st.DrawFn) -> Scenario:
    policy = draw(st.sampled_from(list(Policy)))
    paged = policy in (Policy.VLLM_V0, Policy.VLLM_V1)
    num_seqs = draw(st.sampled_from([1, 1, 2, 3])) if paged else 1
    # V1 has no engine beam search and refuses it (core.defaults.beam_search_reason).
    kinds = [SamplingKind.PARALLEL, SamplingKind.BEAM]
    if policy is Policy.VLLM_V1:
        kinds = [SamplingKind.PARALLEL]
    sampling = SamplingKind.SINGLE if num_seqs == 1 else draw(st.sampled_from(kinds))
    prefix = draw(st.sampled_from([(), (PrefixGroup(64, 0.5),), (PrefixGroup(40, 0.9),)]))
    workload = poisson_workload(
        draw(st.integers(5, 20)),
        draw(st.floats(2.0, 60.0)),
        prompt_mean=draw(st.sampled_from([20, 60, 150])),
        output_mean=draw(st.sampled_from([10, 40, 120])),
        prefix_groups=prefix,
        sampling=sampling,
        num_seqs=num_seqs,
    )
    block_size = draw(st.sampled_from([2, 4, 16, 32]))
    knobs = dict(
        block_size=block_size,
        num_kv_blocks=draw(st.integers(600, 2000)) // block_size,
        max_num_seqs=draw(st.sampled_from([4, 16, 64])),
        # V0 refuses a token cap below the model's length: it takes its default there.
        max_num_batched_tokens=draw(st.sampled_from([64, 512, 2048]))
        if policy is not Policy.VLLM_V0
        else None,
        preemption=draw(st.sampled_from(list(PreemptionPolicy))),
        victim=draw(st.sampled_from(list(VictimPolicy))),
        admission=draw(st.sampled_from(list(AdmissionOrder))),
        enable_prefix_cache=draw(st.booleans()),
        swap_space_gib=draw(st.sampled_from([0.01, 1.0])),
        static_batch_size=draw(st.integers(1, 6)),
    )
    return scenario(
        workload, system(policy, **knobs), model="qwen2.5-7b", seed=draw(st.integers(0, 99))
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_random_runs_keep_invariants_and_account_for_every_request(s: Scenario) -> None:
    result = simulate(s, check_invariants=True)
    requests, steps, summary = result.requests, result.steps, result.summary
    assert summary["num_unfinished"] == 0, "drained runs finish or reject everything"
    assert summary["num_finished"] + summary["num_rejected"] == summary["num_requests"]
    assert set(requests["status"]) <= {"finished", "rejected"}
    assert (requests.loc[requests["status"] == "rejected", "rejection_reason"] != "").all()
    finished = requests[requests["status"] == "finished"]
    assert (finished["first_token_s"] >= finished["arrival_s"]).all()
    assert (finished["finish_s"] >= finished["first_token_s"]).all()
    if len(steps):
        totals = steps[KV_COLUMNS].sum(axis=1)
        assert (totals == totals.iloc[0]).all(), "KV categories always sum to the capacity"
        last = steps.iloc[-1]
        assert last["kv_free_slots"] == totals.iloc[0], "every block is free at drain"
        assert (steps["duration_s"] > 0).all()
        assert (steps["start_s"].diff().dropna() > 0).all()

"""Random hybrid models (full, sliding-window and state layers) run through the V1 engine:
every invariant after every step (no leak, no window group above its window + the step's
tokens + one block: `check_hybrid_invariants`), every request finished or rejected with a
reason, every block free at drain."""

from __future__ import annotations

from dataclasses import replace

from hybrid_helpers import tiny_hybrid
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sim_helpers import poisson_workload, scenario, system

from pagesim.simulator.core.config import Policy, PrefixGroup, Scenario
from pagesim.simulator.core.model_spec import LayerKind, StateSpec
from pagesim.simulator.engine import simulate
from pagesim.simulator.kv.block_budget import kv_capacity

KV_COLUMNS = ["kv_token_slots", "kv_reserved_slots", "kv_internal_frag_slots", "kv_free_slots"]


@st.composite
def hybrid_runs(draw: st.DrawFn) -> Scenario:
    kinds = draw(
        st.lists(st.sampled_from(list(LayerKind)), min_size=1, max_size=6).filter(
            lambda ks: LayerKind.FULL in ks or LayerKind.SLIDING in ks
        )
    )
    if LayerKind.SLIDING not in kinds and LayerKind.STATE not in kinds:
        kinds.append(LayerKind.SLIDING)  # at least one non-full kind: a hybrid model
    window = draw(st.integers(1, 40)) if LayerKind.SLIDING in kinds else None
    state = StateSpec(1, 1, 8, 8, 2) if LayerKind.STATE in kinds else None
    model = tiny_hybrid(tuple(kinds), window=window, state=state)
    prefix = draw(st.sampled_from([(), (PrefixGroup(24, 0.7),), (PrefixGroup(60, 0.9),)]))
    workload = poisson_workload(
        draw(st.integers(4, 16)),
        draw(st.floats(2.0, 80.0)),
        prompt_mean=draw(st.sampled_from([10, 40, 100])),
        output_mean=draw(st.sampled_from([5, 30, 80])),
        prefix_groups=prefix,
    )
    knobs = dict(
        block_size=draw(st.sampled_from([1, 2, 4, 8])),
        num_kv_blocks=draw(st.integers(20, 300)),
        max_num_seqs=draw(st.sampled_from([2, 8, 64])),
        max_num_batched_tokens=draw(st.sampled_from([16, 64, 512])),
        enable_prefix_cache=draw(st.booleans()),
    )
    s = scenario(workload, system(Policy.VLLM_V1, **knobs), seed=draw(st.integers(0, 99)))
    return replace(s, model=model)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hybrid_runs())
def test_random_hybrid_models_never_leak_and_keep_their_windows(s: Scenario) -> None:
    assert kv_capacity(s, s.systems[0]).layout is not None
    result = simulate(s, check_invariants=True)  # the hybrid cache's audit after every step
    requests, steps, summary = result.requests, result.steps, result.summary
    assert summary["num_unfinished"] == 0
    assert summary["num_finished"] + summary["num_rejected"] == summary["num_requests"]
    assert set(requests["status"]) <= {"finished", "rejected"}
    assert (requests.loc[requests["status"] == "rejected", "rejection_reason"] != "").all()
    if len(steps):
        totals = steps[KV_COLUMNS].sum(axis=1)
        assert (totals == totals.iloc[0]).all(), "KV categories always sum to the capacity"
        assert steps.iloc[-1]["kv_free_slots"] == totals.iloc[0], "every block free at drain"

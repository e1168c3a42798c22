"""The unobserved fast path (grouped decode, closed-form bookkeeping) gives exactly the frames of
the observed one-step-at-a-time path, on random workloads of every policy.

Watching a run (`on_step`, `check_invariants`, a custom execution model) forces the exact
per-step path, so comparing a watched and an unwatched run of the same scenario checks the fast
path against it, bit for bit.
"""

from __future__ import annotations

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sim_helpers import poisson_workload, scenario, system

from pagesim.simulator.core.config import Policy, PreemptionPolicy, PrefixGroup
from pagesim.simulator.core.request import SamplingKind
from pagesim.simulator.engine import simulate


@st.composite
def scenarios(draw: st.DrawFn):  # type: ignore[no-untyped-def]
    policy = draw(st.sampled_from(list(Policy)))
    paged = policy in (Policy.VLLM_V0, Policy.VLLM_V1)
    num_seqs = draw(st.sampled_from([1, 1, 1, 2])) if paged else 1
    workload = poisson_workload(
        draw(st.integers(10, 60)),
        draw(st.floats(1.0, 40.0)),
        prompt_mean=draw(st.sampled_from([30, 120, 400])),
        output_mean=draw(st.sampled_from([20, 80, 250])),
        prefix_groups=draw(st.sampled_from([(), (PrefixGroup(64, 0.5),)])),
        sampling=SamplingKind.SINGLE if num_seqs == 1 else SamplingKind.PARALLEL,
        num_seqs=num_seqs,
    )
    block_size = draw(st.sampled_from([4, 16, 32]))
    knobs = dict(
        block_size=block_size,
        num_kv_blocks=draw(st.sampled_from([3000, 12000, 100_000])) // block_size,
        max_num_seqs=draw(st.sampled_from([8, 64, 256])),
        max_num_batched_tokens=draw(st.sampled_from([256, 2048])),
        preemption=draw(st.sampled_from(list(PreemptionPolicy))),
        enable_prefix_cache=paged and draw(st.booleans()),
    )
    return scenario(workload, system(policy, **knobs), seed=draw(st.integers(0, 50)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_fast_path_matches_the_watched_path_exactly(s) -> None:  # type: ignore[no-untyped-def]
    fast = simulate(s)
    exact = simulate(s, on_step=lambda now_s: None)
    pd.testing.assert_frame_equal(fast.steps, exact.steps, check_exact=True)
    pd.testing.assert_frame_equal(fast.requests, exact.requests, check_exact=True)
    assert fast.summary == exact.summary

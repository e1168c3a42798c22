"""The decode fast path (simulator/fastpath/) against the per-sequence path.

Random scenarios of every policy run twice, both with every invariant checked after every step:
once with the fast path on and once with it off. The step and request frames must be identical,
bit for bit. With the fast path on, `check_invariants` also checks the group's running sums and
its closed-form memory breakdown against a walk of every block with the members' true progress,
so the fast path is checked while it is active, not only by its results.

The fast path exists for vLLM V1 and V0 (with or without a prefix cache); other policies run the
same path both times. A case counts as a test of the fast path only if it took grouped steps:
the cases are drawn so that most of them do (V0 in at least three), and the test says how many
did.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from sim_helpers import poisson_workload, scenario, system

from pagesim.simulator.core.config import (
    AdmissionOrder,
    Policy,
    PreemptionPolicy,
    PrefixGroup,
    Scenario,
    SpecMethod,
    SpeculativeConfig,
    SystemConfig,
    VictimPolicy,
    VllmVersion,
)
from pagesim.simulator.core.plan import StepCost, StepPlan
from pagesim.simulator.core.request import SamplingKind
from pagesim.simulator.core.scheduler import Scheduler
from pagesim.simulator.engine import simulate
from pagesim.simulator.execution.factory import make_execution_model
from pagesim.simulator.execution.model import ExecutionModel
from pagesim.simulator.metrics.result import RunResult

NUM_CASES = 30


@dataclass
class PlanCounter:
    """Prices through the scenario's own model, counting the plans that summed a decode group."""

    inner: ExecutionModel
    num_steps: int = 0
    num_grouped: int = 0
    num_grouped_preempting: int = 0  # grouped steps that preempted (fastpath/grouped_preemption)

    @property
    def name(self) -> str:
        return self.inner.name

    def price(self, plan: StepPlan) -> StepCost:
        self.num_steps += 1
        is_grouped = type(plan).__name__ == "GroupedStepPlan"
        self.num_grouped += is_grouped
        self.num_grouped_preempting += is_grouped and bool(plan.preemptions)
        return self.inner.price(plan)

    def describe(self) -> dict[str, object]:
        return self.inner.describe()


def _case(seed: int) -> Scenario:
    rng = np.random.default_rng(seed)
    # Most cases are the fast path's own: V1, then V0.
    others = [p.value for p in Policy]
    draw = rng.random()
    policy = Policy.VLLM_V1 if draw < 0.55 else Policy.VLLM_V0 if draw < 0.85 else None
    policy = policy or Policy(rng.choice(others))
    paged = policy in (Policy.VLLM_V0, Policy.VLLM_V1)
    num_seqs = int(rng.choice([1, 1, 1, 2])) if paged else 1
    sampling = SamplingKind.SINGLE
    if num_seqs > 1:
        sampling = SamplingKind(rng.choice(["parallel", "beam"]))
        if policy is Policy.VLLM_V1:  # V1 has no engine beam search (core.defaults)
            sampling = SamplingKind.PARALLEL
    # (Block size 1 is left to tests/simulator/policies/test_decode_group_cases.py: each step's
    # invariant check here walks every block of every table, which at one token a block costs
    # seconds a case.)
    block_size = int(rng.choice([2, 4, 4, 16]))
    kv_tokens = int(rng.choice([600, 2000, 8000]))  # small pools preempt, large ones do not
    workload = poisson_workload(
        int(rng.integers(10, 30)),
        float(rng.uniform(2.0, 40.0)),
        prompt_mean=float(rng.choice([30, 120, 400])),
        output_mean=float(rng.choice([20, 80, 200])),
        prefix_groups=(PrefixGroup(64, 0.5),) if rng.random() < 0.3 else (),
        sampling=sampling,
        num_seqs=num_seqs,
    )
    knobs: dict[str, object] = dict(
        block_size=block_size,
        num_kv_blocks=kv_tokens // block_size,
        max_num_seqs=int(rng.choice([8, 64, 256])),
        max_num_batched_tokens=int(rng.choice([64, 256, 2048])),
        preemption=PreemptionPolicy(rng.choice([p.value for p in PreemptionPolicy])),
        victim=VictimPolicy(rng.choice([v.value for v in VictimPolicy])),
        admission=AdmissionOrder(rng.choice([a.value for a in AdmissionOrder])),
        enable_prefix_cache=paged and bool(rng.random() < 0.5),
    )
    if rng.random() < 0.3:
        knobs["max_prefill_chunk"] = int(rng.choice([8, 32]))
    if policy is Policy.VLLM_V0:  # V0 refuses a token cap below the model's length
        del knobs["max_num_batched_tokens"]
    if policy is Policy.VLLM_V1:
        # The release's rules (core/vllm_eras.py: free order, priority bookkeeping, whole-prompt
        # admission, speculative padding), and now and then whole-prompt admission off or
        # speculative decoding (which takes the per-step path: both runs must agree all the same).
        knobs["vllm_version"] = VllmVersion(rng.choice([v.value for v in VllmVersion]))
        if rng.random() < 0.2:
            knobs["scheduler_reserve_full_isl"] = not rng.random() < 0.5
        if rng.random() < 0.15 and num_seqs == 1:
            knobs["speculative"] = SpeculativeConfig(SpecMethod.EAGLE, 2, acceptance_rate=0.6)
    chosen: SystemConfig = system(policy, **knobs)
    return scenario(workload, chosen, seed=seed)


def _run(s: Scenario, fast_path: bool) -> tuple[RunResult, PlanCounter]:
    counters: list[PlanCounter] = []

    def factory(scn: Scenario, sys_: SystemConfig, _: Scheduler) -> ExecutionModel:
        counters.append(PlanCounter(make_execution_model(scn, sys_)))
        return counters[0]

    result = simulate(s, check_invariants=True, fast_path=fast_path, execution_factory=factory)
    return result, counters[0]


FAST_STEPS: dict[int, int] = {}
PREEMPTING_STEPS: dict[int, int] = {}  # grouped steps that preempted, by case
# The last test reads what the cases leave in FAST_STEPS: one worker runs the whole module, in
# order (tests/conftest.py; split over workers, that test would skip).
pytestmark = pytest.mark.xdist_group("fast-path-cases")


@pytest.mark.parametrize("seed", range(NUM_CASES))
def test_fast_path_gives_the_per_sequence_results_with_invariants_checked(seed: int) -> None:
    s = _case(seed)
    fast, fast_count = _run(s, fast_path=True)
    exact, exact_count = _run(s, fast_path=False)
    pd.testing.assert_frame_equal(fast.steps, exact.steps, check_exact=True)
    pd.testing.assert_frame_equal(fast.requests, exact.requests, check_exact=True)
    assert fast.summary == exact.summary
    assert exact_count.num_grouped == 0
    FAST_STEPS[seed] = fast_count.num_grouped
    PREEMPTING_STEPS[seed] = fast_count.num_grouped_preempting
    if fast_count.num_grouped:  # only where the fast path exists
        assert s.systems[0].policy in (Policy.VLLM_V0, Policy.VLLM_V1)


def test_most_cases_took_the_fast_path() -> None:
    """Run after the cases above (same module, in order): a case without grouped steps does not
    count as a test of the fast path."""
    if len(FAST_STEPS) < NUM_CASES:
        pytest.skip("run with the cases above (the whole module)")
    taken = {seed: n for seed, n in FAST_STEPS.items() if n}
    assert len(taken) >= NUM_CASES // 2, taken
    v0_taken = [seed for seed in taken if _case(seed).systems[0].policy is Policy.VLLM_V0]
    assert len(v0_taken) >= 3, v0_taken
    print(f"{len(taken)} of {NUM_CASES} cases took {sum(taken.values())} grouped steps")
    assert sum(taken.values()) > 50 * len(taken)
    preempting = {seed: n for seed, n in PREEMPTING_STEPS.items() if n}
    print(f"{len(preempting)} cases preempted in grouped steps: {preempting}")
    assert len(preempting) >= 2, preempting  # V1's running phase making room, members summed

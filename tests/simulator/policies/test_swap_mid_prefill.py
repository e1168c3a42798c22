"""Regression: a request swapped out in the middle of a chunked prefill resumes its prompt.

Swapping it back in used to schedule a decode token, so each swap-in computed a prompt token as
if it were output: the prompt was short-changed and the request's first token came early.
"""

from __future__ import annotations

from collections import defaultdict

from sim_helpers import explicit_workload, scenario, system

from pagesim.simulator.core.config import Policy, PreemptionPolicy, Scenario, SystemConfig
from pagesim.simulator.core.plan import StepCost, StepPlan
from pagesim.simulator.core.scheduler import Scheduler
from pagesim.simulator.engine import simulate
from pagesim.simulator.execution.factory import make_execution_model
from pagesim.simulator.execution.model import ExecutionModel


def test_swapped_mid_prefill_computes_its_whole_prompt() -> None:
    prefill_tokens: dict[int, int] = defaultdict(int)

    class Counting:
        name = "counting"

        def __init__(self, inner: ExecutionModel) -> None:
            self._inner = inner

        def price(self, plan: StepPlan) -> StepCost:
            for item in plan.work:
                if item.is_prefill:
                    prefill_tokens[item.request_id] += item.num_new_tokens
            return self._inner.price(plan)

        def describe(self) -> dict[str, object]:
            return self._inner.describe()

    def factory(sc: Scenario, sy: SystemConfig, _: Scheduler) -> ExecutionModel:
        return Counting(make_execution_model(sc, sy))

    # The 150-token prompt is chunked (64-token budget) and swapped out while the two earlier
    # requests decode in a 14-block cache (admitted on its first chunk: with
    # scheduler_reserve_full_isl it would wait for blocks for all of it, and never swap).
    s = scenario(
        explicit_workload([(60, 100, 0.0), (60, 100, 0.0), (150, 20, 0.0)]),
        system(
            Policy.VLLM_V1,
            num_kv_blocks=14,
            block_size=16,
            max_num_batched_tokens=64,
            preemption=PreemptionPolicy.SWAP,
            scheduler_reserve_full_isl=False,
        ),
    )
    result = simulate(s, check_invariants=True, execution_factory=factory)
    requests = result.requests
    assert (requests["status"] == "finished").all()
    assert requests["num_swaps"].iloc[2] > 0  # the scenario does swap the long prompt mid-prefill
    assert requests["num_recomputed_tokens"].sum() == 0
    for rid, prompt_len in zip(requests["request_id"], requests["prompt_len"], strict=True):
        assert prefill_tokens[rid] == prompt_len

"""A pipelined replica (cluster/pipeline_loop.py) against the balanced pipe's closed form, with
stage times fixed so the timeline can be computed by hand."""

from __future__ import annotations

import pytest
from sim_helpers import explicit_workload, scenario, system

from pagesim.simulator.core.config import Policy, Scenario, SystemConfig
from pagesim.simulator.core.plan import StepCost, StepPlan, step_cost
from pagesim.simulator.core.scheduler import Scheduler
from pagesim.simulator.engine import simulate
from pagesim.simulator.execution.model import ExecutionModel
from pagesim.simulator.execution.pipeline_model import PipelineModel
from pagesim.simulator.metrics.result import RunResult

STAGE_S = 1.0  # every stage, every batch
HANDOFF_S = 0.25  # every hand-off


class FixedPipe(PipelineModel):
    """Every batch takes STAGE_S on each stage and HANDOFF_S per hand-off."""

    def __init__(self, num_stages: int) -> None:  # no stage models: the times are fixed
        self._num = num_stages
        self.batches: list[StepPlan] = []

    @property
    def num_stages(self) -> int:
        return self._num

    def stage_costs(self, plan: StepPlan) -> tuple[tuple[float, ...], tuple[float, ...], StepCost]:
        self.batches.append(plan)
        stages = (STAGE_S,) * self._num
        return stages, (HANDOFF_S,) * (self._num - 1), step_cost(STAGE_S, 0.0, 0.0, 0.0, 0.0)

    def describe(self) -> dict[str, object]:
        return {"kind": "fixed pipe"}


def _run(
    num_stages: int, num_requests: int, output_len: int
) -> tuple[Scenario, FixedPipe, RunResult]:
    pipe = FixedPipe(num_stages)

    def factory(s: Scenario, sy: SystemConfig, sched: Scheduler) -> ExecutionModel:
        return pipe

    # Four-token prompts and a budget of eight tokens: batches of two requests. Requests in
    # the pipe count toward max_num_seqs (they stay in vLLM's running list): room for all.
    v1 = system(
        Policy.VLLM_V1,
        "pp",
        pipeline_parallel=num_stages,
        max_num_batched_tokens=8,
        max_num_seqs=max(8, num_requests),
        num_kv_blocks=64,
    )
    sc = scenario(explicit_workload([(4, output_len, 0.0)] * num_requests), v1)
    return sc, pipe, simulate(sc, execution_factory=factory)


@pytest.mark.parametrize("num_stages", [2, 3, 4])
def test_full_pipe_closed_form(num_stages: int) -> None:
    """P batches of two requests fill a P-stage pipe. Batch k enters at k t; each returns after
    P t + (P - 1) x and goes straight back in (the first stage is free by then), so every
    request gets a token every P t + (P - 1) x (its TPOT), the j-th (from 1) at
    j (P t + (P - 1) x) + k t, and the pipe delivers 2 P tokens per P t + (P - 1) x."""
    output_len = 4
    _, pipe, result = _run(num_stages, 2 * num_stages, output_len)
    trip = num_stages * STAGE_S + (num_stages - 1) * HANDOFF_S
    requests = result.requests.sort_values("request_id")
    for i, row in enumerate(requests.itertuples()):
        k = i // 2
        assert row.first_token_s == pytest.approx(trip + k * STAGE_S)
        assert row.finish_s == pytest.approx(output_len * trip + k * STAGE_S)
        assert row.tpot_s == pytest.approx(trip)
    assert len(pipe.batches) == num_stages * output_len  # no empty batch, no extra one
    assert [p.num_seqs for p in pipe.batches] == [2] * len(pipe.batches)


def test_two_stages_two_batches_by_hand() -> None:
    """P = 2, t = 1, x = 0.25, four 4-token prompts of three output tokens each:

    A {0, 1}: stage 0 [0, 1], stage 1 [1.25, 2.25]      -> tokens at 2.25
    B {2, 3}: stage 0 [1, 2], stage 1 [2.25, 3.25]      -> tokens at 3.25
    A' (scheduled at 2.25): [2.25, 3.25], [3.5, 4.5]    -> 4.5
    B' (at 3.25):           [3.25, 4.25], [4.5, 5.5]    -> 5.5
    A'' (at 4.5):           [4.5, 5.5],   [5.75, 6.75]  -> 6.75: requests 0 and 1 finish
    B'' (at 5.5):           [5.5, 6.5],   [6.75, 7.75]  -> 7.75: requests 2 and 3 finish
    """
    _, _, result = _run(2, 4, 3)
    steps = result.steps
    assert list(steps["start_s"]) == [0.0, 1.0, 2.25, 3.25, 4.5, 5.5]  # each row: stage 0 entry
    finish = result.requests.sort_values("request_id")["finish_s"].tolist()
    assert finish == [6.75, 6.75, 7.75, 7.75]


def test_a_lone_request_sees_the_whole_pipe_every_token() -> None:
    """One request: the second batch has nobody to run (a bubble), so every token takes the
    trip through all stages: TPOT = P t + (P - 1) x."""
    _, pipe, result = _run(3, 1, 5)
    row = result.requests.iloc[0]
    assert row.tpot_s == pytest.approx(3 * STAGE_S + 2 * HANDOFF_S)
    assert len(pipe.batches) == 5

"""The decode group (simulator/fastpath/decode_group.py) changes nothing but speed.

`simulate` advances lone decoding sequences as a group unless someone watches every step
(`on_step`, `check_invariants`, a custom execution model). A no-op `on_step` therefore runs the
sequence-by-sequence path: both runs must give identical step and request frames, and every plan
must price and list the same work, under memory pressure (preemption by recompute and by swap),
chunked prefill, small blocks, budgets that cut the batch, and multi-sequence requests.
"""

from __future__ import annotations

import pytest
from sim_helpers import poisson_workload, scenario, system

from pagesim.simulator.core.config import (
    AdmissionOrder,
    Policy,
    PreemptionPolicy,
    VictimPolicy,
    VllmVersion,
)
from pagesim.simulator.core.plan import StepPlan
from pagesim.simulator.core.request import SamplingKind
from pagesim.simulator.engine import simulate
from pagesim.simulator.execution.roofline import RooflineModel
from pagesim.simulator.fastpath import attach as attach_module
from pagesim.simulator.metrics.result import RunResult

CASES = {
    "plain": dict(),
    "tight-recompute": dict(num_kv_blocks=60, block_size=4),
    "tight-swap": dict(num_kv_blocks=60, block_size=4, preemption=PreemptionPolicy.SWAP),
    "victim-most-generated": dict(num_kv_blocks=50, victim=VictimPolicy.MOST_GENERATED),
    "small-budget": dict(max_num_batched_tokens=24, max_prefill_chunk=8, max_num_seqs=20),
    "chunk-cap": dict(max_prefill_chunk=32, num_kv_blocks=120, block_size=2),
    "block-1": dict(block_size=1, num_kv_blocks=900),
    "priority-auto": dict(
        num_kv_blocks=70, admission=AdmissionOrder.PRIORITY, preemption=PreemptionPolicy.AUTO
    ),
    # The rules that changed between releases (core/vllm_eras.py): v0.11.0's free order,
    # priority bookkeeping and first-chunk admission, against the default v0.34.0's above.
    "v0.11-priority": dict(
        num_kv_blocks=60,
        block_size=4,
        admission=AdmissionOrder.PRIORITY,
        vllm_version=VllmVersion.V0_11,
    ),
    "first-chunk-admission": dict(num_kv_blocks=60, scheduler_reserve_full_isl=False),
}


def _no_op(now_s: float) -> None:
    """Watching every step turns the decode group off."""


def _run(knobs: dict[str, object], sampling: SamplingKind, watched: bool, seed: int) -> RunResult:
    num_seqs = 1 if sampling is SamplingKind.SINGLE else 2
    workload = poisson_workload(120, 40.0, 60, 40, sampling=sampling, num_seqs=num_seqs)
    s = scenario(workload, system(Policy.VLLM_V1, **knobs), seed=seed)
    return simulate(s, on_step=_no_op if watched else None)


@pytest.mark.parametrize(
    # (No beam: V1 has none in its engine, core.defaults.beam_search_reason.)
    "sampling",
    [SamplingKind.SINGLE, SamplingKind.PARALLEL],
)
@pytest.mark.parametrize("case", sorted(CASES))
def test_grouped_and_per_sequence_runs_agree(case: str, sampling: SamplingKind) -> None:
    for seed in range(2):
        fast = _run(CASES[case], sampling, False, seed)
        slow = _run(CASES[case], sampling, True, seed)
        assert fast.steps.equals(slow.steps)
        assert fast.requests.equals(slow.requests)
        assert fast.summary == slow.summary


def test_grouped_plans_list_the_same_work(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[tuple]] = [[], []]
    price = RooflineModel.price
    current: list[list[tuple]] = []

    def spy(self: RooflineModel, plan: StepPlan) -> object:
        work = plan.work
        assert plan.num_seqs == len(work)
        assert plan.num_context_tokens == sum(item.context_len for item in work)
        assert set(plan.listed_work) <= set(work)
        current.append((work, plan.num_decode_seqs, plan.num_prefill_seqs, plan.is_empty))
        return price(self, plan)

    monkeypatch.setattr(RooflineModel, "price", spy)
    # Runs of pure steps are priced without plans (fastpath/pure_runs.py; tests/simulator/cluster/
    # test_windows.py): here every step's plan is priced, as the per-step loop does.
    monkeypatch.setattr(attach_module, "USE_WINDOWS", False)
    for i, watched in enumerate((False, True)):
        current = seen[i]
        _run(CASES["tight-recompute"], SamplingKind.SINGLE, watched, 0)
    assert seen[0] == seen[1] and len(seen[0]) > 100


def test_a_grouped_step_is_actually_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    kinds: list[str] = []
    price = RooflineModel.price

    def spy(self: RooflineModel, plan: StepPlan) -> object:
        kinds.append(type(plan).__name__)
        return price(self, plan)

    monkeypatch.setattr(RooflineModel, "price", spy)
    # Runs of pure steps are priced without plans (fastpath/pure_runs.py; tests/simulator/cluster/
    # test_windows.py): here every step's plan is priced, as the per-step loop does.
    monkeypatch.setattr(attach_module, "USE_WINDOWS", False)
    _run(CASES["plain"], SamplingKind.SINGLE, False, 0)
    assert kinds.count("GroupedStepPlan") > len(kinds) // 2


@pytest.mark.parametrize("case", ["tight-recompute", "tight-swap", "v0.11-priority"])
def test_grouped_steps_make_room_without_releasing_members(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under FCFS with the last-arrived victim, a step short of blocks preempts with the members
    kept summed (fastpath/grouped_preemption.py); under priority admission the members are
    released and visited one by one. Either way the results are the per-step path's (above)."""
    preempting: list[int] = []
    price = RooflineModel.price

    def spy(self: RooflineModel, plan: StepPlan) -> object:
        if plan.preemptions:
            preempting.append(type(plan).__name__ == "GroupedStepPlan")
        return price(self, plan)

    monkeypatch.setattr(RooflineModel, "price", spy)
    monkeypatch.setattr(attach_module, "USE_WINDOWS", False)
    _run(CASES[case], SamplingKind.SINGLE, False, 0)
    assert preempting, "the case preempts"
    if case == "v0.11-priority":
        assert not any(preempting)
    else:
        assert sum(preempting) > len(preempting) // 2, preempting

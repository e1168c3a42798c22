"""A step's plan as the paged policies build it (policies/seq_group.py `StepBuilder`, its totals
kept as entries are added and taken back) equals the plan `StepPlan.build` derives from the
same entries: every total a reader takes from the plan as a field."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pagesim.simulator.core.plan import BlockCopy, StepPlan
from pagesim.simulator.policies.seq_group import SeqGroup, StepBuilder
from tests.sim_helpers import request

_ENTRY = st.tuples(
    st.integers(1, 3),  # sequences
    st.integers(0, 300),  # tokens computed before the step
    st.integers(1, 64),  # new tokens per sequence
    st.booleans(),  # prefill
    st.integers(0, 2),  # copy-on-write copies
    st.booleans(),  # taken back (a request preempted after it was scheduled)
)


@given(st.lists(_ENTRY, max_size=8), st.integers(0, 3), st.integers(0, 3))
def test_the_builders_plan_is_the_built_plan(
    entries: list[tuple[int, int, int, bool, int, bool]], swap_out: int, swap_in: int
) -> None:
    step = StepBuilder()
    step.swap_out, step.swap_in = swap_out, swap_in
    kept = []
    next_seq = 0
    for rid, (num_seqs, computed, num_new, is_prefill, num_copies, taken) in enumerate(entries):
        seq_ids = list(range(next_seq, next_seq + num_seqs))
        next_seq += num_seqs
        group = SeqGroup(request(rid, 400, 8), seq_ids, 400, num_computed=computed)
        copies = tuple(BlockCopy(rid, 100 + rid) for _ in range(num_copies)) if not taken else ()
        step.add(group, num_new, is_prefill, copies)
        if taken:
            step.remove(group)
        else:
            kept.append(group)
    plan = step.plan()
    built = StepPlan.build(plan.work, (), swap_out, swap_in, tuple(step.copies))
    assert plan == built
    assert plan.num_context_tokens == sum(item.context_len for item in plan.work)
    assert plan.num_requests == len(kept)
    assert plan.is_empty is not bool(kept or swap_out or swap_in)
    assert plan.moves_blocks is bool(step.copies or swap_out or swap_in)

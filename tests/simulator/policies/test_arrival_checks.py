"""A paged scheduler's arrival: `add_request` rejects a request exactly when `rejection_reason`
names a reason, with that reason, though it asks only of requests near the edge (one sequence
that fits alone with a block to spare, under no drafter, has none)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from sim_helpers import resolved, system

from pagesim.simulator.core.config import Policy
from pagesim.simulator.core.request import Request, RequestStatus, SamplingKind
from pagesim.simulator.policies.paged import PagedScheduler
from pagesim.simulator.policies.vllm_v0 import VllmV0
from pagesim.simulator.policies.vllm_v1 import VllmV1


def _scheduler(policy: Policy, max_seq_len: int, num_blocks: int) -> PagedScheduler:
    step = VllmV1() if policy is Policy.VLLM_V1 else VllmV0()
    return PagedScheduler(resolved(system(policy, block_size=4)), max_seq_len, num_blocks, 16, step)


def _request(prompt_len: int, output_len: int, num_seqs: int) -> Request:
    sampling = SamplingKind.SINGLE if num_seqs == 1 else SamplingKind.PARALLEL
    return Request(0, 0.0, prompt_len, output_len, sampling=sampling, num_seqs=num_seqs)


@settings(max_examples=300, deadline=None)
@given(
    policy=st.sampled_from([Policy.VLLM_V0, Policy.VLLM_V1]),
    max_seq_len=st.integers(1, 48),
    num_blocks=st.integers(1, 12),
    prompt_len=st.integers(1, 56),
    output_len=st.integers(0, 12),
    num_seqs=st.sampled_from([1, 1, 1, 2, 3]),
)
def test_an_arrival_is_rejected_exactly_when_a_reason_is_named(
    policy: Policy,
    max_seq_len: int,
    num_blocks: int,
    prompt_len: int,
    output_len: int,
    num_seqs: int,
) -> None:
    sched = _scheduler(policy, max_seq_len, num_blocks)
    reason = sched.rejection_reason(_request(prompt_len, output_len, num_seqs))
    arrived = _request(prompt_len, output_len, num_seqs)
    sched.add_request(arrived, 1.0)
    if reason is None:
        assert arrived.status is RequestStatus.WAITING
        assert len(sched.state.waiting) >= 1
    else:
        assert arrived.status is RequestStatus.REJECTED
        assert arrived.rejection_reason == reason
        assert not len(sched.state.waiting)


def test_the_edge_of_the_cache_is_asked_and_answered_both_ways() -> None:
    """Ten blocks of 4 tokens: a request of 41 tokens fits alone, one of 42 does not (its last
    token's KV is never computed: 40 slots), and under V0 one of 38, not 39 (before its last
    decode V0 asks a free block per sequence: 36 tokens in 9 blocks and one free)."""
    for policy, longest in ((Policy.VLLM_V1, 41), (Policy.VLLM_V0, 38)):
        for total, rejected in ((longest, False), (longest + 1, True)):
            sched = _scheduler(policy, 4096, 10)
            arrived = _request(8, total - 8, 1)
            sched.add_request(arrived, 0.0)
            assert (arrived.status is RequestStatus.REJECTED) is rejected, (policy, total)


def test_a_new_group_has_every_field_the_class_would_give_it() -> None:
    """`PagedState.new_group` sets a group's fields one by one (no class call an arrival): each
    field, every one of `SeqGroup`'s, holds what `SeqGroup(request, [seq_id], prompt_len,
    fan_out=...)` gives it. A field added to `SeqGroup` and not set there fails here."""
    from dataclasses import fields

    from pagesim.simulator.policies.seq_group import SeqGroup

    sched = _scheduler(Policy.VLLM_V1, 4096, 64)
    arrived = _request(9, 5, 1)
    group = sched.state.new_group(arrived)
    built = SeqGroup(arrived, [group.seq_ids[0]], arrived.prompt_len, fan_out=None)
    built.hashers = group.hashers  # (a prefix-caching state's hasher, made after the group)
    for field in fields(SeqGroup):
        assert getattr(group, field.name) == getattr(built, field.name), field.name

"""Private requests under vLLM V1: hashed only when preempted, with the results of hashing always.

A request none of whose blocks another request can hit (no shared prefix block, no session, no
trace content, no sibling sample) is hashed by PagedState only when it is preempted, the one
time its blocks can be hit: by its own re-admission (policies/group_hashes.py; the state's
rule is `PagedState._is_private`). V1 caches every full block as it is allocated; these tests
hold the deferred way to that one, step by step on a story and over random runs, by turning the
deferral off (`eager`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sim_helpers import paged_scheduler, poisson_workload, request, scenario, system
from sim_helpers import step_and_check as _step
from sim_helpers import work_of as _work

from pagesim.simulator.core.config import (
    AdmissionOrder,
    Policy,
    PreemptionPolicy,
    PrefixGroup,
    Scenario,
    VictimPolicy,
)
from pagesim.simulator.core.request import Request
from pagesim.simulator.engine import simulate
from pagesim.simulator.policies.paged_state import PagedState

Work = list[tuple[int, ...]]


@contextmanager
def eager() -> Iterator[None]:
    """Every request hashed as V1 does, block by block as allocated (no request private)."""
    with pytest.MonkeyPatch.context() as patch:

        def never(self: PagedState, request: Request) -> bool:
            return False

        patch.setattr(PagedState, "_is_private", never)
        yield


Story = list[tuple[Work, list[int], dict[int, int]]]


def _story(mode: PreemptionPolicy, num_steps: int) -> tuple[list[Request], Story]:
    """Eight blocks of 4 tokens, three requests of 6 prompt and 12 output tokens, preempted by
    `mode`: the requests, and each step's work, its preemptions and the blocks holding a hash
    after it (-> hash)."""
    sched = paged_scheduler(Policy.VLLM_V1, num_blocks=8, preemption=mode)
    requests = [request(rid, 6, 12, arrival_s=rid / 10) for rid in range(3)]
    for r in requests:
        sched.add_request(r, 0.3)
    steps = []
    for i in range(num_steps):
        plan = _step(sched, 0.3 + 0.01 * i)
        kv = sched.kv
        hashes = {b: h for b in range(kv.num_blocks) if (h := kv.block_hash(b)) is not None}
        steps.append((_work(plan), [p.request_id for p in plan.preemptions], hashes))
    return requests, steps


@pytest.mark.parametrize("mode", [PreemptionPolicy.RECOMPUTE, PreemptionPolicy.SWAP])
def test_a_private_request_is_hashed_when_preempted_as_v1_had_it(mode: PreemptionPolicy) -> None:
    requests, deferred = _story(mode, 24)
    with eager():
        _, hashed = _story(mode, 24)
    assert [(w, p) for w, p, _ in deferred] == [(w, p) for w, p, _ in hashed]  # same steps
    # Whatever a block holds deferred, it holds hashing every block (a block's hash only
    # goes missing: a running private request's, or a finished one's, never looked up).
    for (_, _, few), (_, _, every) in zip(deferred, hashed, strict=True):
        assert few.items() <= every.items()
    # Steps 0-2: all three prefill, then decode. V1 caches their full blocks as allocated
    # (blocks 0, 2, 4 after the prompts' 6 tokens); deferred, no block holds a hash yet.
    assert [sorted(h) for _, _, h in hashed[:3]] == [[0, 2, 4], [0, 2, 4], list(range(6))]
    assert [h for _, _, h in deferred[:3]] == [{}, {}, {}]
    # Step 3: every request needs its third block and none is free: request 2, the last to
    # arrive, goes. Its 8 tokens fill blocks 4, 5, hashed now, as V1 had them.
    assert deferred[3][:2] == ([(0, 0, 1, 9, False), (1, 1, 1, 9, False)], [2])
    assert deferred[3][2] == {b: hashed[3][2][b] for b in (4, 5)}
    # Step 11: request 1 goes too (its 16 tokens in blocks 2, 3, 7 and one being written).
    assert deferred[11][1] == [1]
    if mode is PreemptionPolicy.RECOMPUTE:
        # Step 12: it comes back and computes 5 of its 17 tokens: 12 hit its own three
        # blocks, which hold the hashes V1 gave them. Request 2 re-prefills all 9: its blocks
        # were reused.
        assert deferred[12][0] == [(1, 1, 5, 17, True), (2, 2, 9, 9, True)]
        assert requests[1].num_cached_tokens == 12
    else:
        # Step 12: both come back from CPU memory, their blocks cached again under the
        # hashes they left with (swap_space.py).
        assert deferred[12][0] == [(2, 2, 1, 9, False), (1, 1, 1, 17, False)]
        assert [r.num_swaps for r in requests] == [0, 1, 1]
    # From here on every live request is hashed both ways: the caches agree block for block.
    assert [h for _, _, h in deferred[12:]] == [h for _, _, h in hashed[12:]]


def test_shared_sessions_samples_and_long_prefixes_are_never_private() -> None:
    """Only what no other request can hit is private; V0 and a run without the cache never
    defer (V0's evictor orders blocks by whether they hold a hash)."""
    sched = paged_scheduler(Policy.VLLM_V1, num_blocks=64)
    state = sched.state
    assert state._is_private(request(0, 40, 5))
    assert state._is_private(request(1, 40, 5, prefix_len=3))  # block 0 holds its own tokens
    assert not state._is_private(request(2, 40, 5, prefix_len=4))  # block 0 is shared
    base = request(3, 40, 5)
    for shared in (
        Request(3, 0.0, 40, 5, session_id=7),
        Request(3, 0.0, 40, 5, content=(((9, 1), 40),)),
        Request(3, 0.0, 40, 5, prompt_of=0),
        Request(3, 0.0, 40, 5, num_seqs=2),
    ):
        assert state._is_private(base) and not state._is_private(shared)
    for off in (
        paged_scheduler(Policy.VLLM_V1, num_blocks=64, enable_prefix_cache=False),
        paged_scheduler(Policy.VLLM_V0, num_blocks=64, enable_prefix_cache=True),
    ):
        assert not off.state._is_private(base)


@st.composite
def v1_runs(draw: st.DrawFn) -> tuple[Scenario, bool]:
    block_size = draw(st.sampled_from([1, 3, 4, 16]))
    prefix_len = draw(st.sampled_from([0, 2, 5, 40]))  # below and above a block
    workload = poisson_workload(
        draw(st.integers(5, 25)),
        draw(st.floats(5.0, 80.0)),
        prompt_mean=draw(st.sampled_from([20, 60, 150])),
        output_mean=draw(st.sampled_from([10, 40, 120])),
        prefix_groups=(PrefixGroup(prefix_len, 0.6),) if prefix_len else (),
    )
    if draw(st.booleans()):  # swap, with room for it (or by chance, below)
        preemption, swap_gib = PreemptionPolicy.SWAP, 4.0
    else:
        preemption = draw(st.sampled_from(list(PreemptionPolicy)))
        swap_gib = draw(st.sampled_from([0.0, 0.01, 4.0]))
    knobs = dict(
        block_size=block_size,
        num_kv_blocks=draw(st.integers(200, 1200)) // block_size,  # small pools preempt
        max_num_seqs=draw(st.sampled_from([4, 16, 64])),
        max_num_batched_tokens=draw(st.sampled_from([32, 256, 2048])),
        preemption=preemption,
        victim=draw(st.sampled_from(list(VictimPolicy))),
        admission=draw(st.sampled_from(list(AdmissionOrder))),
        swap_space_gib=swap_gib,
    )
    seed = draw(st.integers(0, 1000))
    fast_path = draw(st.booleans())
    return scenario(workload, system(Policy.VLLM_V1, **knobs), seed=seed), fast_path


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(v1_runs())
def test_deferred_hashing_gives_the_results_of_hashing_every_block(
    run: tuple[Scenario, bool],
) -> None:
    s, fast_path = run
    deferred = simulate(s, check_invariants=True, fast_path=fast_path)
    with eager():
        hashed = simulate(s, check_invariants=True, fast_path=fast_path)
    pd.testing.assert_frame_equal(deferred.steps, hashed.steps, check_exact=True)
    pd.testing.assert_frame_equal(deferred.requests, hashed.requests, check_exact=True)
    assert deferred.summary == hashed.summary

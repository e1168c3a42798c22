"""The V1 rules that changed between the releases a vllm-v1 system follows (core/vllm_eras.py),
each story run under v0.11.0 and v0.34.0 with exact block ids and step contents. Block size 4;
a request's `prefix_len` tokens are shared with every other request that has them; a work item
reads (request, seq, new tokens, context after the step, is prefill)."""

from __future__ import annotations

from sim_helpers import paged_scheduler, request
from sim_helpers import step_and_check as _step
from sim_helpers import tables_of as _tables
from sim_helpers import work_of as _work

from pagesim.simulator.core.config import (
    AdmissionOrder,
    Policy,
    SpecMethod,
    SpeculativeConfig,
    VllmVersion,
)
from pagesim.simulator.policies.paged import PagedScheduler
from pagesim.simulator.policies.remote_kv import land_remote, reserve_remote

V0_11, V0_34 = VllmVersion.V0_11, VllmVersion.V0_34
EAGLE_2 = SpeculativeConfig(SpecMethod.EAGLE, 2, acceptance_rate=1.0)


def _preempted(plan: object) -> list[int]:
    return [p.request_id for p in plan.preemptions]  # type: ignore[attr-defined]


def test_from_v0_24_a_partly_filled_block_is_reused_before_a_cached_one() -> None:
    """v1/core/block_pool.py free_blocks. Request 0 (its 4-token shared prefix) leaves cached
    block 0 at the tail; request 1 (2 tokens + 1 decode, 3 slots) frees block 1, partly filled.
    v0.34.0 puts block 1 at the head (1 2 3 0): request 2's 12 tokens take 1, 2, 3 and request 3
    hits block 0. v0.11.0 appends it (2 3 0 1): request 2 takes 2, 3 and 0, evicting the
    prefix, which request 3 then recomputes."""
    for version, taken, hit in ((V0_34, (1, 2, 3), 4), (V0_11, (2, 3, 0), 0)):
        sched = paged_scheduler(Policy.VLLM_V1, num_blocks=4, vllm_version=version)
        sched.add_request(request(0, 4, 1, prefix_len=4), 0.0)
        sched.add_request(request(1, 2, 2), 0.0)
        assert _work(_step(sched, 0.0)) == [(0, 0, 4, 4, True), (1, 1, 2, 2, True)]
        assert _work(_step(sched, 0.1)) == [(1, 1, 1, 3, False)]
        sched.add_request(request(2, 12, 1), 0.2)
        plan = sched.schedule(0.2)
        assert _tables(sched, 2) == {2: taken}
        sched.complete(plan, 0.21)
        sched.add_request(request(3, 8, 2, prefix_len=4), 0.3)
        assert _work(_step(sched, 0.3)) == [(3, 3, 8 - hit, 8, True)]
        assert sched.prefix_hit_rate() == hit / (4 + 2 + 12 + 8)


def _four_running(version: VllmVersion) -> PagedScheduler:
    """Priority scheduling, 7 blocks, a budget of 8 and chunks of at most 4. Request 0 (priority
    1, the least urgent) is chunking a 24-token prompt; 1, 2 and 3 (priority 0) came after it:
    two decodes and a chunked 8-token prompt. Three steps fill the pool but one block."""
    sched = paged_scheduler(
        Policy.VLLM_V1,
        num_blocks=7,
        admission=AdmissionOrder.PRIORITY,
        max_num_batched_tokens=8,
        max_prefill_chunk=4,
        enable_prefix_cache=False,
        vllm_version=version,
    )
    sched.add_request(request(0, 24, 2, priority=1), 0.0)
    _step(sched, 0.0)
    for rid, prompt in ((1, 3), (2, 1), (3, 8)):
        sched.add_request(request(rid, prompt, 10, priority=0, arrival_s=rid / 10), 0.1)
    assert _work(_step(sched, 0.1)) == [(0, 0, 4, 8, True), (1, 1, 3, 3, True), (2, 2, 1, 1, True)]
    assert _work(_step(sched, 0.2)) == [
        (0, 0, 4, 12, True),
        (1, 1, 1, 4, False),
        (2, 2, 1, 2, False),
        (3, 3, 2, 2, True),
    ]
    assert _tables(sched, 0, 1, 2, 3) == {0: (0, 1, 4), 1: (2,), 2: (3,), 3: (5,)}
    assert sched.kv.num_free_blocks == 1
    return sched


def test_a_priority_victim_scheduled_earlier_in_the_step_gives_its_tokens_back() -> None:
    """v1/core/sched/scheduler.py Scheduler.schedule under SchedulingPolicy.PRIORITY: request 0
    takes the last free block (6) for its chunk of 4; request 1's decode then needs a block and
    the victim is the least urgent of all running requests, max (priority, arrival): request 0,
    scheduled already. It leaves the step and its blocks (6, 4, 1, 0) are freed; request 1 takes
    6. v0.34.0 (from v0.11.1) returns its 4 tokens to the budget: request 2 decodes and request
    3's chunk is 4 (8 - 1 - 1 - 2 would leave it 2 without them). v0.11.0 keeps them counted
    and, its loop index not stepped back, skips request 2: request 3 gets 8 - 4 - 1 = 3."""
    for version, work in (
        (V0_34, [(1, 1, 1, 5, False), (2, 2, 1, 3, False), (3, 3, 4, 6, True)]),
        (V0_11, [(1, 1, 1, 5, False), (3, 3, 3, 5, True)]),
    ):
        sched = _four_running(version)
        plan = _step(sched, 0.3)
        assert _work(plan) == work
        assert _preempted(plan) == [0]
        assert _tables(sched, 0, 1, 2, 3) == {1: (2, 6), 2: (3,), 3: (5, 4)}


def test_from_v0_33_the_running_phase_goes_on_after_a_request_preempts_itself() -> None:
    """Scheduler.schedule, PRIORITY: request 1 (priority 1) is the least urgent; at step 3 its
    decode needs a block, none is free, and the victim is itself. v0.34.0 (from v0.33.0) goes
    on to request 2 behind it; v0.11.0 to v0.32 stop the running phase there."""
    for version, work in (
        (V0_34, [(0, 0, 1, 4, False), (2, 2, 1, 2, False)]),
        (V0_11, [(0, 0, 1, 4, False)]),
    ):
        sched = paged_scheduler(
            Policy.VLLM_V1, num_blocks=3, admission=AdmissionOrder.PRIORITY, vllm_version=version
        )
        for rid, (prompt, priority) in enumerate(((1, 0), (3, 1), (1, 0))):
            sched.add_request(request(rid, prompt, 10, priority=priority, arrival_s=rid), rid)
            _step(sched, rid)
        assert _tables(sched, 0, 1, 2) == {0: (0,), 1: (1,), 2: (2,)}
        plan = _step(sched, 3.0)
        assert _work(plan) == work
        assert _preempted(plan) == [1]


def test_from_v0_19_a_request_is_admitted_only_if_its_whole_prompt_fits() -> None:
    """scheduler_reserve_full_isl (config/scheduler.py, on by default from v0.19.0): 6 blocks,
    request 0 decoding in 3, request 1's 16-token prompt needs 4. v0.34.0 keeps it waiting
    (v1/core/kv_cache_manager.py allocate_slots with full_sequence_must_fit returns None) and
    the FCFS waiting loop stops, so request 2 (one block) waits too. v0.11.0 admits its first
    chunk of 7 and, the next step, preempts it (the tail of the running list) for the rest:
    over-admission that thrashes."""
    for version in (V0_34, V0_11):
        sched = paged_scheduler(
            Policy.VLLM_V1,
            num_blocks=6,
            max_num_batched_tokens=8,
            enable_prefix_cache=False,
            vllm_version=version,
        )
        sched.add_request(request(0, 8, 10), 0.0)
        _step(sched, 0.0)
        sched.add_request(request(1, 16, 2), 0.1)
        sched.add_request(request(2, 4, 2), 0.1)
        plans = [_step(sched, 0.1 * i) for i in (1, 2, 3)]
        if version is V0_34:
            assert sched.system.scheduler_reserve_full_isl is True
            assert [_work(p) for p in plans] == [[(0, 0, 1, c, False)] for c in (9, 10, 11)]
            assert sched.queue_lengths() == (1, 2, 0)
        else:
            assert sched.system.scheduler_reserve_full_isl is False
            assert _work(plans[0]) == [(0, 0, 1, 9, False), (1, 1, 7, 7, True)]
            assert _work(plans[1]) == [(0, 0, 1, 10, False)] and _preempted(plans[1]) == [1]
            assert _work(plans[2]) == [(0, 0, 1, 11, False), (1, 1, 7, 7, True)]


def test_the_whole_prompt_is_counted_after_its_prefix_hit() -> None:
    """allocate_slots(full_sequence_must_fit=True) counts the blocks the prompt still needs
    after its cache hit: request 1's 16 tokens share 8 with request 0, so 2 more blocks are
    needed, and 3 are free."""
    sched = paged_scheduler(Policy.VLLM_V1, num_blocks=6, max_num_batched_tokens=16)
    sched.add_request(request(0, 8, 10, prefix_len=8), 0.0)
    _step(sched, 0.0)
    _step(sched, 0.1)  # its 9th token takes block 2
    sched.add_request(request(1, 16, 2, prefix_len=8), 0.2)
    assert _work(_step(sched, 0.2)) == [(0, 0, 1, 10, False), (1, 1, 8, 16, True)]
    assert _tables(sched, 0, 1) == {0: (0, 1, 2), 1: (0, 1, 3, 4)}


def test_from_v0_25_a_cached_prompt_joins_the_decodes_with_placeholder_drafts() -> None:
    """Speculative decoding, EAGLE, k = 2, every draft accepted. Request 1's prompt is cached
    but for its last token. v0.34.0 (v1/core/sched/scheduler.py, "Pad new decode requests to
    uniform spec decoding size"; from v0.25.0) schedules it 1 + 2 tokens beside request 0's
    decode, its two drafts placeholders that verification rejects (counted as drafted, none
    accepted), and (from v0.23.0) allocates its lookahead: 8 hit + 3 + 2 = 13 slots. v0.11.0
    schedules its one token as a prefill, with no lookahead (9 slots)."""
    for version, admitted, slots, blocks, stats in (
        (V0_34, (1, 1, 3, 11, False), 13, (0, 1, 4, 5), (2, 4, 2)),
        (V0_11, (1, 1, 1, 9, True), 9, (0, 1, 4), (1, 2, 2)),
    ):
        sched = paged_scheduler(
            Policy.VLLM_V1, num_blocks=16, speculative=EAGLE_2, vllm_version=version
        )
        sched.add_request(request(0, 9, 10, prefix_len=8), 0.0)
        _step(sched, 0.0)
        sched.add_request(request(1, 9, 8, prefix_len=8), 0.1)
        assert _work(_step(sched, 0.1)) == [(0, 0, 3, 12, False), admitted]
        assert (sched.kv.num_tokens(1), sched.kv.num_computed_tokens(1)) == (slots, 9)
        assert sched.kv.block_table(1) == blocks
        assert sched.state.groups[1].request.num_generated == 1
        spec = sched.state.spec
        assert spec is not None
        assert (
            spec.stats.num_verifications,
            spec.stats.num_draft_tokens,
            spec.stats.num_accepted_tokens,
        ) == stats


def test_no_placeholder_drafts_beside_a_running_prompt_chunk() -> None:
    """The padding needs a step with no running request computing a prompt chunk
    (`not prefill_scheduled`): request 3's chunk runs, so request 1's last token is a plain
    prefill token."""
    sched = paged_scheduler(
        Policy.VLLM_V1,
        num_blocks=16,
        speculative=EAGLE_2,
        max_num_batched_tokens=10,
        max_prefill_chunk=4,
    )
    sched.add_request(request(0, 8, 10, prefix_len=8), 0.0)
    sched.add_request(request(3, 20, 3), 0.0)
    _step(sched, 0.0)
    sched.add_request(request(1, 9, 8, prefix_len=8), 0.1)
    work = _work(_step(sched, 0.1))
    assert work[1][4] is True and work[2] == (1, 2, 1, 9, True)  # request 3 holds seq 1


def test_padded_tokens_that_do_not_fit_the_budget_wait() -> None:
    """ "Prefer to not schedule than schedule un-padded": budget 5, request 0's decode takes
    1 + 2; request 1 (4 of 5 prompt tokens cached) would need 3 and waits, and request 2 behind
    it too, for as long as request 0 decodes."""
    sched = paged_scheduler(
        Policy.VLLM_V1, num_blocks=16, speculative=EAGLE_2, max_num_batched_tokens=5
    )
    sched.add_request(request(0, 5, 3, prefix_len=4), 0.0)
    _step(sched, 0.0)
    sched.add_request(request(1, 5, 4, prefix_len=4), 0.1)
    sched.add_request(request(2, 3, 4), 0.1)
    assert _work(_step(sched, 0.1)) == [(0, 0, 3, 8, False)]  # its last 2 tokens: finished
    assert _work(_step(sched, 0.2)) == [(1, 1, 3, 7, False), (2, 2, 2, 2, True)]


def test_a_prompt_whose_kv_arrived_is_padded_too() -> None:
    """A decode replica (policies/remote_kv.py): the landed prompt has all but its last token
    computed. v0.34.0 pads its first step to 1 + 2 (14 slots with the lookahead: a 4th block);
    v0.11.0 computes the one token, its lookahead allocated all the same (a request with
    computed tokens gets it in every release): 12 slots, the 3 blocks it has."""
    for version, work, slots, blocks in (
        (V0_34, (0, 0, 3, 12, False), 14, 4),
        (V0_11, (0, 0, 1, 10, True), 12, 3),
    ):
        sched = paged_scheduler(
            Policy.VLLM_V1,
            num_blocks=8,
            speculative=EAGLE_2,
            enable_prefix_cache=False,
            vllm_version=version,
        )
        first = request(0, 10, 3)
        assert reserve_remote(sched, first) == 10
        land_remote(sched, 0)
        assert _work(_step(sched, 1.0)) == [work]
        assert (sched.kv.num_tokens(0), sched.kv.num_used_blocks) == (slots, blocks)
        assert first.num_generated == 1


def test_vllms_priority_preemption_and_resumption_when_out_of_kv() -> None:
    """tests/v1/core/test_scheduler.py test_priority_scheduling_preemption_and_resumption_when_
    out_of_kv (vllm-project/vllm), ported: 4 blocks of 16 (vLLM's 5 less its null block). The
    low-priority request (30 tokens) decodes; the high-priority one (32) fills the cache. Next
    step the low one's decode (32 tokens, 2 blocks) is scheduled first, then the high one's
    33rd token needs a third block: the victim is the low one, scheduled already, and only the
    high one runs. It finishes; the low one resumes with its 30 prompt tokens and 2 decoded
    (its first block still cached: 16 recomputed)."""
    for version in (V0_34, V0_11):
        sched = paged_scheduler(
            Policy.VLLM_V1,
            num_blocks=4,
            block_size=16,
            admission=AdmissionOrder.PRIORITY,
            max_num_seqs=2,
            max_num_batched_tokens=200,
            vllm_version=version,
        )
        low = request(0, 30, 10, priority=1)
        sched.add_request(low, 0.0)
        assert _work(_step(sched, 0.0)) == [(0, 0, 30, 30, True)]
        sched.add_request(request(1, 32, 2, priority=0, arrival_s=1.0), 1.0)
        assert _work(_step(sched, 1.0)) == [(0, 0, 1, 31, False), (1, 1, 32, 32, True)]
        assert sched.kv.num_free_blocks == 0
        plan = sched.schedule(2.0)
        assert _work(plan) == [(1, 1, 1, 33, False)] and _preempted(plan) == [0]
        assert _tables(sched, 0, 1) == {1: (2, 3, 1)}  # the victim's blocks, tail first
        sched.complete(plan, 2.01)
        assert sched.queue_lengths() == (0, 1, 0)  # the high one finished
        assert _work(_step(sched, 3.0)) == [(0, 0, 16, 32, True)]
        assert low.num_generated == 3 and low.num_cached_tokens == 16

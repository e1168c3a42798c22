"""The narrative tests' stories, recorded by a block map: the tables it records step by step are
the exact block ids those tests assert (tests/simulator/policies/test_vllm_rows.py,
test_vllm_v1.py, test_vllm_v0.py; tests/simulator/kv/test_paged_cache.py for the fork), and its
events say in words what those tests' comments say. Block size 4 throughout.
"""

from __future__ import annotations

from dataclasses import replace

from sim_helpers import paged_scheduler, request
from sim_helpers import step_and_check as _step

from pagesim.simulator.cluster.block_reader import read_frame
from pagesim.simulator.core.config import AdmissionOrder, Policy
from pagesim.simulator.core.request import Request, SamplingKind
from pagesim.simulator.kv.block_budget import Capacity
from pagesim.simulator.metrics.block_events import BlockEvent, EventKind
from pagesim.simulator.metrics.block_map import BlockMap, BlockMapRecorder
from pagesim.simulator.policies.paged import PagedScheduler
from pagesim.simulator.policies.paged_state import CHILD_ID_BASE

Tables = dict[tuple[int, int | None], tuple[int, ...]]  # (request, sample) -> table


def drive(
    sched: PagedScheduler, requests: list[Request], num_steps: int, now: float = 0.0
) -> BlockMap:
    """The narrative tests' loop (plan at `now + 0.1 i`, complete 10 ms later, check every
    invariant), with a block map told of every step."""
    recorder = BlockMapRecorder()
    capacity = Capacity(sched.kv.num_blocks, 16, 4, 0, 0)
    recorder.attach(sched, read_frame, capacity, sched.system, "story")
    for r in requests:
        sched.add_request(r, now)
    for i in range(num_steps):
        t = now + 0.1 * i
        plan = _step(sched, t)
        recorder.record(t, t + 0.01, plan)
    return recorder.block_map()


def tables(block_map: BlockMap) -> list[Tables]:
    """Each step's GPU tables by owner, as the map rebuilds them."""
    return [
        {
            (s.owner.request_id or 0, s.owner.sample): s.table
            for s in state.seqs.values()
            if not s.is_swapped
        }
        for state in block_map.states()
    ]


def events(block_map: BlockMap, step: int, kind: EventKind) -> list[BlockEvent]:
    return [e for e in block_map.steps[step].events if e.kind is kind]


def test_row3_a_recomputed_request_rehits_its_own_block() -> None:
    """test_vllm_rows.py test_row3_readmitted_block_table: (0, 1) and (2, 3); request 1
    preempted at step 1 (its blocks 3, 2 freed, tail first); request 0 finishes at step 5;
    request 1 returns to block 2, its own cached tokens 0-3, then blocks 3 and 4."""
    block_map = drive(
        paged_scheduler(Policy.VLLM_V1, num_blocks=5), [request(r, 8, 6) for r in (0, 1)], 8
    )
    got = tables(block_map)
    assert got[0] == {(0, None): (0, 1), (1, None): (2, 3)}
    assert got[1] == got[4] == {(0, None): (0, 1, 4)}
    assert got[5] == {}
    assert got[6] == {(1, None): (2, 3, 4)}
    (preempt,) = events(block_map, 1, EventKind.PREEMPT)
    assert preempt.owner is not None and preempt.owner.request_id == 1 and preempt.blocks == (2, 3)
    assert "request 1 is preempted by recompute: frees blocks 2–3" in preempt.text
    (hit,) = events(block_map, 6, EventKind.HIT)
    assert hit.blocks == (2,) and "of its own, cached before it was preempted" in hit.text
    (evicted,) = events(block_map, 5, EventKind.EVICT)
    assert evicted.blocks == (3,)  # request 0's 13th token took block 3: its content is gone


def test_row10_the_least_urgent_request_is_preempted() -> None:
    """test_vllm_v1.py test_the_victim_under_priority_scheduling_is_the_least_urgent: at step 5
    request 1 (priority 2) goes; its blocks 5, 2 serve requests 0 and 2."""
    sched = paged_scheduler(Policy.VLLM_V1, num_blocks=6, admission=AdmissionOrder.PRIORITY)
    requests = [
        request(r, 4, 10, priority=p, arrival_s=r / 10) for r, p in ((0, 0), (1, 2), (2, 1))
    ]
    block_map = drive(sched, requests, 7, now=0.3)
    got = tables(block_map)
    assert got[5] == {(0, None): (0, 3, 5), (2, None): (1, 4, 2)}
    (preempt,) = events(block_map, 5, EventKind.PREEMPT)
    assert preempt.owner is not None and preempt.owner.request_id == 1
    grown = {
        e.owner.request_id: e.blocks for e in events(block_map, 5, EventKind.ALLOCATE) if e.owner
    }
    assert grown == {0: (5,), 2: (2,)}


def test_row9_samples_of_v1_share_the_prompt_through_the_cache() -> None:
    """test_vllm_v1.py test_n_samples_fan_out_into_child_requests_sharing_the_prompt_through_
    the_cache: the two samples (child requests) hold (0, 1, 2) and (0, 1, 3); no copy-on-write."""
    parent = replace(request(0, 9, 3), sampling=SamplingKind.PARALLEL, num_seqs=2)
    block_map = drive(paged_scheduler(Policy.VLLM_V1, num_blocks=16), [parent], 1)
    assert tables(block_map)[0] == {(0, 1): (0, 1, 2), (0, 2): (0, 1, 3)}
    (hit,) = events(block_map, 0, EventKind.HIT)
    assert hit.owner is not None and (hit.owner.request_id, hit.owner.sample) == (0, 2)
    assert hit.blocks == (0, 1)
    assert hit.text.startswith("request 0 sample 2 hits 2 cached blocks")
    assert not events(block_map, 0, EventKind.COPY_ON_WRITE)
    assert CHILD_ID_BASE not in {e.owner.request_id for e in block_map.steps[0].events if e.owner}


def test_row5_a_block_cached_when_allocated_is_hit_in_the_same_step() -> None:
    """test_vllm_v1.py test_a_prompt_block_is_cached_when_allocated_so_the_same_step_can_hit_it:
    (0, 1, 2) and (0, 1, 3); request 1 hits the shared system prompt's two blocks."""
    requests = [request(r, 9, 4, prefix_len=8) for r in (0, 1)]
    block_map = drive(paged_scheduler(Policy.VLLM_V1, num_blocks=16), requests, 1)
    assert tables(block_map)[0] == {(0, None): (0, 1, 2), (1, None): (0, 1, 3)}
    (hit,) = events(block_map, 0, EventKind.HIT)
    assert hit.is_shared_prefix and hit.blocks == (0, 1)
    assert "request 1 hits 2 cached blocks of the shared system prompt" in hit.text
    assert block_map.contents[1] == "shared system prompt 0, tokens 0–3"


def test_row14_v0_keeps_a_free_block_per_sequence() -> None:
    """test_vllm_v0.py test_decoding_keeps_one_free_block_per_sequence: request 2 preempted at
    step 1 (blocks 5, 4 freed) comes back alone to (5, 4)."""
    block_map = drive(
        paged_scheduler(Policy.VLLM_V0, num_blocks=6), [request(r, 6, 3) for r in range(3)], 3
    )
    got = tables(block_map)
    assert got[0] == {(0, None): (0, 1), (1, None): (2, 3), (2, None): (4, 5)}
    assert got[2] == {(0, None): (0, 1), (1, None): (2, 3), (2, None): (5, 4)}
    (preempt,) = events(block_map, 1, EventKind.PREEMPT)
    assert preempt.blocks == (4, 5)


def test_a_fork_then_copy_on_write() -> None:
    """tests/simulator/kv/test_paged_cache.py test_fork_and_copy_on_write, as V0 runs it: a
    6-token prompt fills block 0 and 2 slots of block 1; sample 2 forks sharing (0, 1); the
    next step the first sample to write into block 1 copies it to block 2, the last holder
    writes in place."""
    parent = replace(request(0, 6, 4), sampling=SamplingKind.PARALLEL, num_seqs=2)
    block_map = drive(paged_scheduler(Policy.VLLM_V0, num_blocks=8), [parent], 2)
    got = tables(block_map)
    assert got[0] == {(0, 1): (0, 1), (0, 2): (0, 1)}
    assert got[1] == {(0, 1): (0, 2), (0, 2): (0, 1)}
    (fork,) = events(block_map, 0, EventKind.FORK)
    assert fork.text.startswith("request 0 sample 2 forks from request 0 sample 1")
    (copy,) = events(block_map, 1, EventKind.COPY_ON_WRITE)
    assert copy.blocks == (1, 2)
    assert (
        copy.text == "block 1 copied on write to block 2 for request 0 sample 1 (logical block 1)"
    )

"""Static and orca: a request with more sequences than max_num_seqs is rejected, as the paged
policies reject it, rather than left at the head of the queue until the engine stalls (scenario
files are validated so; a Scenario built in code was not); Orca's buddy-placed reservations."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sim_helpers import explicit_workload, resolved, scenario, system

from pagesim.simulator.core.config import ContiguousAllocator, Policy, Reservation
from pagesim.simulator.core.memory import MemoryBreakdown
from pagesim.simulator.core.request import Request, SamplingKind
from pagesim.simulator.engine import simulate
from pagesim.simulator.policies.reserving import OrcaScheduler


@pytest.mark.parametrize("policy", [Policy.STATIC, Policy.ORCA, Policy.VLLM_V0])
def test_more_sequences_than_a_batch_holds_is_rejected(policy: Policy) -> None:
    s = scenario(
        explicit_workload([(10, 5, 0.0)], sampling=SamplingKind.PARALLEL, num_seqs=4),
        system(policy, max_num_seqs=2, static_batch_size=2),
    )
    requests = simulate(s).requests
    assert list(requests["status"]) == ["rejected"]
    assert requests["rejection_reason"].iloc[0] == "decodes 4 sequences; max_num_seqs is 2"


def test_v1_runs_more_samples_than_a_batch_holds_in_turns() -> None:
    """vLLM V1 (v1/engine/parallel_sampling.py) makes n = 4 four child requests, each one
    sequence: with max_num_seqs = 2 they run two at a time and the request finishes."""
    s = scenario(
        explicit_workload([(10, 5, 0.0)], sampling=SamplingKind.PARALLEL, num_seqs=4),
        system(Policy.VLLM_V1, max_num_seqs=2),
    )
    result = simulate(s, check_invariants=True)
    assert list(result.requests["status"]) == ["finished"]
    assert result.steps["num_seqs"].max() == 2


def test_orca_oracle_places_reservations_with_a_buddy_allocator() -> None:
    """The vLLM paper's Orca baselines (§6.1: "We assume Orca uses the buddy allocation
    algorithm"): regions are powers of two, and the rounding is external fragmentation (Fig. 2:
    Orca (Oracle) has no internal fragmentation from over-reservation)."""
    requests = [
        Request(0, 0.0, prompt_len=5, output_len=4),  # oracle asks 9 -> a block of 16
        Request(1, 0.0, prompt_len=3, output_len=2),  # asks 5 -> 8
        Request(2, 0.0, prompt_len=10, output_len=7),  # asks 17 -> 32: the whole cache
    ]
    buddy = OrcaScheduler(resolved(system(Policy.ORCA, reservation=Reservation.ORACLE)), 64, 32)
    first_fit = OrcaScheduler(
        resolved(
            system(
                Policy.ORCA,
                reservation=Reservation.ORACLE,
                contiguous_allocator=ContiguousAllocator.FIRST_FIT,
            )
        ),
        64,
        32,
    )
    assert buddy.system.contiguous_allocator is ContiguousAllocator.BUDDY  # orca's default
    for scheduler in (buddy, first_fit):
        for request in requests:
            scheduler.add_request(replace(request), 0.0)
    plan = buddy.schedule(0.0)
    assert [w.request_id for w in plan.work] == [0, 1]  # 32 splits: 0..16 | 16..24 | 24..32
    assert [buddy.kv.region(s) for s in (0, 1)] == [(0, 16), (16, 8)]
    assert buddy.kv.holes() == [(24, 8)]
    buddy.complete(plan, 0.1)
    buddy.check_invariants()
    # Request 2 waits: 8 free slots, none in a block of 32. Seq 0: 5 computed, 3 to come (its
    # last output token's KV is never written, so 1 of its 9 is internal), 7 of rounding;
    # seq 1: 3 computed, 1 to come, 1 internal, 3 of rounding; the 8 free slots are stranded.
    assert buddy.memory_breakdown() == MemoryBreakdown(8, 4, 2, 7 + 3 + 8, 0)
    # First fit holds exact sizes, so one hole of 18 admits request 2 at once.
    plan = first_fit.schedule(0.0)
    assert [w.request_id for w in plan.work] == [0, 1, 2]
    assert [first_fit.kv.region(s) for s in (0, 1, 2)] == [(0, 9), (9, 5), (14, 17)]


def test_a_reservation_the_buddy_allocator_can_never_place_is_rejected() -> None:
    orca = OrcaScheduler(resolved(system(Policy.ORCA, reservation=Reservation.ORACLE)), 64, 48)
    request = Request(0, 0.0, prompt_len=20, output_len=13)  # asks 33 -> 64 > the 32 piece
    orca.add_request(request, 0.0)
    assert request.rejection_reason == (
        "reserves 1 x 64 contiguous KV slots (oracle reservation of 33 slots, rounded up to a "
        "power of two by the buddy allocator); the cache of 48 slots cannot hold them"
    )


def test_static_plans_count_done_members_as_padding() -> None:
    """A static batch computes a member that has made its last token until the batch ends
    (FasterTransformer's padding): its decode plans say so (`num_padding_seqs`), and slot
    utilization counts only the members still making tokens."""
    s = scenario(
        explicit_workload([(8, 3, 0.0), (8, 1, 0.0)]),
        system(Policy.STATIC, static_batch_size=2, max_num_seqs=2, num_kv_blocks=1024),
    )
    steps = simulate(s, check_invariants=True).steps
    # The prefill makes both first tokens (the 1-token request is done); two decodes finish
    # the 3-token one, each computing the done member too.
    assert list(steps["num_seqs"]) == [2, 2, 2]
    assert list(steps["slot_utilization"]) == [1.0, 0.5, 0.5]

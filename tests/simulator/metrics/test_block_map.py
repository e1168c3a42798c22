"""The block map against the KV structures: after every recorded step, the state the map rebuilds
from what it kept equals the structures' own, walked here block by block with other queries than
the recorder's (reference counts and hashes per block; CPU references counted off the swapped
tables and checked against the CPU pool's; tables, token counts and owners per sequence).

Stories of every kind of block event run through `simulate` with a block map and a step hook
that walks the structures; then random workloads of every policy do the same.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sim_helpers import explicit_workload, poisson_workload, scenario, system

from pagesim.simulator.core.config import (
    Policy,
    PreemptionPolicy,
    PrefixGroup,
    Reservation,
    Scenario,
)
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.request import SamplingKind
from pagesim.simulator.engine import simulate
from pagesim.simulator.kv.contiguous import RegionCache
from pagesim.simulator.kv.paged_cache import PagedKVCache
from pagesim.simulator.metrics.block_events import EventKind
from pagesim.simulator.metrics.block_map import BlockMap, BlockMapRecorder
from pagesim.simulator.metrics.block_map_window import BlockMapWindow
from pagesim.simulator.policies.paged import PagedScheduler
from pagesim.simulator.policies.reserving import ReservingScheduler


@dataclass(frozen=True)
class Walked:
    """The KV structures after one step, as a test reads them."""

    refs: tuple[int, ...]
    hashes: tuple[int | None, ...]
    cpu_refs: tuple[int, ...]
    seqs: dict[int, tuple[tuple[int, ...], bool, int, int]]  # table, swapped, tokens, computed
    owners: dict[int, int]  # seq -> the scheduler's request id
    regions: dict[int, tuple[int, int, int, int]]  # seq -> offset, held, asked, computed


def walk(recorder: BlockMapRecorder) -> Walked:
    sched = recorder.scheduler
    if isinstance(sched, ReservingScheduler):
        kv: RegionCache = sched.kv
        regions = {
            s: (*kv.region(s), kv.asked_slots(s), kv.num_computed_tokens(s)) for s in kv.seq_ids()
        }
        owners = {s: rid for rid, m in sched.members.items() for s in m.seq_ids}
        return Walked((), (), (), {}, owners, regions)
    assert isinstance(sched, PagedScheduler) and isinstance(sched.kv, PagedKVCache)
    paged = sched.kv
    seqs = {
        s: (
            paged.block_table(s),
            paged.is_swapped(s),
            paged.num_tokens(s),
            paged.num_computed_tokens(s),
        )
        for s in paged.seq_ids()
    }
    cpu = Counter(b for table, swapped, _, _ in seqs.values() if swapped for b in table)
    cpu_refs = tuple(cpu.get(b, 0) for b in range(paged.num_cpu_blocks))
    assert cpu_refs == tuple(paged.cpu_ref_count(b) for b in range(paged.num_cpu_blocks))
    gpu = Counter(b for table, swapped, _, _ in seqs.values() if not swapped for b in table)
    refs = tuple(paged.ref_count(b) for b in range(paged.num_blocks))
    assert refs == tuple(gpu.get(b, 0) for b in range(paged.num_blocks))
    owners = {s: rid for rid, g in sched.state.groups.items() for s in g.seq_ids if s in seqs}
    hashes = tuple(paged.block_hash(b) for b in range(paged.num_blocks))
    return Walked(refs, hashes, cpu_refs, seqs, owners, {})


def record(s: Scenario, window: BlockMapWindow | None = None) -> tuple[BlockMap, list[Walked]]:
    """Simulate `s` with a block map, walking the structures after every step."""
    recorder = BlockMapRecorder(window)
    walked: list[Walked] = []
    simulate(s, block_map=recorder, on_step=lambda _: walked.append(walk(recorder)))
    return recorder.block_map(), walked


def assert_same(block_map: BlockMap, walked: list[Walked]) -> int:
    """Every recorded step's rebuilt state equals the walk after that step; returns how many."""
    first = block_map.window.start
    states = list(block_map.states())
    assert states and [s.step for s in states] == list(range(first, first + len(states)))
    numbers: dict[int, int | None] = {}  # content number -> the hash it stands for
    for state in states:
        truth = walked[state.step]
        if block_map.about.kind == "contiguous":
            got = {
                s: (r.offset, r.num_held, r.num_asked, r.num_computed)
                for s, r in state.regions.items()
            }
            assert got == truth.regions, state.step
            assert {s: r.owner.request_id for s, r in state.regions.items()} == truth.owners
            continue
        assert tuple(state.ref_counts) == truth.refs, state.step
        assert tuple(state.cpu_ref_counts) == truth.cpu_refs, state.step
        for number, block_hash in zip(state.contents, truth.hashes, strict=True):
            assert (number == 0) == (block_hash is None), state.step
            if number:  # one number, one hash, over the whole map
                assert numbers.setdefault(number, block_hash) == block_hash, state.step
        got_seqs = {
            s: (q.table, q.is_swapped, q.num_tokens, q.num_computed_tokens)
            for s, q in state.seqs.items()
        }
        assert got_seqs == truth.seqs, state.step
        assert {s: q.request_key for s, q in state.seqs.items()} == truth.owners, state.step
    assert len(set(numbers.values())) == len(numbers)
    return len(states)


def kinds(block_map: BlockMap) -> Counter[EventKind]:
    return Counter(e.kind for step in block_map.steps for e in step.events)


def test_forks_copy_on_write_and_swap_of_parallel_samples() -> None:
    """vLLM V0, 4 samples a request, a 16-block cache, preemption by swap (the story of
    tests/simulator/policies/test_swap_in.py): every state equal, every kind of event seen."""
    s = scenario(
        explicit_workload(
            [(10, 30, 0.0), (129, 9, 0.0)], sampling=SamplingKind.PARALLEL, num_seqs=4
        ),
        system(Policy.VLLM_V0, num_kv_blocks=16, block_size=16, preemption=PreemptionPolicy.SWAP),
    )
    block_map, walked = record(s)
    assert assert_same(block_map, walked) == len(walked) == block_map.num_steps_run
    seen = kinds(block_map)
    for kind in (EventKind.FORK, EventKind.COPY_ON_WRITE, EventKind.SWAP_OUT, EventKind.SWAP_IN):
        assert seen[kind] > 0, seen
    # The plan's copies are the events' copies, each once.
    assert seen[EventKind.COPY_ON_WRITE] == sum(
        1 for step in block_map.steps for e in step.events if e.kind is EventKind.COPY_ON_WRITE
    )


def test_prefix_hits_evictions_and_recompute_under_v1() -> None:
    s = scenario(
        poisson_workload(30, 40.0, 60, 40, prefix_groups=(PrefixGroup(32, 0.8),)),
        system(Policy.VLLM_V1, num_kv_blocks=40, block_size=8),
    )
    block_map, walked = record(s)
    assert assert_same(block_map, walked) == len(walked)
    seen = kinds(block_map)
    for kind in (EventKind.HIT, EventKind.CACHE, EventKind.EVICT, EventKind.PREEMPT):
        assert seen[kind] > 0, seen
    hits = [e for step in block_map.steps for e in step.events if e.kind is EventKind.HIT]
    assert any(e.is_shared_prefix and "shared system prompt" in e.text for e in hits)


def test_a_window_of_a_run_starts_from_the_state_before_it() -> None:
    s = scenario(
        poisson_workload(30, 40.0, 60, 40, prefix_groups=(PrefixGroup(32, 0.8),)),
        system(Policy.VLLM_V1, num_kv_blocks=40, block_size=8),
    )
    block_map, walked = record(s, BlockMapWindow.parse("20:45"))
    assert block_map.initial.step == 19
    assert assert_same(block_map, walked) == 25
    assert [step.step for step in block_map.steps] == list(range(20, 45))


@pytest.mark.parametrize("policy", [Policy.ORCA, Policy.STATIC])
def test_regions_of_the_contiguous_caches(policy: Policy) -> None:
    s = scenario(
        explicit_workload([(40, 20, 0.0), (30, 50, 0.0), (60, 10, 0.0), (20, 30, 0.5)]),
        system(policy, num_kv_blocks=16, block_size=16, reservation=Reservation.POW2),
    )
    block_map, walked = record(s)
    assert assert_same(block_map, walked) == len(walked)
    seen = kinds(block_map)
    assert seen[EventKind.RESERVE] == seen[EventKind.FINISH] == 4
    assert (seen[EventKind.IDLE] > 0) == (policy is Policy.STATIC)


def test_recording_changes_no_result() -> None:
    """The fast path (when nobody records) and the per-step path (when a block map does) give
    the same frames: a block map observes a run, it does not alter it."""
    s = scenario(
        poisson_workload(40, 30.0, 80, 60, prefix_groups=(PrefixGroup(32, 0.5),)),
        system(Policy.VLLM_V1, num_kv_blocks=60, block_size=16),
    )
    plain = simulate(s)
    recorded = simulate(s, block_map=BlockMapRecorder())
    assert plain.summary == recorded.summary
    assert plain.requests.equals(recorded.requests) and plain.steps.equals(recorded.steps)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=st.sampled_from([Policy.VLLM_V0, Policy.VLLM_V1, Policy.ORCA]),
    swap=st.booleans(),
    sampling=st.sampled_from([SamplingKind.SINGLE, SamplingKind.PARALLEL, SamplingKind.BEAM]),
    num_blocks=st.integers(24, 64),
    prefix=st.sampled_from([0, 16, 40]),
    seed=st.integers(0, 2**16),
)
def test_every_recorded_state_equals_the_structures(
    policy: Policy,
    swap: bool,
    sampling: SamplingKind,
    num_blocks: int,
    prefix: int,
    seed: int,
) -> None:
    """Random small workloads of every policy, prefix groups, parallel samples and beams (V0:
    V1 has no beam search), swap or recompute, in pools tight enough to preempt."""
    if sampling is SamplingKind.BEAM and policy is not Policy.VLLM_V0:
        sampling = SamplingKind.PARALLEL
    groups = (PrefixGroup(prefix, 0.7),) if prefix else ()
    num_seqs = 1 if sampling is SamplingKind.SINGLE else 2
    workload = poisson_workload(
        12, 50.0, 50, 30, prefix_groups=groups, sampling=sampling, num_seqs=num_seqs
    )
    knobs: dict[str, object] = {"num_kv_blocks": num_blocks, "block_size": 8}
    if policy is not Policy.ORCA:
        knobs["preemption"] = PreemptionPolicy.SWAP if swap else PreemptionPolicy.RECOMPUTE
        knobs["enable_prefix_cache"] = bool(prefix)
    else:
        knobs["reservation"] = Reservation.POW2
    s = scenario(workload, system(policy, **knobs), seed=seed)
    block_map, walked = record(s)
    assert assert_same(block_map, walked) == len(walked)


def test_bad_windows_are_refused_in_one_line() -> None:
    for text, problem in [
        ("abc", "not all, N"),
        ("5:5", "0 <= START < END"),
        ("-1:4", "0 <= START < END"),
        ("0:5000", "at most 2,000"),
    ]:
        with pytest.raises(InputError, match=problem) as caught:
            BlockMapWindow.parse(text)
        assert "--block-map" in str(caught.value) and "\n" not in str(caught.value)
    s = scenario(explicit_workload([(10, 5, 0.0)]), system(Policy.VLLM_V1, num_kv_blocks=8))
    recorder = BlockMapRecorder(BlockMapWindow.parse("100:200"))
    simulate(s, block_map=recorder)
    with pytest.raises(InputError, match=r"ran 5 steps; the window must start before step 5"):
        recorder.block_map()

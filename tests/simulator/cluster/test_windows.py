"""Runs of pure decode steps settled in one event (fastpath/pure_runs.py, fastpath/decode_window.py)
against the loop that takes every step as its own event: the same runs, bit for bit.

Each case runs twice, `USE_WINDOWS` on and off, and must give identical step and request tables,
summaries, routing and router samples. A case counts as a test of the runs only if some steps
were applied from one (`Replica.num_steps_ahead`); the cases below are drawn so that they are,
and cover what may look at a replica or change it in the middle of a run: arrivals routed to
it, routers reading its KV use live or from stale reports, the fleet's token count at every
arrival, a session's next turn, a run stopped at its max time, a pool small enough that the
crossing members' blocks end runs early or preemptions happen.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from pagesim.simulator.cluster.fleet import FleetRun, run_fleet
from pagesim.simulator.cluster.replica import Replica
from pagesim.simulator.core.cluster import ClusterConfig, PoolConfig, RouterConfig, RouterKind
from pagesim.simulator.core.config import Policy, PrefixGroup, Scenario, StopConfig
from pagesim.simulator.engine import simulate
from pagesim.simulator.fastpath import attach as attach_module
from pagesim.simulator.fastpath import pure_runs as pure_runs_module
from pagesim.simulator.fastpath.decode_group import DecodeGroup
from pagesim.simulator.fastpath.decode_window import PureRun
from pagesim.simulator.fastpath.run_rows import RunMemory
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.policies.paged import PagedScheduler
from pagesim.simulator.scenario.load import load_scenario
from tests.sim_helpers import explicit_workload, poisson_workload, scenario, system


def _cluster(sc: Scenario, count: int, kind: RouterKind, interval_s: float = 0.0) -> ClusterConfig:
    pool = PoolConfig("pool", count, sc.gpu, sc.tensor_parallel)
    return ClusterConfig((pool,), RouterConfig(kind, report_interval_s=interval_s))


def _fleet(
    monkeypatch: pytest.MonkeyPatch, sc: Scenario, cluster: ClusterConfig, windows: bool
) -> FleetRun:
    monkeypatch.setattr(attach_module, "USE_WINDOWS", windows)
    return run_fleet(sc, cluster)


def _assert_same_result(a: RunResult, b: RunResult) -> None:
    pd.testing.assert_frame_equal(a.steps, b.steps, check_exact=True)
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    assert a.summary == b.summary


def _assert_same_fleet(
    monkeypatch: pytest.MonkeyPatch, sc: Scenario, cluster: ClusterConfig
) -> int:
    """Both ways; returns the steps the runs applied (0: the case tested nothing of them)."""
    ahead = _fleet(monkeypatch, sc, cluster, windows=True)
    plain = _fleet(monkeypatch, sc, cluster, windows=False)
    assert all(r.num_steps_ahead == 0 for r in plain.replicas)
    for a, b in zip(ahead.results, plain.results, strict=True):
        _assert_same_result(a, b)
    assert ahead.routed_to == plain.routed_to
    assert ahead.in_flight_samples == plain.in_flight_samples
    assert ahead.window_tokens == plain.window_tokens
    assert ahead.end_s == plain.end_s
    assert all(r.num_cuts == 0 for r in plain.replicas)
    return sum(r.num_steps_ahead for r in ahead.replicas)


def _v1_scenario(
    seed: int, *, num_requests: int = 120, rate: float = 6.0, kv_tokens: int | None = None
) -> Scenario:
    knobs: dict[str, object] = {"enable_prefix_cache": True}
    if kv_tokens is not None:
        knobs |= {"block_size": 16, "num_kv_blocks": kv_tokens // 16}
    workload = poisson_workload(
        num_requests, rate, prompt_mean=300, output_mean=200, prefix_groups=(PrefixGroup(64, 0.5),)
    )
    return scenario(workload, system(Policy.VLLM_V1, **knobs), seed=seed)


@pytest.mark.parametrize("kind", list(RouterKind))
def test_three_replicas_behind_each_router_give_the_per_step_run(
    monkeypatch: pytest.MonkeyPatch, kind: RouterKind
) -> None:
    sc = _v1_scenario(seed=3)
    assert _assert_same_fleet(monkeypatch, sc, _cluster(sc, 3, kind)) > 1000
    cuts = sum(r.num_cuts for r in _fleet(monkeypatch, sc, _cluster(sc, 3, kind), True).replicas)
    assert cuts > 10  # arrivals cut runs short: the applied steps include cut runs


@pytest.mark.parametrize("interval_s", [0.0, 0.05, 1.0])
def test_a_router_reading_kv_use_live_or_from_stale_reports_sees_the_per_step_state(
    monkeypatch: pytest.MonkeyPatch, interval_s: float
) -> None:
    sc = _v1_scenario(seed=5, rate=10.0)
    cluster = _cluster(sc, 2, RouterKind.LEAST_KV, interval_s)
    assert _assert_same_fleet(monkeypatch, sc, cluster) > 1000


@pytest.mark.parametrize("seed", [5, 6])
def test_every_live_kv_read_sees_the_per_step_memory(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    # A router reading KV use at each arrival looks into runs: at the step in flight (its
    # blocks taken, even right after the run opened), between steps, after a cut. What each
    # look sees must be the per-step loop's, row for row, not only where it moves a decision.
    reads: list[tuple[object, ...]] = []
    original = Replica.kv_used_share

    def watched(replica: Replica) -> float:
        share = original(replica)
        row = replica.scheduler.memory_breakdown().row
        reads.append((replica.index, replica._env.now, share, *row))
        return share

    monkeypatch.setattr(Replica, "kv_used_share", watched)
    sc = _v1_scenario(seed=seed, rate=12.0)
    cluster = _cluster(sc, 3, RouterKind.LEAST_KV)
    ahead = _fleet(monkeypatch, sc, cluster, windows=True)
    seen_ahead, reads[:] = list(reads), []
    _fleet(monkeypatch, sc, cluster, windows=False)
    assert sum(r.num_steps_ahead for r in ahead.replicas) > 1000
    assert len(seen_ahead) > 100 and seen_ahead == reads


def test_a_pool_too_small_for_every_crossing_ends_runs_early_and_preempts_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sc = _v1_scenario(seed=7, rate=20.0, kv_tokens=4000)
    ahead = _fleet(monkeypatch, sc, _cluster(sc, 2, RouterKind.ROUND_ROBIN), windows=True)
    assert sum(res.summary["num_preemptions"] for res in ahead.results) > 0  # the pool is tight
    assert _assert_same_fleet(monkeypatch, sc, _cluster(sc, 2, RouterKind.ROUND_ROBIN)) > 500


@pytest.mark.parametrize("max_time_s", [7.3, 21.05])
def test_a_run_stopped_at_its_max_time_keeps_the_steps_that_ended_by_then(
    monkeypatch: pytest.MonkeyPatch, max_time_s: float
) -> None:
    sc = replace(_v1_scenario(seed=11, rate=8.0), stop=StopConfig(max_time_s=max_time_s))
    ahead = _fleet(monkeypatch, sc, _cluster(sc, 2, RouterKind.LEAST_OUTSTANDING), windows=True)
    assert sum(res.summary["num_unfinished"] for res in ahead.results) > 0  # stopped mid-run
    cluster = _cluster(sc, 2, RouterKind.LEAST_OUTSTANDING)
    assert _assert_same_fleet(monkeypatch, sc, cluster) > 100


def test_session_turns_sent_after_answers_end_give_the_per_step_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tests.simulator.cluster.test_traffic import SESSIONS, load

    sc = load(tmp_path, SESSIONS)
    assert sc.cluster is not None
    assert _assert_same_fleet(monkeypatch, sc, sc.cluster) > 1000


@pytest.mark.parametrize("name", ["shared_system_prompt", "vllm_v1_on_h200", "spec_decode"])
def test_built_in_scenarios_run_alone_give_the_per_step_run(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    applied = [0]
    complete = pure_runs_module.complete_pure_steps

    def counted(
        scheduler: PagedScheduler,
        group: DecodeGroup,
        num_steps: int,
        *args: Any,
        **kwargs: Any,
    ) -> RunMemory:
        applied[0] += num_steps
        return complete(scheduler, group, num_steps, *args, **kwargs)

    monkeypatch.setattr(pure_runs_module, "complete_pure_steps", counted)
    sc = load_scenario(name)
    for sys_ in sc.systems:
        applied[0] = 0
        monkeypatch.setattr(attach_module, "USE_WINDOWS", True)
        ahead = simulate(sc, sys_)
        taken = applied[0]
        monkeypatch.setattr(attach_module, "USE_WINDOWS", False)
        _assert_same_result(ahead, simulate(sc, sys_))
        assert applied[0] == taken  # none without runs
        # speculating systems never take runs (their steps verify drafts); the others do
        assert (taken > 50) is (sys_.speculative is None), (sys_.name, taken)


@pytest.mark.parametrize("seed", range(12))
def test_random_fleets_give_the_per_step_run(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    rng = np.random.default_rng(seed)
    sc = _v1_scenario(
        seed,
        num_requests=int(rng.integers(40, 160)),
        rate=float(rng.uniform(1.0, 30.0)),
        kv_tokens=int(rng.choice([3000, 20000])) if rng.random() < 0.5 else None,
    )
    budget = int(rng.choice([64, 512, 4096]))
    sys_ = replace(sc.systems[0], max_num_batched_tokens=budget, enable_prefix_cache=seed % 3 > 0)
    sc = replace(sc, systems=(sys_,))
    kind = RouterKind(rng.choice([k.value for k in RouterKind]))
    count = int(rng.integers(1, 4))
    assert _assert_same_fleet(monkeypatch, sc, _cluster(sc, count, kind)) > 0


@pytest.mark.parametrize("seed", range(8))
def test_random_v0_fleets_give_the_per_step_run(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    # vLLM V0's decode-only steps: runs end where V0 would admit the waiting head (the batch not
    # full and its blocks fitting above the watermark), at a finish, and where the crossing
    # members would leave no block free (V0 then preempts). Tight pools and small batches make
    # heads wait through runs and preemptions happen.
    rng = np.random.default_rng(100 + seed)
    knobs: dict[str, object] = {"enable_prefix_cache": seed % 3 == 0}
    if rng.random() < 0.6:
        knobs |= {"block_size": 16, "num_kv_blocks": int(rng.choice([3000, 8000])) // 16}
    if rng.random() < 0.5:
        knobs["max_num_seqs"] = int(rng.choice([4, 16]))
    workload = poisson_workload(
        int(rng.integers(60, 160)),
        float(rng.uniform(2.0, 30.0)),
        prompt_mean=300,
        output_mean=200,
        prefix_groups=(PrefixGroup(64, 0.5),),
    )
    sc = scenario(workload, system(Policy.VLLM_V0, **knobs), seed=seed)
    kind = RouterKind(rng.choice([k.value for k in RouterKind]))
    count = int(rng.integers(1, 4))
    assert _assert_same_fleet(monkeypatch, sc, _cluster(sc, count, kind)) > 200


@pytest.mark.parametrize("prefix_cache", [False, True])
def test_v0_heads_waiting_for_blocks_take_runs_and_preempt_as_per_step(
    monkeypatch: pytest.MonkeyPatch, prefix_cache: bool
) -> None:
    # A pool of 93 blocks under 20 req/s: the waiting head's prompt rarely fits above the
    # watermark, so runs go on with it waiting (vllm_v0.head_stays_waiting), and crossings
    # leave no block free often enough that V0 preempts.
    workload = poisson_workload(
        150, 20.0, prompt_mean=300, output_mean=200, prefix_groups=(PrefixGroup(64, 0.5),)
    )
    v0 = system(Policy.VLLM_V0, enable_prefix_cache=prefix_cache, block_size=16, num_kv_blocks=93)
    sc = scenario(workload, v0, seed=3)
    cluster = _cluster(sc, 2, RouterKind.ROUND_ROBIN)
    ahead = _fleet(monkeypatch, sc, cluster, windows=True)
    steps = pd.concat([r.steps for r in ahead.results])
    assert (steps.num_waiting > 0).mean() > 0.9 and steps.num_running.max() < 16
    assert sum(res.summary["num_preemptions"] for res in ahead.results) > 100
    assert _assert_same_fleet(monkeypatch, sc, cluster) > 5000


# --- exact ties: another event at the very instant a step in a run ends -----------------------

EIGHT_DECODERS = [(100, 400, 0.0)] * 8  # one run after another of pure steps, from t ~ 0.5 s


def _single(monkeypatch: pytest.MonkeyPatch, sc: Scenario, windows: bool) -> RunResult:
    monkeypatch.setattr(attach_module, "USE_WINDOWS", windows)
    return simulate(sc)


def _inner_step_end(monkeypatch: pytest.MonkeyPatch, k: int = 150) -> float:
    """The end of step k of the eight decoders, a pure step inside a run (float as SimPy
    reaches it: the next step starts exactly there)."""
    steps = _single(monkeypatch, scenario(explicit_workload(EIGHT_DECODERS), V1), False).steps
    end = float(steps.start_s.iloc[k]) + float(steps.duration_s.iloc[k])
    assert end == float(steps.start_s.iloc[k + 1])
    assert steps.num_prefill_tokens.iloc[k - 5 : k + 5].sum() == 0  # pure decode around it
    return end


V1 = system(Policy.VLLM_V1)


@pytest.mark.parametrize("offset_ulps", [0, 1])
def test_an_arrival_exactly_at_a_step_end_inside_a_run_is_admitted_as_per_step(
    monkeypatch: pytest.MonkeyPatch, offset_ulps: int
) -> None:
    # Its timer is set before that step starts (at the previous arrival, t = 0): SimPy fires it
    # before the step's end, so the per-step loop admits it in the next step; 1 ulp later, the
    # step ends first. Either way the run gives the same tables.
    at = _inner_step_end(monkeypatch)
    for _ in range(offset_ulps):
        at = math.nextafter(at, math.inf)
    sc = scenario(explicit_workload([*EIGHT_DECODERS, (50, 20, at)]), V1)
    ahead = _single(monkeypatch, sc, True)
    plain = _single(monkeypatch, sc, False)
    _assert_same_result(ahead, plain)
    admitted = plain.steps[plain.steps.num_prefill_tokens > 0].start_s.iloc[-1]
    assert admitted == at if offset_ulps == 0 else admitted > at


def test_a_max_time_exactly_at_a_step_end_inside_a_run_stops_before_that_step_completes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    at = _inner_step_end(monkeypatch)
    sc = replace(scenario(explicit_workload(EIGHT_DECODERS), V1), stop=StopConfig(max_time_s=at))
    ahead = _single(monkeypatch, sc, True)
    _assert_same_result(ahead, _single(monkeypatch, sc, False))
    assert len(ahead.steps) == 150  # steps 0..149: the one ending at max_time never completes


LOCKSTEP = """
name = "lockstep"
seed = 1
[model]
preset = "llama-3-8b"
[gpu]
preset = "a100-80gb"
[workload.arrival]
kind = "burst"
[workload.prompt]
kind = "fixed"
value = 300
[workload.output]
kind = "fixed"
value = 200
[workload.sessions]
num_sessions = 4
think_time_s = 0
[workload.sessions.turns]
kind = "fixed"
value = 4
[workload.sessions.new_tokens]
kind = "fixed"
value = 50
[[systems]]
name = "v1"
policy = "vllm-v1"
[cluster.router]
kind = "round-robin"
[[cluster.pools]]
count = 2
"""


def test_replicas_in_lockstep_with_turns_sent_at_once_give_the_per_step_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Two identical replicas step in lockstep; a turn answered on one is sent (think time 0)
    # at the instant the other's step ends, and round-robin routes it there.
    from tests.simulator.cluster.test_traffic import load

    sc = load(tmp_path, LOCKSTEP)
    assert sc.cluster is not None
    assert _assert_same_fleet(monkeypatch, sc, sc.cluster) > 500


# --- who looks at every step gets every step -------------------------------------------------


def test_hooks_that_look_at_every_step_turn_runs_off_even_with_the_fast_path_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checks = [0]
    check = PagedScheduler.check_invariants

    def counted(scheduler: PagedScheduler) -> None:
        checks[0] += 1
        check(scheduler)

    monkeypatch.setattr(PagedScheduler, "check_invariants", counted)
    sc = scenario(explicit_workload(EIGHT_DECODERS), V1)
    calls: list[float] = []
    result = simulate(sc, on_step=calls.append, fast_path=True, check_invariants=True)
    assert len(calls) == checks[0] == len(result.steps) == 400  # a prefill, 399 decodes
    _assert_same_result(result, _single(monkeypatch, sc, True))


def test_a_full_batch_with_requests_waiting_takes_runs_and_gives_the_per_step_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # max_num_seqs 8 under 20 req/s: the queue is rarely empty, yet a step admits nobody while
    # the batch is full (vllm_v1.admit_chunks): such steps are pure until a member finishes.
    sc = _v1_scenario(seed=13, num_requests=150, rate=20.0)
    sys_ = replace(sc.systems[0], max_num_seqs=8)
    sc = replace(sc, systems=(sys_,))
    ahead = _fleet(monkeypatch, sc, _cluster(sc, 2, RouterKind.ROUND_ROBIN), windows=True)
    steps = pd.concat([r.steps for r in ahead.results])
    assert (steps.num_waiting > 0).mean() > 0.75  # something waits at most steps
    assert _assert_same_fleet(monkeypatch, sc, _cluster(sc, 2, RouterKind.ROUND_ROBIN)) > 2000


@pytest.mark.parametrize("prefix_cache", [True, False])
def test_runs_beside_a_waiting_head_whose_blocks_do_not_fit_give_the_per_step_run(
    monkeypatch: pytest.MonkeyPatch, prefix_cache: bool
) -> None:
    """A loaded replica's waiting head refused for its blocks stays refused while the free
    blocks only fall: its steps run ahead (vllm_v1.py `VllmV1.pure_step_lookups`), each counting
    the head's prompt as looked up in the prefix cache, as its refused admission does."""
    knobs = {"enable_prefix_cache": prefix_cache, "block_size": 16, "num_kv_blocks": 3000 // 16}
    workload = poisson_workload(150, 20.0, prompt_mean=300, output_mean=200)
    sc = scenario(workload, system(Policy.VLLM_V1, **knobs), seed=13)
    pure_run = pure_runs_module.pure_run
    beside_waiting = [0]

    def run_of(
        paged: PagedScheduler, group: DecodeGroup, limit: int, kind: type[PureRun]
    ) -> PureRun | None:
        run = pure_run(paged, group, limit, kind)
        if run is not None and len(paged.state.waiting):
            beside_waiting[0] += 1
            assert run.query_tokens == paged.state.waiting[0].target
        return run

    ahead, plain = _single_both_ways(monkeypatch, sc, run_of)
    assert beside_waiting[0] > 20
    queries = ahead.kv.num_prefix_query_tokens
    assert queries == plain.kv.num_prefix_query_tokens and (queries > 0) is prefix_cache


def _single_both_ways(
    monkeypatch: pytest.MonkeyPatch,
    sc: Scenario,
    run_of: Callable[[PagedScheduler, DecodeGroup, int, type[PureRun]], PureRun | None],
) -> tuple[PagedScheduler, PagedScheduler]:
    """`sc` alone with runs (through `run_of`, which wraps `pure_run`), then without; the two
    must give the same tables and summary. Returns the two runs' schedulers."""
    from pagesim.simulator.cluster import replica as replica_module

    schedulers: list[PagedScheduler] = []
    attach = replica_module.attach

    def attached(*args: object, **kwargs: object) -> object:
        scheduler = args[1]
        assert isinstance(scheduler, PagedScheduler)
        schedulers.append(scheduler)
        return attach(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(replica_module, "attach", attached)
    monkeypatch.setattr(pure_runs_module, "pure_run", run_of)
    results = []
    for windows in (True, False):
        monkeypatch.setattr(attach_module, "USE_WINDOWS", windows)
        results.append(simulate(sc, sc.systems[0]))
    _assert_same_result(*results)
    ahead, plain = schedulers
    return ahead, plain


@pytest.mark.parametrize("num_kv_tokens", [2000, 4000])
def test_runs_beside_a_preempted_head_hitting_its_own_blocks_give_the_per_step_run(
    monkeypatch: pytest.MonkeyPatch, num_kv_tokens: int
) -> None:
    """A preempted request at the head, refused for its blocks, hits its own free blocks at the
    tail of the free order: its steps run ahead (admission.refused_with_hits), each counting the
    hits the crossing members' blocks have not taken yet, fewer as they take them (from the last
    hit on), as each per-step refusal does."""
    knobs = {"enable_prefix_cache": True, "block_size": 16, "num_kv_blocks": num_kv_tokens // 16}
    workload = poisson_workload(150, 20.0, prompt_mean=300, output_mean=200)
    sc = scenario(workload, system(Policy.VLLM_V1, **knobs), seed=13)
    pure_run = pure_runs_module.pure_run
    hit_runs = {"hits": 0, "fewer": 0}

    def run_of(
        paged: PagedScheduler, group: DecodeGroup, limit: int, kind: type[PureRun]
    ) -> PureRun | None:
        run = pure_run(paged, group, limit, kind)
        if run is not None and run.hit_tokens(0, 1):
            hit_runs["hits"] += 1
            last = run.num_steps - 1
            hit_runs["fewer"] += run.hit_tokens(last, 1) < run.hit_tokens(0, 1)
        return run

    ahead, plain = _single_both_ways(monkeypatch, sc, run_of)
    assert hit_runs["hits"] > 50 and hit_runs["fewer"] > 50
    assert ahead.kv.num_prefix_query_tokens == plain.kv.num_prefix_query_tokens
    assert ahead.kv.num_prefix_hit_tokens == plain.kv.num_prefix_hit_tokens
    ahead.check_invariants()


def test_runs_of_one_step_before_a_finish_give_the_per_step_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run whose first step finishes a member (pure_runs.PureRuns.open takes it rather than
    planning it) completes, prices and records that step as the per-step loop does."""
    one_step = [0]
    pure_run = pure_runs_module.pure_run

    def run_of(
        paged: PagedScheduler, group: DecodeGroup, limit: int, kind: type[PureRun]
    ) -> PureRun | None:
        run = pure_run(paged, group, limit, kind)
        one_step[0] += run is not None and run.num_steps == 1
        return run

    monkeypatch.setattr(pure_runs_module, "pure_run", run_of)
    sc = _v1_scenario(seed=5, num_requests=150, rate=10.0)
    assert _assert_same_fleet(monkeypatch, sc, _cluster(sc, 1, RouterKind.ROUND_ROBIN)) > 1000
    assert one_step[0] > 20

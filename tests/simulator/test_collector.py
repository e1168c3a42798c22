"""The cyclic garbage collector is paused while a simulation runs (simulator/core/collector.py).
That is safe only while a run leaves no cyclic garbage that grows with its length: pinned here
for a single replica (preemptions included) and a fleet behind a router; a disaggregated run's
(its requests' KV handoffs, held to its end anyway) is bounded per request."""

from __future__ import annotations

import gc
from dataclasses import replace

import pytest

from pagesim.simulator.core.cluster import ClusterConfig, PoolConfig, RouterConfig, RouterKind
from pagesim.simulator.core.collector import collector_paused
from pagesim.simulator.core.config import Policy, PrefixGroup, Scenario
from pagesim.simulator.engine import simulate
from pagesim.simulator.scenario.load import load_scenario, resolve_scenario
from tests.sim_helpers import poisson_workload, scenario, system


def test_the_collector_is_back_as_it_was_after_the_block() -> None:
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("a run fails")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # it was off: it stays off
    finally:
        gc.enable()


def _cyclic_garbage_of(sc: Scenario) -> int:
    """Objects only the collector can free after one run of `sc` (the collector off meanwhile)."""
    gc.collect()
    gc.disable()
    try:
        simulate(sc)
        return gc.collect()
    finally:
        gc.enable()


def _workload(num_requests: int, fleet: bool) -> Scenario:
    groups = (PrefixGroup(num_tokens=256, fraction=0.5),)
    workload = poisson_workload(num_requests, 40.0, 600, 200, prefix_groups=groups)
    # A small pool: preemptions (recompute) and prefix-cache hits on free blocks happen.
    v1 = system(Policy.VLLM_V1, "v1", num_kv_blocks=400)
    sc = scenario(workload, v1)
    if not fleet:
        return sc
    pool = PoolConfig("pool", 2, sc.gpu, sc.tensor_parallel)
    cluster = ClusterConfig((pool,), RouterConfig(RouterKind.LEAST_OUTSTANDING))
    return replace(sc, cluster=cluster)


def test_a_disaggregated_run_leaves_a_bounded_few_objects_a_request() -> None:
    sc = load_scenario(resolve_scenario("disaggregated_vs_colocated"))
    disaggregated = replace(sc, systems=sc.systems[:1])
    assert sc.systems[0].name == "disaggregated"

    def of(num_requests: int) -> Scenario:
        return replace(disaggregated, workload=replace(sc.workload, num_requests=num_requests))

    short, long = _cyclic_garbage_of(of(60)), _cyclic_garbage_of(of(240))
    # Measured: 1,085 and 2,865 objects, ~10 a request (requests and their handoffs, which the
    # run holds to its end: pausing the collector does not raise its peak).
    assert long - short <= 12 * (240 - 60), (short, long)


@pytest.mark.parametrize("fleet", [False, True], ids=["one replica", "a fleet of two"])
def test_a_longer_run_leaves_no_more_cyclic_garbage(fleet: bool) -> None:
    short = _cyclic_garbage_of(_workload(60, fleet))
    long = _cyclic_garbage_of(_workload(480, fleet))  # 8x the requests, steps and events
    # What a run leaves for the collector is its setup's and the result's, not its loop's.
    assert long <= short + 200, (short, long)


def test_simulate_runs_with_the_collector_paused_and_restores_it() -> None:
    seen: list[bool] = []
    simulate(_workload(20, fleet=False), on_step=lambda _now: seen.append(gc.isenabled()))
    assert seen and not any(seen)  # paused at every step
    assert gc.isenabled()  # and back after the run

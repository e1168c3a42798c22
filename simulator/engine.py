"""The `simulate` API: one serving replica fed by the workload's arrival process.

The replica's heartbeat lives in simulator/cluster/replica.py (one loop for a single run and for
every replica of a fleet, with its provenance); this module feeds it arrivals and finishes the
result. The loop is:

    plan = scheduler.schedule(now)          # policy decides the iteration
    cost = execution_model.price(plan)      # what it costs on this GPU
    yield env.timeout(cost.duration_s)      # time passes
    scheduler.complete(plan, env.now)       # tokens appear, requests finish, memory frees

and it idles until an arrival (or a policy's wake-up time) when nothing is runnable.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import simpy

from pagesim import __version__
from pagesim.simulator.cluster.model_keys import replica_keys
from pagesim.simulator.cluster.replica import ExecutionFactory, Replica, ReplicaStallError
from pagesim.simulator.core.collector import collector_paused
from pagesim.simulator.core.config import Scenario, SystemConfig
from pagesim.simulator.core.deployments import system_scenario
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.execution.checks import utilization_warnings
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.workload.stream import WorkloadStats, iter_requests

if TYPE_CHECKING:  # imported by the runs that record one only
    from pagesim.simulator.metrics.block_map import BlockMapRecorder

StallError = ReplicaStallError  # the scheduler holds requests but can make no progress


@collector_paused()  # core/collector.py: ~12% faster; a run leaves next to nothing cyclic
def simulate(
    scenario: Scenario,
    system: SystemConfig | None = None,
    *,
    check_invariants: bool = False,
    on_step: Callable[[float], None] | None = None,
    execution_factory: ExecutionFactory | None = None,
    fast_path: bool | None = None,
    block_map: BlockMapRecorder | None = None,
) -> RunResult:
    """Run one system of `scenario` (the first if none is named) to completion or the stop time.

    Same scenario and seed give identical results; simulations share no state.
    `execution_factory` replaces the scenario's execution model, e.g. by one that runs each plan
    for real over the scheduler's block tables and returns the measured time (fidelity checks).
    `fast_path`: let lone decoders advance as a decode group (simulator.policies.decode_group:
    the same results, faster). By default it is on when nobody looks at each step's
    per-sequence state: no `on_step`, no `check_invariants`, no `execution_factory` (which may
    read the block tables every step), and the roofline prices the steps. `True` turns it on
    also under `check_invariants`, which then checks it (tests do).
    `block_map`: record a window of the run's block states and events into this recorder
    (simulator/metrics/block_map.py; the per-step path, whose results are the fast path's).

    A scenario with a [cluster] runs its fleet (simulator/cluster/): one result whose requests
    say which replica served them and whose summary holds the cluster's and each replica's.
    So does one with multi-turn sessions (whose next turns wait for answers): on one replica.
    """
    is_fleet = scenario.cluster is not None or scenario.workload.sessions is not None
    if is_fleet and (on_step is not None or execution_factory is not None):
        # Rather than run one replica of a fleet and say nothing.
        raise InputError(
            f"scenario {scenario.name!r} runs a fleet ([cluster] or [workload.sessions]); a step "
            "hook or a measured execution model (a fidelity check) drives one replica: use a "
            "scenario without them"
        )
    if scenario.cluster is None:  # a system's own tensor_parallel and dtypes (pools: their own)
        scenario = system_scenario(scenario, system or scenario.systems[0])
    if scenario.data_parallel > 1:  # every DP rank, lock-stepped (cluster/dp_group.py)
        from pagesim.simulator.cluster.dp_group import simulate_dp_group, unsupported

        unsupported(
            scenario,
            is_fleet
            or on_step is not None
            or execution_factory is not None
            or block_map is not None,
        )
        return simulate_dp_group(scenario, system, check_invariants=check_invariants)
    if block_map is not None:
        from pagesim.simulator.metrics.block_map_window import check_mappable

        check_mappable(scenario)
    if is_fleet:
        from pagesim.simulator.cluster.disagg_result import simulate_any_fleet

        return simulate_any_fleet(scenario, system, check_invariants=check_invariants)
    env = simpy.Environment()
    replica = Replica(
        0,
        "replica",
        scenario,
        system or scenario.systems[0],
        env,
        None,  # one replica: no router counts its requests in flight
        check_invariants=check_invariants,
        on_step=on_step,
        execution_factory=execution_factory,
        fast_path=fast_path,
        block_map=block_map,
    )
    rng = np.random.default_rng(scenario.seed)
    max_time = scenario.stop.max_time_s
    workload_stats = WorkloadStats()

    def arrivals() -> Generator[simpy.Event, None, None]:
        max_seq_len = scenario.model.max_seq_len
        for request in iter_requests(scenario.workload, max_seq_len, rng, workload_stats):
            if max_time is not None and request.arrival_s > max_time:
                break
            if request.arrival_s > env.now:
                yield env.timeout(request.arrival_s - env.now)
            replica.add_request(request)  # marks the arrival window's edges, wakes the loop
        replica.mark_arrivals_done()

    # The arrival process first, then the replica's loop: the order of creation orders the
    # events that fall at one instant (fleets keep the same order, cluster/fleet.py).
    env.process(arrivals())
    done = replica.start()
    env.run(until=done if max_time is None else max_time)
    result = replica.result(scenario.name, env.now, workload_stats.provenance())
    provenance = {"pagesim_version": __version__} | {
        k: v for k, v in result.provenance.items() if k not in ("replica", "pool")
    }
    described = provenance["execution_model"]
    priced = described.get("warnings", []) if isinstance(described, dict) else []
    device = described.get("device") if isinstance(described, dict) else None
    over = utilization_warnings(result.summary, scenario.gpu.name, device)
    provenance["warnings"] = [*priced, *over]
    # Figures only some runs have (a mixture of experts' expert reads, speculative decoding's
    # counts): cluster/model_keys.py, which gives a fleet's replicas the same.
    result.summary.update(replica_keys(replica, result))
    return replace(result, provenance=provenance)

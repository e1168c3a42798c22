"""The `simulate` API: one system of a scenario, run to completion or its stop time.

A run is one arrival process (simulator/cluster/arrivals.py) feeding replicas, each the SimPy
step loop of simulator/cluster/replica.py: here a single replica, or, for a scenario with a
[cluster] or multi-turn sessions, a fleet behind a router (cluster/fleet.py) or a disaggregated
fleet (cluster/disagg.py), for one with model.data_parallel > 1 a DP group of lock-stepped ranks
(cluster/dp_group.py), whose result modules (cluster/result.py, cluster/disagg_result.py) turn
the run into one `RunResult`. Each replica's loop is (a pipelined replica's keeps up to one
batch per stage in flight: cluster/pipeline_loop.py):

    plan = scheduler.schedule(now)          # policy decides the iteration
    cost = execution_model.price(plan)      # what it costs on this GPU
    yield env.timeout(cost.duration_s)      # time passes
    scheduler.complete(plan, env.now)       # tokens appear, requests finish, memory frees

and it idles until an arrival (or a policy's wake-up time) when nothing is runnable.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import simpy

from pagesim import __version__
from pagesim.simulator.cluster.arrivals import Arrivals, run
from pagesim.simulator.cluster.disagg import run_disagg
from pagesim.simulator.cluster.disagg_result import disagg_result
from pagesim.simulator.cluster.dp_group import simulate_dp_group, unsupported
from pagesim.simulator.cluster.fleet import run_fleet
from pagesim.simulator.cluster.model_keys import replica_keys
from pagesim.simulator.cluster.replica import ExecutionFactory, Replica, ReplicaStallError
from pagesim.simulator.cluster.result import fleet_result
from pagesim.simulator.core.cluster import ClusterConfig, PoolConfig
from pagesim.simulator.core.collector import collector_paused
from pagesim.simulator.core.config import Scenario, SystemConfig
from pagesim.simulator.core.deployments import system_scenario
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.execution.checks import utilization_warnings
from pagesim.simulator.metrics.result import RunResult

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
    `fast_path`: let lone decoders advance as a decode group (simulator/fastpath/: the same
    results, faster). By default it is on when nobody looks at each step's
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
        return _simulate_fleet(scenario, system or scenario.systems[0], check_invariants)
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
    # The replica marks its own arrival window (Replica.add_request): no fleet's to count.
    arrivals = Arrivals(env, scenario, replica.add_request, replica.mark_arrivals_done)
    end_s = run(env, arrivals, [replica], scenario.stop.max_time_s)
    result = replica.result(scenario.name, end_s, arrivals.provenance())
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


def _simulate_fleet(scenario: Scenario, system: SystemConfig, check_invariants: bool) -> RunResult:
    """A scenario with a [cluster] (or multi-turn sessions, on one replica): its fleet's run
    (cluster/fleet.py, or cluster/disagg.py with prefill and decode pools) as one result. A
    colocated system of a disaggregated scenario (`colocated_systems`) runs its pools
    colocated."""
    cluster = scenario.cluster
    warmup_s = scenario.stop.warmup_s
    if cluster is None:  # sessions: their next turns wait for answers, which a fleet routes
        cluster = ClusterConfig((PoolConfig("replica", 1, scenario.gpu, scenario.tensor_parallel),))
    else:
        cluster = cluster.for_system(system.name)
        if cluster.is_disaggregated:
            disagg = run_disagg(scenario, cluster, system, check_invariants=check_invariants)
            return disagg_result(disagg, scenario.name, system.name, warmup_s)
        scenario = replace(scenario, cluster=cluster)
    fleet = run_fleet(scenario, cluster, system, check_invariants=check_invariants)
    return fleet_result(fleet, scenario.name, system.name, warmup_s)

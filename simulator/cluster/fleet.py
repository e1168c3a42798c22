"""A fleet in one SimPy environment: pools of replicas behind a router, sharing the clock.

    arrivals ──▶ router.route(request) ──▶ replica i: engine loop (plan, price, timeout, complete)
        ▲                                        │ a request ended
        └──── a session's next turn ◀────────────┘ (think time after its answer)

The arrival process is every run's (arrivals.py); each replica is its loop (replica.py).
With one replica, whatever the router, the run is engine.simulate's event for event (tests pin
it on several built-in scenarios). Replicas that have nothing to do wait on their own event:
they cost nothing while others step. `RoutedFleet` is what any fleet behind a router keeps (the
routing, the in-flight counts, the results); a DP group (dp_group.py) is one, whose ranks step
together in one loop of its own.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import simpy

from pagesim import __version__
from pagesim.simulator.cluster.arrivals import Arrivals, Loop, run
from pagesim.simulator.cluster.host_memory import fleet_blocks_reason
from pagesim.simulator.cluster.replica import Replica
from pagesim.simulator.cluster.routers import LoadBoard, Router, make_router
from pagesim.simulator.core.cluster import ClusterConfig
from pagesim.simulator.core.config import Scenario, SystemConfig
from pagesim.simulator.core.deployments import pool_deployments
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.request import Request
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.workload.stream import WorkloadStats

# The router's RNG is its own stream of the scenario seed: the workload draws exactly what it
# draws in a single-replica run. The tag is arbitrary; it only has to stay fixed.
_ROUTER_STREAM = 0x524F5554


@dataclass(slots=True)
class FleetRun:
    """A finished fleet run: the replicas (with their results) and the router."""

    replicas: list[Replica]
    results: list[RunResult]
    router: Router
    routed_to: dict[int, int]  # request id -> replica index (each request routed once)
    end_s: float
    workload: WorkloadStats
    in_flight_samples: array[int]  # [arrivals x replicas] the router's in-flight counts, flat
    session_of: dict[int, int]  # request id -> session id, for the requests that have one
    # Output tokens the replicas had produced at the fleet's first in-window arrival and at its
    # last arrival (the run's arrival window, over the whole fleet: arrivals.py).
    window_tokens: tuple[int | None, int | None] = (None, None)


def build_replicas(
    scenario: Scenario,
    cluster: ClusterConfig,
    system: SystemConfig,
    env: simpy.Environment,
    on_done: Callable[[Replica, Request], None],
    check_invariants: bool,
) -> list[Replica]:
    pools = pool_deployments(scenario, cluster, system)
    too_big = fleet_blocks_reason(pools)
    if too_big is not None:
        raise InputError(f"cluster.pools: {too_big}")
    replicas: list[Replica] = []
    for pool in pools:
        for _ in range(pool.count):
            replicas.append(
                Replica(
                    len(replicas),
                    pool.pool_name,
                    pool.scenario,
                    pool.system,
                    env,
                    on_done,
                    check_invariants=check_invariants,
                )
            )
    return replicas


class RoutedFleet:
    """Replicas behind one router in one SimPy environment, fed by the run's arrival process
    (arrivals.py): what it routes where, and the router's in-flight counts at each arrival. A
    kind of fleet builds its replicas (with `_answered` as their `on_done`) and its router,
    then calls `__init__`; `loops()` are what run (each replica's own, by default)."""

    def __init__(
        self,
        scenario: Scenario,
        env: simpy.Environment,
        replicas: list[Replica],
        router: Router,
    ) -> None:
        self.scenario, self.env, self.replicas, self.router = scenario, env, replicas, router
        self.arrivals = Arrivals(
            env, scenario, self._send, self._end_arrivals, count_tokens=self._num_output_tokens
        )
        self.routed_to: dict[int, int] = {}  # request id -> replica index
        self.session_of: dict[int, int] = {}  # request id -> session id, where it has one
        self.in_flight_samples: array[int] = array("q")  # the router's counts at each arrival

    def loops(self) -> Sequence[Loop]:
        """What runs beside the arrival process: every replica's own loop."""
        return self.replicas

    def run(self) -> FleetRun:
        """Run to completion or the stop time; the replicas' results, each of its own."""
        scenario = self.scenario
        end_s = run(self.env, self.arrivals, self.loops(), scenario.stop.max_time_s)
        provenance = self.arrivals.provenance()
        results = [replica.result(scenario.name, end_s, provenance) for replica in self.replicas]
        for result in results:
            result.provenance["pagesim_version"] = __version__
        return FleetRun(
            self.replicas,
            results,
            self.router,
            self.routed_to,
            end_s,
            self.arrivals.stats,
            self.in_flight_samples,
            self.session_of,
            self.arrivals.window_tokens,
        )

    def _send(self, request: Request) -> None:
        """An arrival: the router picks its replica."""
        self.in_flight_samples.extend(self.router.in_flight)
        index = self.router.route(request, self.env.now)
        if request.request_id in self.routed_to:
            raise RuntimeError(f"request {request.request_id} routed twice")
        self.routed_to[request.request_id] = index
        if request.session_id is not None:
            self.session_of[request.request_id] = request.session_id
        self.replicas[index].add_request(request)

    def _answered(self, replica: Replica, request: Request) -> None:
        """A replica saw `request` end: the router's count falls; a session may go on."""
        self.router.finished(replica.index, request)
        self.arrivals.answered(request)

    def _end_arrivals(self) -> None:
        for replica in self.replicas:
            replica.mark_arrivals_done()

    def _num_output_tokens(self) -> int:
        return sum(replica.num_output_tokens() for replica in self.replicas)


class Fleet(RoutedFleet):
    """Pools of replicas (core/deployments.py) behind the router [cluster.router] names."""

    def __init__(
        self,
        scenario: Scenario,
        cluster: ClusterConfig,
        system: SystemConfig,
        *,
        check_invariants: bool = False,
    ) -> None:
        env = simpy.Environment()
        replicas = build_replicas(scenario, cluster, system, env, self._answered, check_invariants)
        config = cluster.router_for(system.name)
        block_tokens = config.prefix_block_tokens or replicas[0].capacity.block_size
        router = make_router(
            config,
            len(replicas),
            rng=np.random.default_rng((scenario.seed, _ROUTER_STREAM)),
            board=LoadBoard(replicas, config.report_interval_s),
            block_tokens=block_tokens,
            capacity_blocks=[
                r.capacity.num_gpu_blocks * r.capacity.block_size // block_tokens for r in replicas
            ],
        )
        super().__init__(scenario, env, replicas, router)


def run_fleet(
    scenario: Scenario,
    cluster: ClusterConfig,
    system: SystemConfig | None = None,
    *,
    check_invariants: bool = False,
) -> FleetRun:
    """Run `scenario`'s workload on `cluster` to completion or the stop time."""
    system = system or scenario.systems[0]
    return Fleet(scenario, cluster, system, check_invariants=check_invariants).run()

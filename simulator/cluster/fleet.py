"""A fleet in one SimPy environment: pools of replicas behind a router, sharing the clock.

    arrivals ──▶ router.route(request) ──▶ replica i: engine loop (plan, price, timeout, complete)
        ▲                                        │ a request ended
        └──── a session's next turn ◀────────────┘ (think time after its answer)

The arrival process is engine.simulate's; each replica is its loop (simulator/cluster/replica.py).
With one replica, whatever the router, the run is engine.simulate's event for event (tests pin
it on several built-in scenarios). Replicas that have nothing to do wait on their own event:
they cost nothing while others step.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Generator
from dataclasses import dataclass

import numpy as np
import simpy

from pagesim import __version__
from pagesim.simulator.cluster.host_memory import fleet_blocks_reason
from pagesim.simulator.cluster.replica import Replica
from pagesim.simulator.cluster.routers import LoadBoard, Router, make_router
from pagesim.simulator.core.cluster import ClusterConfig
from pagesim.simulator.core.config import Scenario, SystemConfig
from pagesim.simulator.core.deployments import pool_deployments
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.request import Request
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.workload.sessions import SessionSource
from pagesim.simulator.workload.stream import WorkloadStats, iter_requests

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
    # last arrival (engine.simulate's arrival window, over the whole fleet).
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


def run_fleet(
    scenario: Scenario,
    cluster: ClusterConfig,
    system: SystemConfig | None = None,
    *,
    check_invariants: bool = False,
) -> FleetRun:
    """Run `scenario`'s workload on `cluster` to completion or the stop time."""
    system = system or scenario.systems[0]
    env = simpy.Environment()
    routed_to: dict[int, int] = {}
    session_of: dict[int, int] = {}
    router_box: list[Router] = []

    def on_done(replica: Replica, request: Request) -> None:
        router_box[0].finished(replica.index, request)
        if sessions is not None:
            turn = sessions.next_turn(request)
            if turn is not None:
                env.process(send_later(turn))
            elif arrivals_ended[0] and sessions.num_open == 0:
                end_arrivals()

    replicas = build_replicas(scenario, cluster, system, env, on_done, check_invariants)
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
    router_box.append(router)
    rng = np.random.default_rng(scenario.seed)
    max_time = scenario.stop.max_time_s
    warmup_s = scenario.stop.warmup_s
    stats = WorkloadStats()
    samples: array[int] = array("q")

    max_seq_len = scenario.model.max_seq_len
    sessions: SessionSource | None = None
    if scenario.workload.sessions is not None:
        sessions = SessionSource(scenario.workload, max_seq_len, rng, scenario.seed, stats)
        stream = sessions.first_turns
    else:
        stream = iter_requests(scenario.workload, max_seq_len, rng, stats)
    arrivals_ended = [False]  # the stream is exhausted (later session turns may follow)

    window_tokens: list[int | None] = [None, None]

    def send(request: Request) -> None:
        tokens = sum(replica.num_output_tokens for replica in replicas)
        if window_tokens[0] is None and request.arrival_s >= warmup_s:
            window_tokens[0] = tokens
        window_tokens[1] = tokens
        samples.extend(router.in_flight)
        index = router.route(request, env.now)
        if request.request_id in routed_to:
            raise RuntimeError(f"request {request.request_id} routed twice")
        routed_to[request.request_id] = index
        if request.session_id is not None:
            session_of[request.request_id] = request.session_id
        replicas[index].add_request(request)

    def send_later(request: Request) -> Generator[simpy.Event, None, None]:
        assert sessions is not None
        if max_time is not None and request.arrival_s > max_time:
            sessions.drop(request)
            if arrivals_ended[0] and sessions.num_open == 0:
                end_arrivals()
            return
        if request.arrival_s > env.now:
            yield env.timeout(request.arrival_s - env.now)
        send(request)

    def end_arrivals() -> None:
        for replica in replicas:
            replica.mark_arrivals_done()

    def arrivals() -> Generator[simpy.Event, None, None]:
        for request in stream:
            if max_time is not None and request.arrival_s > max_time:
                break
            if request.arrival_s > env.now:
                yield env.timeout(request.arrival_s - env.now)
            if sessions is not None:
                sessions.start(request)
            send(request)
        arrivals_ended[0] = True
        if sessions is None or sessions.num_open == 0:
            end_arrivals()

    # The arrival process first, then the replicas: engine.simulate's order of creation, which
    # orders events that fall at one instant.
    env.process(arrivals())
    done = env.all_of([replica.start() for replica in replicas])
    env.run(until=done if max_time is None else max_time)
    provenance = stats.provenance()
    if sessions is not None:
        provenance["num_sessions"] = sessions.num_sessions
        provenance["num_session_turns"] = sessions.num_turns
        provenance["num_sessions_ended_at_max_seq_len"] = sessions.num_ended_at_max_len
    results = [replica.result(scenario.name, env.now, provenance) for replica in replicas]
    for result in results:
        result.provenance["pagesim_version"] = __version__
    return FleetRun(
        replicas,
        results,
        router,
        routed_to,
        env.now,
        stats,
        samples,
        session_of,
        (window_tokens[0], window_tokens[1]),
    )

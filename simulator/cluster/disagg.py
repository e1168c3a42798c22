"""Prefill/decode disaggregation (xPyD): prefill replicas compute prompts, a link carries each
prompt's KV to a decode replica, which decodes. One SimPy environment, as cluster/fleet.py.

    arrival ─▶ prefill router ─▶ prefill replica: the prompt, as a request of one output token
                                     │ (its blocks held until the KV has left)
               decode router ◀───────┘ when the prefill ends
                    │
                    ▼
             decode replica: blocks for the prompt allocated (or wait for them) ─▶ link:
             both replicas' ports, latency + bytes / bandwidth ─▶ prefill blocks freed,
             the request waits for admission; its first step computes the last prompt token
             (the first output token), then it decodes

As vLLM does it:

- The prefill leg is the request with `max_tokens = 1` (vLLM's disaggregated-serving proxy,
  `tests/v1/kv_connector/nixl_integration/toy_proxy_server.py` `send_request_to_service`, sets
  `max_tokens = 1` and `kv_transfer_params.do_remote_decode`); the proxy picks the decode
  replica when the prefill's response returns. The prefill replica frees the blocks only once
  they were read (connector `request_finished` -> delay_free_blocks).
- The decode leg: blocks for the prompt first, then the transfer, then WAITING with all but the
  last prompt token computed (policies/remote_kv.py, vLLM V1 WAITING_FOR_REMOTE_KVS).
- Speculative decoding runs on both sides with the same draft (scenario/disagg.py refuses
  pools whose model drafts differ, as vLLM's NIXL handshake does since PR #49230): the prefill
  step pays the draft's pass over the prompt (execution/speculative.py), the transfer carries
  the draft's KV too (cluster/link.py), and the decode replica verifies drafts.

When memory runs short:

- Prefill side: the request waits in its prefill replica's queue, as any request there waits
  for blocks (held blocks return when their transfers end).
- Decode side: the request waits, FIFO per decode replica, and keeps its prefill blocks, until
  that replica has room for its prompt (retried after each of its steps and each transfer that
  lands there). It is not re-routed: vLLM's proxy has sent it to that decode replica, whose
  scheduler keeps it waiting and retries in queue order; a re-route would need the router to
  learn of a refusal that vLLM does not report, and the decode router already prefers headroom
  (least-kv) when asked. Remote prompts also wait while a preempted request heads the decode
  replica's queue (it is owed memory first, as in vLLM's waiting order).

A request that no decode replica could ever hold is rejected at arrival with the reason; one
the prefill replica cannot hold is rejected by it (the same reason a single replica gives).
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import simpy

from pagesim.simulator.cluster.disagg_checks import (
    decode_memory_reason,
    policy_reason,
    workload_refusal,
)
from pagesim.simulator.cluster.disagg_replicas import DecodeReplica, PrefillReplica
from pagesim.simulator.cluster.fleet import _ROUTER_STREAM
from pagesim.simulator.cluster.host_memory import fleet_blocks_reason
from pagesim.simulator.cluster.link import Ports, transfer_bytes, transfer_s
from pagesim.simulator.cluster.replica import Replica
from pagesim.simulator.cluster.routers import LoadBoard, Router, make_router
from pagesim.simulator.core.cluster import ClusterConfig, PoolRole, RouterConfig
from pagesim.simulator.core.config import Scenario, SystemConfig
from pagesim.simulator.core.deployments import pool_deployments
from pagesim.simulator.core.draft import draft_model_spec, model_draft_key
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.link import LinkConfig
from pagesim.simulator.core.request import Request, RequestStatus
from pagesim.simulator.execution.frontend import frontend_of
from pagesim.simulator.metrics.request_log import RequestLog
from pagesim.simulator.policies.remote_kv import (
    can_receive,
    land_remote,
    release_held,
    reserve_remote,
)
from pagesim.simulator.workload.stream import WorkloadStats, iter_requests

# The decode router's RNG: its own stream, beside the prefill router's (fleet.py's tag).
_DECODE_ROUTER_STREAM = _ROUTER_STREAM + 1


@dataclass(slots=True)
class Handoff:
    """One request's way through the fleet (times in simulated seconds)."""

    request: Request
    prefill: int  # prefill replica index
    clone: Request  # the prefill leg (max_tokens = 1)
    decode: int | None = None  # decode replica index (within the decode replicas)
    prefill_done_s: float | None = None
    prefill_step_s: float = 0.0
    reserved_s: float | None = None
    transfer_start_s: float | None = None
    transfer_end_s: float | None = None
    num_tokens: int = 0  # prompt tokens sent (those the decode prefix cache lacked)
    num_bytes: int = 0


@dataclass(slots=True)
class DisaggRun:
    prefills: list[PrefillReplica]
    decodes: list[DecodeReplica]
    link: LinkConfig
    ports: Ports
    handoffs: dict[int, Handoff]  # request id -> its record (requests that reached a prefill)
    log: RequestLog  # every request, as the client sees it
    end_s: float
    workload: WorkloadStats
    window_tokens: tuple[int | None, int | None]
    routers: tuple[Router, Router]
    in_flight_samples: array[int] = field(default_factory=lambda: array("q"))


def check_disaggregated(cluster: ClusterConfig) -> LinkConfig:
    roles = {pool.role for pool in cluster.pools}
    names = ", ".join(f"{p.name} ({p.role.value})" for p in cluster.pools)
    if PoolRole.BOTH in roles:
        raise InputError(
            f"cluster.pools: a disaggregated fleet has only prefill and decode pools; got "
            f'{names}; set role = "prefill" or "decode" on every pool'
        )
    for role in (PoolRole.PREFILL, PoolRole.DECODE):
        if role not in roles:
            raise InputError(
                f"cluster.pools: a disaggregated fleet needs a {role.value} pool; got {names}"
            )
    if cluster.link is None:
        raise InputError("cluster.link: required with prefill/decode pools (preset or bandwidth)")
    return cluster.link


def run_disagg(
    scenario: Scenario,
    cluster: ClusterConfig,
    system: SystemConfig | None = None,
    *,
    check_invariants: bool = False,
) -> DisaggRun:
    """Run `scenario`'s workload on a disaggregated `cluster` to completion or the stop time."""
    link = check_disaggregated(cluster)
    refusal = workload_refusal(scenario.workload)
    if refusal is not None:
        raise InputError(f"workload.{refusal[0]}: {refusal[1]}")
    system = system or scenario.systems[0]
    pools = pool_deployments(scenario, cluster, system)
    for pool in pools:
        reason = policy_reason(pool.system)
        if reason is not None:
            raise InputError(f"cluster pool {pool.pool_name!r}: {reason}")
    too_big = fleet_blocks_reason(pools)
    if too_big is not None:
        raise InputError(f"cluster.pools: {too_big}")
    env = simpy.Environment()
    prefills: list[PrefillReplica] = []
    decodes: list[DecodeReplica] = []
    handoffs: dict[int, Handoff] = {}
    counts = {"outstanding": 0}  # sent to a prefill replica, not yet landed nor rejected
    arrivals_ended = [False]
    # A served fleet's front end (execution/frontend.py: P/D adds it, not V0's late delivery).
    log = RequestLog(
        scenario.slo, scenario.stop.warmup_s, frontend_of(scenario.execution, system).frontend_s
    )

    def settle_one() -> None:
        counts["outstanding"] -= 1
        maybe_end()

    def maybe_end() -> None:
        """No request can reach a decode replica any more: let them end when idle."""
        if arrivals_ended[0] and counts["outstanding"] == 0:
            for replica in decodes:
                replica.mark_arrivals_done()

    def on_prefill_done(replica: Replica, clone: Request) -> None:
        handoff = handoffs[clone.request_id]
        prefill_router.finished(handoff.prefill, clone)
        if clone.status is RequestStatus.REJECTED:
            handoff.request.reject(clone.rejection_reason or "rejected by its prefill", env.now)
            settle_one()
            return
        assert isinstance(replica, PrefillReplica)
        handoff.prefill_done_s = env.now
        handoff.prefill_step_s = replica.last_step_s
        index = decode_router.route(handoff.request, env.now)
        handoff.decode = index
        waiting[index].append(handoff)
        try_reserve(decodes[index])

    def on_decode_done(replica: Replica, request: Request) -> None:
        decode_router.finished(replica.index - len(prefills), request)

    def try_reserve(replica: DecodeReplica) -> None:
        queue = waiting[replica.index - len(prefills)]
        while queue and can_receive(replica.paged):
            handoff = queue[0]
            num_tokens = reserve_remote(replica.paged, handoff.request)
            if num_tokens is None:
                return
            queue.popleft()
            handoff.reserved_s = env.now
            handoff.num_tokens = num_tokens
            env.process(send_kv(handoff, replica))

    def send_kv(handoff: Handoff, decode: DecodeReplica) -> Generator[simpy.Event, None, None]:
        prefill = prefills[handoff.prefill]
        tp_p, tp_d = prefill.scenario.tensor_parallel, decode.scenario.tensor_parallel
        drafter = drafters[decode.system.name]  # the prefill side's agrees (scenario/disagg.py)
        num_tokens, dtype = handoff.num_tokens, scenario.kv_dtype
        draft_bytes = 0 if drafter is None else transfer_bytes(drafter, dtype, num_tokens, tp_d)
        num_bytes = transfer_bytes(scenario.model, dtype, num_tokens, tp_d) + draft_bytes
        handoff.num_bytes = num_bytes

        def seconds_after(waited: float) -> float:
            at_step_end = env.now == handoff.prefill_done_s
            return transfer_s(
                link,
                num_bytes,
                min(tp_p, tp_d),
                num_layers=scenario.model.num_kv_layers,
                overlap_step_s=handoff.prefill_step_s if at_step_end else 0.0,
                tail_bytes=draft_bytes,
            )

        held = env.process(ports.hold(prefill.index, decode.index, seconds_after))
        yield held
        taken = held.value  # (when the ports were taken, the seconds held)
        assert taken is not None
        handoff.transfer_start_s = float(taken[0])
        handoff.transfer_end_s = env.now
        release_held(prefill.paged, handoff.clone.request_id)
        prefill.wake()  # its freed blocks may admit a waiting prompt
        land_remote(decode.paged, handoff.request.request_id)
        decode.receive(handoff.request)
        settle_one()

    def on_decode_step(replica: DecodeReplica) -> None:
        if waiting[replica.index - len(prefills)]:
            try_reserve(replica)

    for pool in pools:
        kind = PrefillReplica if pool.role is PoolRole.PREFILL else DecodeReplica
        for _ in range(pool.count):
            on_done = on_prefill_done if pool.role is PoolRole.PREFILL else on_decode_done
            replica = kind(
                0,
                pool.pool_name,
                pool.scenario,
                pool.system,
                env,
                on_done,
                check_invariants=check_invariants,
            )
            if isinstance(replica, PrefillReplica):
                prefills.append(replica)
            else:
                replica.after_step = on_decode_step
                decodes.append(replica)
    for i, member in enumerate([*prefills, *decodes]):
        member.index = i  # prefill replicas first, then decode replicas: ports and report
    for member in [*prefills, *decodes]:
        if member.capacity.layout is not None:  # scenario/disagg.py says so for scenario files
            raise InputError(
                f"cluster pool {member.pool!r}: system {member.system.name!r} lays "
                f"{scenario.model.name}'s KV out in layer groups (sliding-window or state "
                "layers); a disaggregated fleet moves one block table per sequence: set "
                "hybrid_kv_cache_manager = false (window layers only) or run it colocated"
            )
    _check_decode_memory(decodes, scenario.model.max_seq_len)
    if len({model_draft_key(r.system.speculative) for r in [*prefills, *decodes]}) > 1:
        raise InputError(  # scenario/disagg.py says so for scenario files, naming the pools
            "cluster pools: the prefill and decode replicas' systems differ in their model "
            "draft (speculative method or draft_model); its KV travels with the prompt's, so "
            "give every pool the same [systems.speculative] method and draft_model"
        )
    drafters = {
        r.system.name: None
        if r.system.speculative is None
        else draft_model_spec(r.system.speculative, scenario.model)
        for r in decodes
    }
    waiting: list[deque[Handoff]] = [deque() for _ in decodes]
    ports = Ports(env, len(prefills) + len(decodes))
    prefill_router = _router(
        cluster.prefill_router or cluster.router, prefills, (scenario.seed, _ROUTER_STREAM)
    )
    decode_router = _router(
        cluster.decode_router or cluster.router, decodes, (scenario.seed, _DECODE_ROUTER_STREAM)
    )
    # One decode replica of each pool answers whether a request could ever run there.
    judges = list({replica.pool: replica for replica in decodes}.values())

    rng = np.random.default_rng(scenario.seed)
    max_time, warmup_s = scenario.stop.max_time_s, scenario.stop.warmup_s
    stats = WorkloadStats()
    window_tokens: list[int | None] = [None, None]
    samples: array[int] = array("q")

    def send(request: Request) -> None:
        tokens = sum(replica.num_output_tokens for replica in decodes)
        if window_tokens[0] is None and request.arrival_s >= warmup_s:
            window_tokens[0] = tokens
        window_tokens[1] = tokens
        log.add(request)
        reason = _decode_reason(judges, request)
        if reason is not None:
            request.reject(reason, env.now)
            return
        samples.extend(prefill_router.in_flight)
        index = prefill_router.route(request, env.now)
        clone = replace(request, output_len=1, history=[])
        handoffs[request.request_id] = Handoff(request, index, clone)
        counts["outstanding"] += 1
        prefills[index].add_request(clone)

    def arrivals() -> Generator[simpy.Event, None, None]:
        for request in iter_requests(scenario.workload, scenario.model.max_seq_len, rng, stats):
            if max_time is not None and request.arrival_s > max_time:
                break
            if request.arrival_s > env.now:
                yield env.timeout(request.arrival_s - env.now)
            send(request)
        arrivals_ended[0] = True
        for replica in prefills:
            replica.mark_arrivals_done()
        maybe_end()

    env.process(arrivals())
    done = env.all_of([replica.start() for replica in [*prefills, *decodes]])
    env.run(until=done if max_time is None else max_time)
    return DisaggRun(
        prefills,
        decodes,
        link,
        ports,
        handoffs,
        log,
        env.now,
        stats,
        (window_tokens[0], window_tokens[1]),
        (prefill_router, decode_router),
        samples,
    )


def _router(config: RouterConfig, replicas: Sequence[Replica], seed: tuple[int, int]) -> Router:
    block_tokens = config.prefix_block_tokens or replicas[0].capacity.block_size
    return make_router(
        config,
        len(replicas),
        rng=np.random.default_rng(seed),
        board=LoadBoard(replicas, config.report_interval_s),
        block_tokens=block_tokens,
        capacity_blocks=[
            r.capacity.num_gpu_blocks * r.capacity.block_size // block_tokens for r in replicas
        ],
    )


def _decode_reason(judges: list[DecodeReplica], request: Request) -> str | None:
    # (Requests of several sequences never get here: run_disagg refuses such a workload.)
    for replica in judges:
        reason = replica.paged.rejection_reason(request)
        if reason is not None:
            return f"decode pool {replica.pool!r}: {reason}"
    return None


def _check_decode_memory(decodes: list[DecodeReplica], max_seq_len: int) -> None:
    """A decode pool must hold one request of the model's maximum length."""
    for replica in {r.pool: r for r in decodes}.values():
        reason = decode_memory_reason(replica.capacity, replica.system, max_seq_len)
        if reason is not None:
            raise InputError(f"decode pool {replica.pool!r} {reason}")

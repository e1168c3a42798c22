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

from pagesim.simulator.cluster.arrivals import Arrivals, run
from pagesim.simulator.cluster.disagg_checks import (
    check_replicas,
    link_of,
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
from pagesim.simulator.core.draft import draft_model_spec
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
from pagesim.simulator.workload.stream import WorkloadStats

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


class DisaggFleet:
    """Prefill and decode replicas, their routers and the link between them, fed by the run's
    arrival process (arrivals.py). Each request's way is its `Handoff`; a decode replica's
    queue of prompts waiting for its memory is `waiting[i]`; `num_outstanding` counts the
    requests sent to a prefill replica and not yet landed on a decode replica nor rejected
    (the decode replicas may end only once it is 0 and no request will arrive)."""

    def __init__(
        self,
        scenario: Scenario,
        cluster: ClusterConfig,
        system: SystemConfig,
        *,
        check_invariants: bool = False,
    ) -> None:
        self.link = link_of(cluster)
        refusal = workload_refusal(scenario.workload)
        if refusal is not None:
            raise InputError(f"workload.{refusal[0]}: {refusal[1]}")
        self.scenario = scenario
        self.env = env = simpy.Environment()
        self.prefills, self.decodes = _build_replicas(
            scenario, cluster, system, env, self, check_invariants
        )
        self.drafters = {
            r.system.name: None
            if r.system.speculative is None
            else draft_model_spec(r.system.speculative, scenario.model)
            for r in self.decodes
        }
        # request id -> its way through the fleet (the requests that reached a prefill replica)
        self.handoffs: dict[int, Handoff] = {}
        self.waiting: list[deque[Handoff]] = [deque() for _ in self.decodes]
        self.num_outstanding = 0
        self.ports = Ports(env, len(self.prefills) + len(self.decodes))
        self.prefill_router = _router(
            cluster.prefill_router or cluster.router,
            self.prefills,
            (scenario.seed, _ROUTER_STREAM),
        )
        self.decode_router = _router(
            cluster.decode_router or cluster.router,
            self.decodes,
            (scenario.seed, _DECODE_ROUTER_STREAM),
        )
        # One decode replica of each pool answers whether a request could ever run there.
        self.judges = list({replica.pool: replica for replica in self.decodes}.values())
        # A served fleet's front end (execution/frontend.py: P/D adds it, not V0's late delivery).
        frontend_s = frontend_of(scenario.execution, system).frontend_s
        self.log = RequestLog(scenario.slo, scenario.stop.warmup_s, frontend_s)
        self.in_flight_samples: array[int] = array("q")  # the prefill router's, at arrivals
        self.arrivals = Arrivals(
            env, scenario, self._send, self._end_arrivals, count_tokens=self._num_output_tokens
        )

    def run(self) -> DisaggRun:
        """Run to completion or the stop time."""
        replicas = [*self.prefills, *self.decodes]
        end_s = run(self.env, self.arrivals, replicas, self.scenario.stop.max_time_s)
        return DisaggRun(
            self.prefills,
            self.decodes,
            self.link,
            self.ports,
            self.handoffs,
            self.log,
            end_s,
            self.arrivals.stats,
            self.arrivals.window_tokens,
            (self.prefill_router, self.decode_router),
            self.in_flight_samples,
        )

    # --- arrivals --------------------------------------------------------------------------

    def _send(self, request: Request) -> None:
        """An arrival: rejected if no decode pool could hold it, else its prompt (a request of
        one output token) goes to a prefill replica."""
        self.log.add(request)
        reason = _decode_reason(self.judges, request)
        if reason is not None:
            request.reject(reason, self.env.now)
            return
        self.in_flight_samples.extend(self.prefill_router.in_flight)
        index = self.prefill_router.route(request, self.env.now)
        clone = replace(request, output_len=1, history=[])
        self.handoffs[request.request_id] = Handoff(request, index, clone)
        self.num_outstanding += 1
        self.prefills[index].add_request(clone)

    def _end_arrivals(self) -> None:
        for replica in self.prefills:
            replica.mark_arrivals_done()
        self._maybe_end()

    def _maybe_end(self) -> None:
        """No request can reach a decode replica any more: let them end when idle."""
        if self.arrivals.is_exhausted and self.num_outstanding == 0:
            for replica in self.decodes:
                replica.mark_arrivals_done()

    def _settle_one(self) -> None:
        """A request sent to a prefill replica landed on a decode replica or was rejected."""
        self.num_outstanding -= 1
        self._maybe_end()

    def _num_output_tokens(self) -> int:
        return sum(replica.num_output_tokens() for replica in self.decodes)

    # --- the replicas' hooks ---------------------------------------------------------------

    def prefill_done(self, replica: Replica, clone: Request) -> None:
        """A prefill replica finished (or rejected) a prompt: the decode router picks where
        its KV goes, and the transfer starts once that replica has room."""
        handoff = self.handoffs[clone.request_id]
        self.prefill_router.finished(handoff.prefill, clone)
        if clone.status is RequestStatus.REJECTED:
            reason = clone.rejection_reason or "rejected by its prefill"
            handoff.request.reject(reason, self.env.now)
            self._settle_one()
            return
        assert isinstance(replica, PrefillReplica)
        handoff.prefill_done_s = self.env.now
        handoff.prefill_step_s = replica.last_step_s
        index = self.decode_router.route(handoff.request, self.env.now)
        handoff.decode = index
        self.waiting[index].append(handoff)
        self._try_reserve(self.decodes[index])

    def decode_done(self, replica: Replica, request: Request) -> None:
        self.decode_router.finished(replica.index - len(self.prefills), request)

    def decode_stepped(self, replica: DecodeReplica) -> None:
        """After each decode step: memory it freed may take waiting prompts."""
        if self.waiting[replica.index - len(self.prefills)]:
            self._try_reserve(replica)

    # --- the transfer ----------------------------------------------------------------------

    def _try_reserve(self, replica: DecodeReplica) -> None:
        """The waiting prompts of `replica`, in order, while it has room: blocks reserved, the
        transfer started."""
        queue = self.waiting[replica.index - len(self.prefills)]
        while queue and can_receive(replica.paged):
            handoff = queue[0]
            num_tokens = reserve_remote(replica.paged, handoff.request)
            if num_tokens is None:
                return
            queue.popleft()
            handoff.reserved_s = self.env.now
            handoff.num_tokens = num_tokens
            self.env.process(self._send_kv(handoff, replica))

    def _send_kv(
        self, handoff: Handoff, decode: DecodeReplica
    ) -> Generator[simpy.Event, None, None]:
        """The prompt's KV (and its draft's) over the link, both replicas' ports held; then the
        prefill replica frees its blocks and the decode replica takes the request."""
        prefill = self.prefills[handoff.prefill]
        scenario = self.scenario
        tp_p, tp_d = prefill.scenario.tensor_parallel, decode.scenario.tensor_parallel
        # The prefill side's draft agrees (scenario/disagg.py).
        drafter = self.drafters[decode.system.name]
        num_tokens, dtype = handoff.num_tokens, scenario.kv_dtype
        draft_bytes = 0 if drafter is None else transfer_bytes(drafter, dtype, num_tokens, tp_d)
        num_bytes = transfer_bytes(scenario.model, dtype, num_tokens, tp_d) + draft_bytes
        handoff.num_bytes = num_bytes
        env, link = self.env, self.link

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

        held = env.process(self.ports.hold(prefill.index, decode.index, seconds_after))
        yield held
        taken = held.value  # (when the ports were taken, the seconds held)
        assert taken is not None
        handoff.transfer_start_s = float(taken[0])
        handoff.transfer_end_s = env.now
        release_held(prefill.paged, handoff.clone.request_id)
        prefill.wake()  # its freed blocks may admit a waiting prompt
        land_remote(decode.paged, handoff.request.request_id)
        decode.receive(handoff.request)
        self._settle_one()


def run_disagg(
    scenario: Scenario,
    cluster: ClusterConfig,
    system: SystemConfig | None = None,
    *,
    check_invariants: bool = False,
) -> DisaggRun:
    """Run `scenario`'s workload on a disaggregated `cluster` to completion or the stop time."""
    system = system or scenario.systems[0]
    return DisaggFleet(scenario, cluster, system, check_invariants=check_invariants).run()


def _build_replicas(
    scenario: Scenario,
    cluster: ClusterConfig,
    system: SystemConfig,
    env: simpy.Environment,
    fleet: DisaggFleet,
    check_invariants: bool,
) -> tuple[list[PrefillReplica], list[DecodeReplica]]:
    """The pools' replicas, prefill replicas first (their fleet indices: ports and report),
    each told of `fleet`'s hooks; refused with the reason where a pool cannot take part."""
    pools = pool_deployments(scenario, cluster, system)
    for pool in pools:
        reason = policy_reason(pool.system)
        if reason is not None:
            raise InputError(f"cluster pool {pool.pool_name!r}: {reason}")
    too_big = fleet_blocks_reason(pools)
    if too_big is not None:
        raise InputError(f"cluster.pools: {too_big}")
    prefills: list[PrefillReplica] = []
    decodes: list[DecodeReplica] = []
    for pool in pools:
        for _ in range(pool.count):
            args = (0, pool.pool_name, pool.scenario, pool.system, env)
            if pool.role is PoolRole.PREFILL:
                prefill = PrefillReplica(
                    *args, fleet.prefill_done, check_invariants=check_invariants
                )
                prefills.append(prefill)
            else:
                decode = DecodeReplica(*args, fleet.decode_done, check_invariants=check_invariants)
                decode.after_step = fleet.decode_stepped
                decodes.append(decode)
    for i, member in enumerate([*prefills, *decodes]):
        member.index = i  # prefill replicas first, then decode replicas: ports and report
    check_replicas(prefills, decodes, scenario)
    return prefills, decodes


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

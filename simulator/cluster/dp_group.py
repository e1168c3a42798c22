"""A DP attention + expert-parallel group (vLLM `--data-parallel-size d --enable-expert-parallel`,
d > 1): every DP rank simulated, each with its own scheduler, KV cache and queue (a `Replica`,
cluster/replica.py), lock-stepped at the MoE layers.

    arrivals (arrivals.py, a fleet's) ──▶ DP load balancer ──▶ rank r's queue
    each step: every rank plans; ranks with work run it, the others a dummy batch;
               the step lasts as long as the slowest rank (+ the hottest expert GPU's excess);
               every rank completes its plan at the same instant

- The router: vLLM's DP client sends each request to the engine with the lowest score
  `4 x waiting + running` (v0.11: vllm/v1/engine/core_client.py DPLBAsyncMPClient
  get_core_engine_for_request; ties to the lowest rank), reading the counts the DP coordinator
  publishes at most every 100 ms (v1/engine/coordinator.py, min_stats_update_interval_ms) and
  adding one waiting request to its chosen engine between publications.
- Lock-step: the MoE layers' collectives need every rank, so an engine with nothing to run while
  others do executes a dummy batch (v1/engine/core.py DPEngineCoreProc.run_busy_loop ->
  execute_dummy_batch, which runs `_dummy_run(1)`); every rank's step is padded to the group's
  largest batch (gpu_model_runner.get_dp_padding). Here the group's step lasts the longest rank's
  priced step: each rank's dense layers are priced at its own tokens (the largest batch's rank,
  usually the slowest, is priced exactly), its MoE layers see the group's tokens, and the idle
  ranks' dummy steps are counted (`dp_dummy_steps`), never longer than the slowest.
- The MoE layer (execution/all_to_all.py, execution/expert_load.py): the experts every GPU reads
  are those the group's tokens touch; dispatch + combine by the configured backend; and, by an
  **estimate**, the hottest expert GPU computes `hot_share` x the mean GPU's expert tokens: the
  excess over the slowest rank's own tokens is added at the expert GEMMs' compute peak (an upper
  bound where the expert GEMMs are bound by their weight reads).

No decode fast path (simulator/fastpath/): the ranks step one by one, together. Each rank is a
replica (replica.py) whose step ends at its `_finish_step` seam, as a lone replica's does.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

import simpy

from pagesim.simulator.cluster.arrivals import Loop
from pagesim.simulator.cluster.fleet import RoutedFleet
from pagesim.simulator.cluster.replica import Replica, ReplicaStallError
from pagesim.simulator.cluster.result import fleet_result
from pagesim.simulator.cluster.routers import Router
from pagesim.simulator.core.config import ExecutionKind, Scenario, SystemConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.plan import StepCost, StepPlan, step_cost
from pagesim.simulator.core.request import Request
from pagesim.simulator.execution.all_to_all import AllToAll
from pagesim.simulator.execution.expert_load import placement_hot_share
from pagesim.simulator.execution.moe_cost import ExpertTraffic
from pagesim.simulator.execution.roofline import RooflineModel
from pagesim.simulator.metrics.result import RunResult

STATS_INTERVAL_S = 0.1  # vLLM's DP coordinator: counts published at most every 100 ms
WAITING_WEIGHT = 4  # v0.11 core_client.py: score = waiting * 4 + running


class GroupExpertTraffic(ExpertTraffic):
    """A rank's routed experts as the group's step sets them: the experts the whole group's
    tokens touch, and the step's dispatch + combine (one figure for every rank)."""

    group_tokens = 0
    step_dispatch_s = 0.0

    def experts_touched_per_layer(self, num_tokens: int) -> float:
        return self.touched(self.group_tokens) if num_tokens else 0.0

    def dispatch_s(self, num_tokens: int) -> float:
        return self.step_dispatch_s if num_tokens else 0.0


class DPRank(Replica):
    """One DP rank: a replica whose loop the group runs (no fast path of its own)."""

    def arm(self) -> simpy.Event:
        """The event an arrival or a wake-up triggers (a fresh one once used)."""
        if self._wakeup.triggered:
            self._wakeup = self._env.event()
        return self._wakeup

    def price(self, plan: StepPlan) -> StepCost:
        return self._price_step(plan)

    def finish(self, start_s: float, plan: StepPlan, cost: StepCost) -> None:
        """The group's step ended: apply this rank's plan, record it (`cost` includes its wait
        for the slowest rank), tell the router of the requests that ended."""
        self._finish_step(start_s, plan, cost)


class DPLoadBalancer(Router):
    """vLLM's DP load balancing over the ranks' published counts (module docstring)."""

    def __init__(self, ranks: list[DPRank]) -> None:
        super().__init__(len(ranks))
        self._ranks = ranks
        self._counts: list[list[int]] = []  # [waiting, running] per rank, as last published
        self._published_s: float | None = None

    def choose(self, request: Request, now_s: float) -> int:
        if self._published_s is None or now_s - self._published_s >= STATS_INTERVAL_S:
            self._published_s = now_s
            self._counts = []
            for rank in self._ranks:
                running, waiting, _swapped = rank.scheduler.queue_lengths()
                self._counts.append([waiting, running])
        scores = [WAITING_WEIGHT * w + r for w, r in self._counts]
        index = scores.index(min(scores))
        self._counts[index][0] += 1  # the client's own count until the next publication
        return index


class DPGroup(RoutedFleet):
    """The ranks behind their load balancer, fed by the run's arrival process (a fleet's:
    fleet.py), and one lock-stepped loop in place of the ranks' own."""

    def __init__(
        self, scenario: Scenario, system: SystemConfig, env: simpy.Environment, check: bool
    ) -> None:
        d, t = scenario.data_parallel, scenario.tensor_parallel
        self.ranks = [
            DPRank(
                i,
                "dp",
                scenario,
                system,
                env,
                self._answered,
                check_invariants=check,
                fast_path=False,
            )
            for i in range(d)
        ]
        super().__init__(scenario, env, list(self.ranks), DPLoadBalancer(self.ranks))
        model, moe, cfg = scenario.model, scenario.model.moe, scenario.wide_ep
        assert moe is not None
        first = self.ranks[0].execution
        assert isinstance(first, RooflineModel), "a DP group is priced by the roofline"
        for rank in self.ranks:
            roof = rank.execution
            assert isinstance(roof, RooflineModel) and roof.experts is not None
            roof.experts = GroupExpertTraffic(
                model,
                roof.layout,
                roof.split.expert_bytes,
                scenario.gpu.interconnect,
                scenario.execution.routing_skew,
            )
        self.all_to_all = AllToAll(
            cfg.all2all_backend,
            d * t,
            cfg.gpus_per_node,
            model.hidden_size,
            moe.num_experts,
            moe.experts_per_token,
            model.num_layers - model.num_dense_mlp_layers,
            scenario.gpu.interconnect,
            cfg.scaleout_gbps * 1e9,
        )
        self.hot_share = placement_hot_share(
            moe.num_experts,
            moe.experts_per_token,
            d * t,
            scenario.execution.routing_skew,
            scenario.seed,
            cfg.eplb,
            cfg.redundant_experts,
        )
        split = first.split
        self._expert_s_per_token = split.expert_flops_per_token / (
            split.expert_peak.flops * first.factors.gemm_efficiency
        )
        self.num_steps = 0
        self.dummy_steps = [0] * d
        self.wait_s = 0.0  # ranks' time spent waiting for a slower rank, summed
        self.a2a_bytes = 0.0
        self.a2a_s = 0.0
        self.hot_excess_s = 0.0

    def loops(self) -> Sequence[Loop]:
        return [self]  # the ranks step together (`_lock_step`), not each on its own

    def start(self) -> simpy.Process:
        return self.env.process(self._lock_step())

    def _lock_step(self) -> Generator[simpy.Event, None, None]:
        env, ranks = self.env, self.ranks
        while True:
            plans = [rank.scheduler.schedule(env.now) for rank in ranks]
            busy = [i for i, plan in enumerate(plans) if not plan.is_empty]
            if not busy:
                if not (yield from self._idle()):
                    return
                continue
            tokens = [p.num_prefill_tokens + p.num_decode_tokens for p in plans]
            step_s = self._set_group(tokens)
            costs = {i: ranks[i].price(plans[i]) for i in busy}
            slowest = max(busy, key=lambda i: costs[i].duration_s)
            excess = self.hot_share * sum(tokens) / len(tokens) - tokens[slowest]
            hot_s = max(0.0, excess) * self._expert_s_per_token
            duration = costs[slowest].duration_s + hot_s
            self.num_steps += 1
            self.a2a_s += step_s
            self.a2a_bytes += self.all_to_all.step_bytes(tokens, self.scenario.tensor_parallel)
            self.hot_excess_s += hot_s
            for i in range(len(ranks)):
                if i not in costs:
                    self.dummy_steps[i] += 1
            start = env.now
            yield env.timeout(duration)
            for i in busy:
                cost = costs[i]
                wait = duration - cost.duration_s
                self.wait_s += wait
                waited = step_cost(cost.compute_s + wait, *cost[1:5])
                ranks[i].finish(start, plans[i], waited)

    def _set_group(self, tokens: list[int]) -> float:
        """Tell every rank's MoE layers the group's step; the dispatch + combine seconds."""
        a2a_s = self.all_to_all.step_s(tokens, self.hot_share, self.scenario.tensor_parallel)
        total = sum(tokens)
        for rank in self.ranks:
            experts = rank.execution.experts  # type: ignore[attr-defined]
            experts.group_tokens = total
            experts.step_dispatch_s = a2a_s
        return a2a_s

    def _idle(self) -> Generator[simpy.Event, None, bool]:
        """Nothing to run anywhere: wait for an arrival or a wake-up; False when all is done."""
        env = self.env
        wakes = [r.scheduler.next_wakeup_s(env.now) for r in self.ranks]
        ahead = [w - env.now for w in wakes if w is not None and w > env.now]
        if all(r.scheduler.arrivals_done for r in self.ranks):
            if not any(r.scheduler.has_pending for r in self.ranks):
                return False
            if not ahead:
                raise ReplicaStallError(
                    f"DP group: stalled at t={env.now:.3f}s with requests held and nothing "
                    "schedulable (a policy bug)"
                )
        waits: list[simpy.Event] = [r.arm() for r in self.ranks]
        if ahead:
            waits.append(env.timeout(min(ahead)))
        yield env.any_of(waits)
        return True

    def describe(self) -> dict[str, object]:
        cfg = self.scenario.wide_ep
        return {
            "router": "vLLM DP load balancing: least 4 x waiting + running (v0.11 core_client.py),"
            " counts published every 100 ms",
            "lock_step": "slowest rank sets the step; idle ranks run dummy batches "
            "(v1/engine/core.py execute_dummy_batch)",
            "all2all_backend": cfg.all2all_backend.value,
            "all2all_source": "execution/all_to_all.py (DeepEP's published bandwidths)",
            "eplb": cfg.eplb,
            "moe_hot_share": self.hot_share,
            "moe_hot_share_note": "estimate: Zipf routing_skew with a seeded expert ranking "
            "(execution/expert_load.py)",
            "gpus_per_node": cfg.gpus_per_node,
            "scaleout_gbps": cfg.scaleout_gbps,
        }

    def summary(self, end_s: float) -> dict[str, float | int | str | None]:
        n, d = self.num_steps, len(self.ranks)
        busy = end_s * d
        tokens = sum(rank.scheduler.num_output_tokens for rank in self.ranks)
        gpus = d * self.scenario.tensor_parallel
        return {
            "output_tok_s_per_gpu": tokens / end_s / gpus if end_s > 0 else None,
            "dp_size": d,
            "moe_hot_share": self.hot_share,
            "dp_group_steps": n,
            "dp_dummy_steps": sum(self.dummy_steps),
            "dp_sync_wait_share": self.wait_s / busy if busy > 0 else None,
            "all2all_s_per_step": self.a2a_s / n if n else None,
            "all2all_bytes_per_step": self.a2a_bytes / n if n else None,
            "moe_hot_excess_s_per_step": self.hot_excess_s / n if n else None,
        }


def simulate_dp_group(
    scenario: Scenario, system: SystemConfig | None = None, *, check_invariants: bool = False
) -> RunResult:
    """engine.simulate for data_parallel > 1: the group's run as one result, its ranks reported
    as a fleet's replicas are (cluster/result.py), with the group's `dp_*` and `all2all_*`."""
    system = system or scenario.systems[0]
    group = DPGroup(scenario, system, simpy.Environment(), check_invariants)
    run = group.run()
    result = fleet_result(run, scenario.name, system.name, scenario.stop.warmup_s)
    result.summary.update(group.summary(run.end_s))
    result.provenance["dp_group"] = group.describe()
    return result


def unsupported(scenario: Scenario, other_mode: bool) -> None:
    """Refuse what a DP group does not run with (a fleet, sessions, a step hook, a measured
    execution model, a block map) rather than run something else silently."""
    if other_mode:
        raise InputError(
            f"scenario {scenario.name!r}: model.data_parallel {scenario.data_parallel} runs one "
            "DP group on its own; valid with it: no [cluster], no [workload.sessions], no step "
            "hook, measured execution model or block map"
        )
    if scenario.execution.kind is not ExecutionKind.ROOFLINE:
        raise InputError(
            f"scenario {scenario.name!r}: execution.kind: a DP group (model.data_parallel "
            f"{scenario.data_parallel}) is priced by the roofline; valid: roofline"
        )

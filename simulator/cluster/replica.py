"""One serving replica: the engine's SimPy step loop, with its own scheduler, KV cache, execution
model and recorder. Every run feeds replicas from the one arrival process (arrivals.py):
engine.simulate a single one, a fleet several behind a router (fleet.py, disagg.py). The step
loop and the run's provenance live here only; the decode fast path, where it applies, enters
through one call (simulator/fastpath/attach.py) and one object the loop asks for runs.

The loop: plan, price, `yield env.timeout`, complete; idle until an arrival or a wake-up. An idle
replica waits on its own event and costs nothing per step of the others. In a fleet, after each
step it looks for requests that finished (only when its pending count fell) so that the router's
count of requests in flight stays a count a real router keeps: it sees each response end.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING

import simpy

from pagesim.simulator.cluster.pipeline_loop import PipelineLoop
from pagesim.simulator.core.config import Scenario, SystemConfig
from pagesim.simulator.core.defaults import (
    HOST_OVERHEAD_KEY,
    era_notes,
    era_text,
    resolve_runnable,
    system_knobs,
)
from pagesim.simulator.core.plan import StepCost, StepPlan
from pagesim.simulator.core.request import Request
from pagesim.simulator.core.scheduler import Scheduler
from pagesim.simulator.execution.factory import make_execution_model
from pagesim.simulator.execution.frontend import frontend_of
from pagesim.simulator.execution.model import ExecutionModel
from pagesim.simulator.execution.pipeline_model import PipelineModel
from pagesim.simulator.fastpath.attach import attach
from pagesim.simulator.kv.block_budget import kv_capacity
from pagesim.simulator.metrics.energy import ReplicaEnergy, measure
from pagesim.simulator.metrics.energy import replica_keys as energy_keys
from pagesim.simulator.metrics.power import power_profile
from pagesim.simulator.metrics.recorder import Recorder
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.policies.factory import make_scheduler
from pagesim.simulator.policies.offload import attach_offload, offload_summary
from pagesim.simulator.policies.paged import PagedScheduler

if TYPE_CHECKING:  # imported by the runs that record one only
    from pagesim.simulator.metrics.block_map import BlockMapRecorder


class ReplicaStallError(RuntimeError):
    """A replica holds requests but can make no progress: a policy bug, never hidden."""


ExecutionFactory = Callable[[Scenario, SystemConfig, Scheduler], ExecutionModel]


class Replica:
    """`index` in the fleet; `scenario` already carries this replica's GPU and TP degree.

    engine.simulate runs its single replica through this class too, with the hooks only it
    uses: `on_step(now)` after every step, `execution_factory` in place of the scenario's
    execution model, `fast_path` (simulator/fastpath/attach.py says when it is on), a
    `block_map` recorder (simulator/metrics/block_map.py) told of every step; and `on_done`
    None, since no router counts its requests in flight.

    Its state: `scheduler`, `execution`, `recorder`, `capacity` (what it holds); `_runs` (the
    fast path's runs of pure steps, or None); `_in_flight` and `_num_pending` (what the router
    still counts). A kind of replica (disagg_replicas.py; a DP rank, dp_group.py) or a
    pipelined loop (pipeline_loop.py, which runs in place of `_run` where the execution model
    has pipeline stages) uses it at named seams, not in the loop: `_price_step` (what a step
    costs), `_finish_step` (a step's end), `_idle_event` (what to wait on, or the end),
    `_settle` (requests that ended), `waits_on_others` (idle, not stalled) and
    `takes_windows` (whether runs of pure steps may be settled ahead).
    """

    def __init__(
        self,
        index: int,
        pool: str,
        scenario: Scenario,
        system: SystemConfig,
        env: simpy.Environment,
        on_done: Callable[[Replica, Request], None] | None,
        *,
        check_invariants: bool = False,
        on_step: Callable[[float], None] | None = None,
        execution_factory: ExecutionFactory | None = None,
        fast_path: bool | None = None,
        block_map: BlockMapRecorder | None = None,
    ) -> None:
        resolved = resolve_runnable(system, scenario)
        system = resolved.system
        self.index, self.pool, self.system, self.scenario = index, pool, system, scenario
        self.capacity = kv_capacity(scenario, system)
        self.scheduler = make_scheduler(
            system, scenario.model.max_seq_len, self.capacity, scenario.seed, index
        )
        # a KV offload tier in CPU memory ([systems.kv_offload]; policies/offload.py)
        attach_offload(
            self.scheduler,
            system,
            self.capacity,
            scenario.tensor_parallel,
            scenario.gpu.host_link_bps,
        )
        if execution_factory is None:
            self.execution = make_execution_model(scenario, system)
        else:
            self.execution = execution_factory(scenario, system, self.scheduler)
        if block_map is not None and fast_path:
            raise ValueError("a block map reads every step's tables: it needs fast_path off")
        # A replica with pipeline stages runs its batches through cluster/pipeline_loop.py.
        self._pipeline = pipeline_loop(self, env)  # None without pipeline stages
        # The client's view of this system (served or offline, V0's late delivery).
        self.frontend = frontend = frontend_of(scenario.execution, system)
        self.recorder = Recorder(
            scenario.gpu,
            scenario.slo,
            scenario.stop.warmup_s,
            self.capacity.block_bytes,
            frontend_s=frontend.frontend_s,
            delivers_late=frontend.delivers_late,
            delivery_after_s=frontend.delivery_after_s,
        )
        # What prices a step in the loop: the execution model's, unless a kind of replica
        # watches each step's cost (disagg_replicas.PrefillReplica).
        self._price_step: Callable[[StepPlan], StepCost] = self.execution.price
        # The decode fast path (simulator/fastpath/), where it applies: the runs of pure decode
        # steps this loop then settles in one event each.
        is_watched = (
            on_step is not None
            or check_invariants
            or execution_factory is not None
            or block_map is not None
        )
        self._runs = attach(
            env,
            self.scheduler,
            self.execution,
            self.recorder.steps,
            scenario.gpu,
            # the fast path's decode windows know one batch at a time, not a pipe of them
            requested=False if self._pipeline is not None else fast_path,
            is_watched=is_watched,
            takes_runs=self.takes_windows,
        )
        self._on_step = on_step
        self._block_map = block_map
        if block_map is not None:  # its reader imported by the runs that record one only
            from pagesim.simulator.cluster.block_reader import read_frame

            block_map.attach(self.scheduler, read_frame, self.capacity, system, scenario.name)
        self._provenance_sources = _defaults_from(resolved.sources, self.execution)
        self._warmup_s = scenario.stop.warmup_s
        self._env = env
        self._on_done = on_done
        self._check = check_invariants
        self._wakeup = env.event()
        self._in_flight: list[Request] = []  # routed here, not yet seen done
        self._num_pending = 0  # the scheduler's pending count after the last look
        self.num_routed = 0
        self.energy: ReplicaEnergy | None = None  # set by `result` (metrics/energy.py)

    # Runs of pure decode steps in one event (below): a disaggregated replica's own hooks
    # look at every step, so its kinds set this off.
    takes_windows = True

    def start(self) -> simpy.Process:
        """Start the loop (after the arrival process: the order arrivals.run creates them)."""
        if self._pipeline is not None:  # pipeline stages: cluster/pipeline_loop.py
            return self._env.process(self._pipeline.run())
        process = self._env.process(self._run())
        if self._runs is not None:
            self._runs.process = process
        return process

    @property
    def num_steps_ahead(self) -> int:
        """Steps applied from runs of pure steps (the rest one by one)."""
        return 0 if self._runs is None else self._runs.num_steps_ahead

    @property
    def num_cuts(self) -> int:
        """Runs of pure steps an arrival ended early."""
        return 0 if self._runs is None else self._runs.num_cuts

    def catch_up(self) -> None:
        """Apply an open run's steps that ended before now (an outside look's view)."""
        if self._runs is not None:
            self._runs.catch_up()

    # --- what a router may read (routers.py says which one reads what) ----------------------

    @property
    def num_in_flight(self) -> int:
        """Requests routed here whose response has not ended: the router's own count."""
        return len(self._in_flight)

    def kv_used_share(self) -> float:
        """Share of KV slots not free: what vLLM reports as its KV-cache usage gauge."""
        self.catch_up()
        memory = self.scheduler.memory_breakdown()
        total = self.scheduler.kv_capacity_slots
        return 1.0 - memory.free_slots / total if total else 0.0

    # --- feeding it ---------------------------------------------------------------------------

    def num_output_tokens(self) -> int:
        """Output tokens the replica has produced by now (an open run's steps that ended by
        now counted, not applied: each gives every member one token). A method, not a
        property: each arrival reads it, and a property read costs more in Python 3.11."""
        runs = self._runs
        tokens = self.scheduler.num_output_tokens
        return tokens if runs is None else tokens + runs.extra_output_tokens()

    def add_request(self, request: Request) -> None:
        tokens, now_s = self.scheduler.num_output_tokens, self._env.now  # (read once each)
        if self._runs is not None:  # the next step may admit it; its steps that ended counted
            tokens += self._runs.cut(now_s)
        self.num_routed += 1
        # The arrival window's edges for the token rate, as arrivals.py marks a fleet's: its
        # first in-window arrival opens it, each arrival moves its end (the last one's stays).
        recorder = self.recorder
        edges = recorder.window_tokens  # (`mark_window_edge`, inlined: every arrival)
        if edges[0] is None and request.arrival_s >= self._warmup_s:
            edges[0] = tokens
        edges[1] = tokens
        recorder.requests.add(request)  # (`recorder.add_request`, inlined: every arrival)
        scheduler = self.scheduler
        if self._on_done is None:  # nobody routes on its answers (engine.simulate's replica)
            scheduler.add_request(request, now_s)
        else:
            # `_settle`'s test counts queued groups: the arrival adds what it queues, one group
            # or a fan-out's children (V1, n > 1), so that a later drop is an ended request
            queued = sum(scheduler.queue_lengths())
            scheduler.add_request(request, now_s)
            if request.is_done:  # rejected at once (too long for the model or the cache)
                self._on_done(self, request)
            else:
                self._in_flight.append(request)
                self._num_pending += sum(scheduler.queue_lengths()) - queued
        if not self._wakeup.triggered:
            self._wakeup.succeed()

    def wake(self) -> None:
        """Re-plan now: something outside the replica changed what it can do."""
        if self._runs is not None:
            self._runs.cut()
        if not self._wakeup.triggered:
            self._wakeup.succeed()

    def waits_on_others(self) -> bool:
        """Whether a stuck replica is waiting for another's work (a disaggregated prefill
        replica whose blocks wait to be sent), not stalled: simulator/cluster/disagg.py."""
        return False

    def mark_arrivals_done(self) -> None:
        self.scheduler.mark_arrivals_done()
        if not self._wakeup.triggered:
            self._wakeup.succeed()

    # --- the heartbeat (every replica's, a single run's included) ---------------------------

    def _run(self) -> Generator[simpy.Event, None, None]:
        """The step loop: a run of pure steps where the fast path has one, else one step (plan,
        price, time passes, `_finish_step`), else wait (`_idle_event`) or end."""
        env, scheduler, price = self._env, self.scheduler, self._price_step
        runs = self._runs
        # The clock, read only where time passed by a wait the loop did not time itself (a
        # property: planning and pricing take no time).
        start_s = env.now
        while True:
            if runs is not None and (wake := runs.open(start_s)) is not None:
                while wake is not None:  # a run of pure steps (fastpath/pure_runs.py)
                    yield wake
                    wake = runs.woken()
                if runs.has_finished and self._on_done is not None:  # (else none ended)
                    runs.has_finished = False
                    self._settle()
                start_s = env.now
                continue
            plan = scheduler.schedule(start_s)
            if plan.is_empty:
                idle = self._idle_event()
                if idle is None:
                    return
                yield idle
                start_s = env.now
                continue
            cost = price(plan)
            yield env.timeout(cost.duration_s)
            # The clock now: SimPy set its timeout at start_s + duration (the same sum, to the
            # bit), and it has just fired.
            end_s = start_s + cost.duration_s
            self._finish_step(start_s, plan, cost, end_s)
            start_s = end_s

    def _finish_step(
        self, start_s: float, plan: StepPlan, cost: StepCost, now_s: float | None = None
    ) -> None:
        """The step's end (now, `now_s` where the caller knows it): the scheduler applies it
        (tokens appear, requests finish, memory frees), the recorder keeps it, and whoever
        watches or routes hears of it."""
        scheduler = self.scheduler
        if now_s is None:
            now_s = self._env.now
        scheduler.complete(plan, now_s)
        if self._check:
            assert now_s == self._env.now, "a step ends when its timeout fires"
            scheduler.check_invariants()
        self.recorder.record_step(start_s, plan, cost, scheduler)
        if self._block_map is not None:
            self._block_map.record(start_s, now_s, plan)
        if self._on_done is not None:
            self._settle()
        if self._on_step is not None:
            self._on_step(now_s)

    def _idle_event(self) -> simpy.Event | None:
        """Nothing to run: the event to wait on (an arrival, a wake-up, the policy's own wake-up
        time), or None when the replica is done (nothing pending, nothing will arrive)."""
        env, scheduler = self._env, self.scheduler
        wake_at = scheduler.next_wakeup_s(env.now)
        delay_s = None if wake_at is None or wake_at <= env.now else wake_at - env.now
        if scheduler.arrivals_done:
            if not scheduler.has_pending:
                return None
            # nothing will arrive, no wake-up lies ahead, no KV is on its way
            if delay_s is None and not self.waits_on_others():
                running, waiting, swapped = scheduler.queue_lengths()
                raise ReplicaStallError(
                    f"replica {self.index}: scheduler stalled at t={env.now:.3f}s with "
                    f"{running} running, {waiting} waiting and {swapped} swapped "
                    "requests and nothing schedulable (a policy bug)"
                )
        self._wakeup = env.event()
        if delay_s is None:
            return env.any_of([self._wakeup])
        return env.any_of([self._wakeup, env.timeout(delay_s)])

    def _settle(self) -> None:
        """Tell the fleet of requests that ended in the last step (only if some did)."""
        assert self._on_done is not None
        running, waiting, swapped = self.scheduler.queue_lengths()
        pending = running + waiting + swapped
        if pending >= self._num_pending and len(self._in_flight) <= pending:
            self._num_pending = pending
            return
        self._num_pending = pending
        live = []
        for request in self._in_flight:
            if request.is_done:
                self._on_done(self, request)
            else:
                live.append(request)
        self._in_flight = live

    # --- the end ------------------------------------------------------------------------------

    def result(self, scenario_name: str, end_s: float, workload: dict[str, object]) -> RunResult:
        self.catch_up()  # a run stopped at its max time: the steps that ended before it
        system, capacity = self.system, self.capacity
        provenance: dict[str, object] = {
            "seed": self.scenario.seed,
            "policy": system.policy.value,
            "era": era_text(system),
            "system": system_knobs(system),
            "defaults_from": self._provenance_sources,
            "era_notes": era_notes(system, self.scenario.workload.sampling),
            "model": self.scenario.model.name,
            "gpu": self.scenario.gpu.name,
            "tensor_parallel": self.scenario.tensor_parallel,
            "pipeline_parallel": system.pipeline_parallel,
            "kv_dtype": self.scenario.kv_dtype.value,
            "weight_dtype": self.scenario.model.weight_dtype.value,  # [model]'s or the system's
            "num_kv_blocks": capacity.num_gpu_blocks,
            "num_cpu_blocks": capacity.num_cpu_blocks,
            "block_size": capacity.block_size,
            "block_bytes": capacity.block_bytes,
            "execution_model": self.execution.describe(),
            "frontend": self.frontend.describe(),  # execution/frontend.py
            "workload": workload,
            "replica": self.index,
            "pool": self.pool,
        }
        profile = power_profile(self.scenario.gpu.name)
        provenance["power_model"] = profile.describe() if profile else "no power profile"
        result = self.recorder.result(scenario_name, system.name, end_s, self.scheduler, provenance)
        result.summary["num_kv_blocks"] = capacity.num_gpu_blocks
        result.summary["block_size"] = capacity.block_size
        # metrics/energy.py: the GPUs' draw by step and at idle; a fleet sums its replicas'
        totals = self.recorder.steps.totals
        num_gpus = self.scenario.tensor_parallel * system.pipeline_parallel
        self.energy = measure(result.steps, totals, profile, num_gpus, end_s)
        result.summary.update(energy_keys(self.energy, result.requests))
        result.summary.update(offload_summary(self.scheduler, end_s))
        return result


def pipeline_loop(replica: Replica, env: simpy.Environment) -> PipelineLoop | None:
    """The pipelined loop of a replica with pipeline stages (cluster/pipeline_loop.py), or None."""
    execution = replica.execution
    if not isinstance(execution, PipelineModel):
        return None
    scheduler = replica.scheduler
    assert isinstance(scheduler, PagedScheduler)  # vllm-v1 only (scenario/pipeline.py)
    return PipelineLoop(env, scheduler, execution, replica._finish_step, replica._idle_event)


def _defaults_from(sources: dict[str, str], execution: ExecutionModel) -> dict[str, str]:
    """The era defaults' sources (core.defaults) and the host overhead's (execution/overhead.py),
    which the execution model applies; a model without one (a fidelity executor) adds none."""
    found = dict(sources)
    host = execution.describe().get("host_overhead_source")
    if isinstance(host, str):
        found[HOST_OVERHEAD_KEY] = host
    return found

"""One serving replica: the engine loop, with its own scheduler, KV cache, execution model and
recorder. engine.simulate runs a single one fed by the workload; a fleet runs several fed by a
router (simulator/cluster/fleet.py). The step loop and the run's provenance live here only.

The loop: plan, price, `yield env.timeout`, complete; idle until an arrival or a wake-up. An idle
replica waits on its own event and costs nothing per step of the others. In a fleet, after each
step it looks for requests that finished (only when its pending count fell) so that the router's
count of requests in flight stays a count a real router keeps: it sees each response end.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Generator

import simpy

from pagesim.simulator.core.config import Scenario, SystemConfig
from pagesim.simulator.core.defaults import (
    ERA,
    HOST_OVERHEAD_KEY,
    era_notes,
    resolve_runnable,
    system_knobs,
)
from pagesim.simulator.core.plan import StepCost
from pagesim.simulator.core.request import Request
from pagesim.simulator.core.scheduler import Scheduler
from pagesim.simulator.execution.decode_costs import decode_costs
from pagesim.simulator.execution.factory import make_execution_model
from pagesim.simulator.execution.model import ExecutionModel
from pagesim.simulator.execution.roofline import RooflineModel
from pagesim.simulator.kv.capacity import kv_capacity
from pagesim.simulator.metrics.recorder import Recorder
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.policies.decode_window import PureRun
from pagesim.simulator.policies.factory import make_scheduler
from pagesim.simulator.policies.paged import PagedScheduler

# Most pure decode steps a replica settles ahead in one run, and how many it prices first (then
# twice as many each time those end uncut): a cut wastes the pricing of the steps past it.
WINDOW_STEPS = 64
FIRST_PRICED = 4
# Off: every step its own event (tests compare the two; the results are the same).
USE_WINDOWS = True


class ReplicaStallError(RuntimeError):
    """A replica holds requests but can make no progress: a policy bug, never hidden."""


ExecutionFactory = Callable[[Scenario, SystemConfig, Scheduler], ExecutionModel]


class Replica:
    """`index` in the fleet; `scenario` already carries this replica's GPU and TP degree.

    engine.simulate runs its single replica through this class too, with the hooks only it
    uses: `on_step(now)` after every step, `execution_factory` in place of the scenario's
    execution model, and `fast_path` (see engine.simulate for when it is on by default); and
    `on_done` None, since no router counts its requests in flight.
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
    ) -> None:
        resolved = resolve_runnable(system, scenario)
        system = resolved.system
        self.index, self.pool, self.system, self.scenario = index, pool, system, scenario
        self.capacity = kv_capacity(scenario, system)
        self.scheduler = make_scheduler(
            system, scenario.model.max_seq_len, self.capacity, scenario.seed, index
        )
        if execution_factory is None:
            self.execution = make_execution_model(scenario, system)
        else:
            self.execution = execution_factory(scenario, system, self.scheduler)
        if fast_path is None:  # on when nobody looks at each step's per-sequence state
            fast_path = (
                execution_factory is None
                and isinstance(self.execution, RooflineModel)
                and not check_invariants
                and on_step is None
            )
        self._paged: PagedScheduler | None = None  # set when runs of pure steps are on
        if fast_path:
            enable = getattr(self.scheduler, "enable_fast_path", None)
            if enable is not None and enable():
                execution = self.execution
                if (  # and nobody looks at every step (as the default fast path asks)
                    USE_WINDOWS
                    and self.takes_windows
                    and on_step is None
                    and not check_invariants
                    and execution_factory is None
                    and isinstance(self.scheduler, PagedScheduler)
                    and isinstance(execution, RooflineModel)
                    and execution.prices_statelessly
                ):
                    self._paged = self.scheduler
        self._window: _Window | None = None
        self.num_steps_ahead = 0  # steps applied from runs of pure steps (the rest one by one)
        self.num_cuts = 0  # runs an arrival ended early
        self._process: simpy.Process | None = None
        self._on_step = on_step
        self.recorder = Recorder(
            scenario.gpu, scenario.slo, scenario.stop.warmup_s, self.capacity.block_bytes
        )
        self._provenance_sources = _defaults_from(resolved.sources, self.execution)
        self._warmup_s = scenario.stop.warmup_s
        self._env = env
        self._on_done = on_done
        self._check = check_invariants
        self._wakeup = env.event()
        self._in_flight: list[Request] = []  # routed here, not yet seen done
        self._num_pending = 0  # the scheduler's pending count after the last look
        self.num_routed = 0

    # Runs of pure decode steps in one event (below): a disaggregated replica's own hooks
    # look at every step, so its kinds set this off.
    takes_windows = True

    def start(self) -> simpy.Process:
        """Start the loop (after the arrival process: the order engine.simulate creates them)."""
        self._process = self._env.process(self._run())
        return self._process

    # --- what a router may read (routers.py says which one reads what) ----------------------

    @property
    def num_in_flight(self) -> int:
        """Requests routed here whose response has not ended: the router's own count."""
        return len(self._in_flight)

    def kv_used_share(self) -> float:
        """Share of KV slots not free: what vLLM reports as its KV-cache usage gauge."""
        self.catch_up(before_now=True)
        memory = self.scheduler.memory_breakdown()
        total = self.scheduler.kv_capacity_slots
        return 1.0 - memory.free_slots / total if total else 0.0

    # --- feeding it ---------------------------------------------------------------------------

    @property
    def num_output_tokens(self) -> int:
        """Output tokens the replica has produced by now (an open run's steps that ended by
        now counted, not applied: each gives every member one token)."""
        tokens = self.scheduler.num_output_tokens
        window = self._window
        if window is not None:
            done = window.num_done
            ended = bisect_left(window.ends, self._env.now, done, window.num_steps) - done
            tokens += ended * window.run.num_members
        return tokens

    def add_request(self, request: Request) -> None:
        self._cut()  # the next step may admit it
        self.num_routed += 1
        # The arrival window's edges for the token rate, as engine.simulate marks them: its
        # first in-window arrival opens it, each arrival moves its end (the last one's stays).
        recorder, tokens = self.recorder, self.scheduler.num_output_tokens
        if recorder.window_tokens[0] is None and request.arrival_s >= self._warmup_s:
            recorder.mark_window_edge(0, tokens)
        recorder.mark_window_edge(1, tokens)
        recorder.add_request(request)
        self.scheduler.add_request(request, self._env.now)
        if self._on_done is None:  # nobody routes on its answers (engine.simulate's replica)
            pass
        elif request.is_done:  # rejected at once (too long for the model or the cache)
            self._on_done(self, request)
        else:
            self._in_flight.append(request)
            self._num_pending += 1
        if not self._wakeup.triggered:
            self._wakeup.succeed()

    def wake(self) -> None:
        """Re-plan now: something outside the replica changed what it can do."""
        self._cut()
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
        env, scheduler, execution = self._env, self.scheduler, self.execution
        paged = self._paged
        while True:
            if paged is not None:
                run = paged.pure_run(WINDOW_STEPS)
                if run is not None and (window := self._open_window(run)) is not None:
                    yield from self._wait_out(window)
                    continue
            plan = scheduler.schedule(env.now)
            if plan.is_empty:
                wake_at = scheduler.next_wakeup_s(env.now)
                delay_s = None if wake_at is None or wake_at <= env.now else wake_at - env.now
                if scheduler.arrivals_done:
                    if not scheduler.has_pending:
                        return
                    # nothing will arrive, no wake-up lies ahead, no KV is on its way
                    if delay_s is None and not self.waits_on_others():
                        running, waiting, swapped = scheduler.queue_lengths()
                        raise ReplicaStallError(
                            f"replica {self.index}: scheduler stalled at t={env.now:.3f}s with "
                            f"{running} running, {waiting} waiting and {swapped} swapped "
                            "requests and nothing schedulable (a policy bug)"
                        )
                self._wakeup = env.event()
                waits: list[simpy.Event] = [self._wakeup]
                if delay_s is not None:
                    waits.append(env.timeout(delay_s))
                yield env.any_of(waits)
                continue
            cost = execution.price(plan)
            start = env.now
            yield env.timeout(cost.duration_s)
            scheduler.complete(plan, env.now)
            if self._check:
                scheduler.check_invariants()
            self.recorder.record_step(start, plan, cost, scheduler)
            if self._on_done is not None:
                self._settle()
            if self._on_step is not None:
                self._on_step(env.now)

    # --- runs of pure decode steps ------------------------------------------------------------
    # When the next steps are pure (policies/decode_window.py: only decode-group members, their
    # outcome fixed now), the loop prices them all, schedules one timeout for the last one's end
    # and applies each step as late as it can: when that timeout fires, or earlier when someone
    # looks (`catch_up`: a router's KV read, a stop) or a request arrives (`_cut`: the step in
    # flight finishes, then the loop plans again, as it would have). Every step keeps its own
    # start and end times, price and record: the run is the per-step loop's.
    #
    # Ties: an outside look at the very instant a step ends sees it in flight, as the per-step
    # loop's SimPy order has it for a stop (`env.run(until=...)`, urgent), a session turn's
    # start (urgent) and an arrival whose timer was set before that step started (the usual
    # case). Only an arrival whose timer was set while that step ran, landing exactly (to the
    # last bit) on its end, is ordered otherwise: the per-step loop would complete the step
    # first. Arrival times and step ends are floats from different sums; the tests
    # (tests/simulator/cluster/test_windows.py) pin the ties that do order alike.

    def _open_window(self, run: PureRun) -> _Window | None:
        """Price the first of `run`'s steps from now; None if fewer than two would survive
        SimPy's clock."""
        window = _Window(run)
        if self._price_more(window, FIRST_PRICED) < 2:
            return None
        self._window = window
        self._paged_start()  # the first step is scheduled now, as the per-step loop would
        return window

    def _price_more(self, window: _Window, count: int) -> int:
        """Price up to `count` more of the run's steps, from the last priced one's end (now);
        returns how many. Priced a chunk at a time: an arrival usually cuts a run short, and
        the steps priced past the cut are wasted."""
        now = self._env.now
        execution = self.execution
        assert isinstance(execution, RooflineModel)
        run, starts, ends, costs = window.run, window.starts, window.ends, window.costs
        first = len(costs)
        contexts = map(run.context_tokens, range(first, min(first + count, run.num_steps)))
        start = ends[-1] if ends else now
        for cost in decode_costs(execution, run.num_members, contexts):
            end = start + cost.duration_s  # what `env.timeout(duration)` at `start` reaches
            # The one timeout, set at `now` (or at a cut, later), must land exactly on a step's
            # end: `now + (end - now) == end` holds for end <= 2 * now (Sterbenz's lemma).
            if end > 2 * now:
                break
            starts.append(start)
            ends.append(end)
            costs.append(cost)
            start = end
        window.num_steps = len(costs)
        return len(costs) - first

    def _paged_start(self) -> None:
        window = self._window
        assert window is not None and self._paged is not None
        self._paged.start_pure_step()
        window.num_started += 1

    def _wait_out(self, window: _Window) -> Generator[simpy.Event, None, None]:
        env = self._env
        while True:
            try:
                yield env.timeout(window.ends[window.num_steps - 1] - env.now)
            except simpy.Interrupt:  # cut short by an arrival: wait for the step in flight
                continue
            # The priced steps ended uncut: price the next ones (twice as many each time).
            if window.is_cut or not self._price_more(window, len(window.costs)):
                break
        self.catch_up(before_now=False)  # its own timeout: the step ending now is done
        self._window = None
        if self._on_done is not None:
            self._settle()

    def catch_up(self, before_now: bool = True) -> None:
        """Apply the open run's steps up to now: those that ended are completed and recorded
        (`before_now`: only those that ended before this instant, as an outside look sees
        them), the one in flight is started."""
        window = self._window
        if window is None:
            return
        paged = self._paged
        assert paged is not None
        done = window.num_done
        assert window.num_started == done + 1  # the step in flight is always started
        find = bisect_left if before_now else bisect_right
        stop = find(window.ends, self._env.now, done, window.num_steps)
        if stop > done:
            after = paged.complete_pure_steps(window.ends[done:stop])
            self.recorder.record_decode_steps(
                window.starts[done:stop],
                window.costs[done:stop],
                window.run.num_members,
                after,
                paged.batch_capacity,
            )
            window.num_done = window.num_started = stop
            self.num_steps_ahead += stop - done
            if stop < window.num_steps:
                self._paged_start()

    def _cut(self) -> None:
        """Something arrives: the open run ends with the step in flight (the next one may
        admit it)."""
        window = self._window
        if window is None:
            return
        assert self._env.active_process is not self._process, "a replica cannot cut its own run"
        self.catch_up()
        window.is_cut = True  # no more steps priced
        if window.num_started < window.num_steps:
            window.num_steps = window.num_started
            self.num_cuts += 1
            assert self._process is not None
            self._process.interrupt()

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
            "era": ERA[system.policy],
            "system": system_knobs(system),
            "defaults_from": self._provenance_sources,
            "era_notes": era_notes(system, self.scenario.workload.sampling),
            "model": self.scenario.model.name,
            "gpu": self.scenario.gpu.name,
            "tensor_parallel": self.scenario.tensor_parallel,
            "kv_dtype": self.scenario.kv_dtype.value,
            "num_kv_blocks": capacity.num_gpu_blocks,
            "num_cpu_blocks": capacity.num_cpu_blocks,
            "block_size": capacity.block_size,
            "block_bytes": capacity.block_bytes,
            "execution_model": self.execution.describe(),
            "workload": workload,
            "replica": self.index,
            "pool": self.pool,
        }
        result = self.recorder.result(scenario_name, system.name, end_s, self.scheduler, provenance)
        result.summary["num_kv_blocks"] = capacity.num_gpu_blocks
        result.summary["block_size"] = capacity.block_size
        return result


def _defaults_from(sources: dict[str, str], execution: ExecutionModel) -> dict[str, str]:
    """The era defaults' sources (core.defaults) and the host overhead's (execution/overhead.py),
    which the execution model applies; a model without one (a fidelity executor) adds none."""
    found = dict(sources)
    host = execution.describe().get("host_overhead_source")
    if isinstance(host, str):
        found[HOST_OVERHEAD_KEY] = host
    return found


class _Window:
    """An open run of pure steps: what they are, the prices and times of those priced so far
    (`num_steps` of them, fewer once a cut ends the run early), how many have been started
    (scheduled) and done (completed and recorded)."""

    __slots__ = (
        "costs",
        "ends",
        "is_cut",
        "num_done",
        "num_started",
        "num_steps",
        "run",
        "starts",
    )

    def __init__(self, run: PureRun) -> None:
        self.run = run
        self.costs: list[StepCost] = []
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.num_steps = 0
        self.num_started = 0
        self.num_done = 0
        self.is_cut = False

"""The SimPy engine: one serving replica's heartbeat, and the `simulate` API.

The only SimPy code in pagesim (with the arrival process beside it). The replica loop is:

    plan = scheduler.schedule(now)          # policy decides the iteration
    cost = execution_model.price(plan)      # what it costs on this GPU
    yield env.timeout(cost.duration_s)      # time passes
    scheduler.complete(plan, env.now)       # tokens appear, requests finish, memory frees

and it idles until an arrival (or a policy's wake-up time) when nothing is runnable.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

import numpy as np
import simpy

from pagesim import __version__
from pagesim.simulator.core.config import Scenario, SystemConfig
from pagesim.simulator.core.defaults import (
    ERA,
    HOST_OVERHEAD_KEY,
    era_notes,
    resolve_runnable,
    system_knobs,
)
from pagesim.simulator.core.scheduler import Scheduler
from pagesim.simulator.execution.checks import utilization_warnings
from pagesim.simulator.execution.factory import make_execution_model
from pagesim.simulator.execution.model import ExecutionModel
from pagesim.simulator.execution.roofline import RooflineModel
from pagesim.simulator.kv.capacity import kv_capacity
from pagesim.simulator.metrics.recorder import Recorder
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.policies.factory import make_scheduler
from pagesim.simulator.workload.stream import WorkloadStats, iter_requests

ExecutionFactory = Callable[[Scenario, SystemConfig, Scheduler], ExecutionModel]


class StallError(RuntimeError):
    """The scheduler holds requests but can make no progress: a policy bug, never hidden."""


def simulate(
    scenario: Scenario,
    system: SystemConfig | None = None,
    *,
    check_invariants: bool = False,
    on_step: Callable[[float], None] | None = None,
    execution_factory: ExecutionFactory | None = None,
    fast_path: bool | None = None,
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

    A scenario with a [cluster] runs its fleet (simulator/cluster/): one result whose requests
    say which replica served them and whose summary holds the cluster's and each replica's.
    So does one with multi-turn sessions (whose next turns wait for answers): on one replica.
    """
    is_fleet = scenario.cluster is not None or scenario.workload.sessions is not None
    if is_fleet and on_step is None and execution_factory is None:
        from pagesim.simulator.cluster.disagg_result import simulate_any_fleet

        return simulate_any_fleet(scenario, system, check_invariants=check_invariants)
    resolved = resolve_runnable(system or scenario.systems[0], scenario)
    system = resolved.system
    capacity = kv_capacity(scenario, system)
    scheduler = make_scheduler(system, scenario.model.max_seq_len, capacity, scenario.seed)
    if execution_factory is None:
        execution = make_execution_model(scenario, system)
    else:
        execution = execution_factory(scenario, system, scheduler)
    if fast_path is None:
        fast_path = (
            execution_factory is None
            and isinstance(execution, RooflineModel)
            and not check_invariants
            and on_step is None
        )
    if fast_path:
        enable = getattr(scheduler, "enable_fast_path", None)
        if enable is not None:
            enable()
    rng = np.random.default_rng(scenario.seed)
    recorder = Recorder(scenario.gpu, scenario.slo, scenario.stop.warmup_s, capacity.block_bytes)
    env = simpy.Environment()
    max_time = scenario.stop.max_time_s
    wakeup: list[simpy.Event] = [env.event()]
    workload_stats = WorkloadStats()

    warmup_s = scenario.stop.warmup_s
    window_open = [False]

    def arrivals() -> Generator[simpy.Event, None, None]:
        max_seq_len = scenario.model.max_seq_len
        for request in iter_requests(scenario.workload, max_seq_len, rng, workload_stats):
            if max_time is not None and request.arrival_s > max_time:
                break
            if request.arrival_s > env.now:
                yield env.timeout(request.arrival_s - env.now)
            if window_open[0] is False and request.arrival_s >= warmup_s:
                window_open[0] = True  # the first in-window arrival opens the arrival window
                recorder.mark_window_edge(0, scheduler.num_output_tokens)
            recorder.add_request(request)
            scheduler.add_request(request, env.now)
            if not wakeup[0].triggered:
                wakeup[0].succeed()
        scheduler.mark_arrivals_done()
        recorder.mark_window_edge(1, scheduler.num_output_tokens)  # the last arrival closes it
        if not wakeup[0].triggered:
            wakeup[0].succeed()

    def replica() -> Generator[simpy.Event, None, None]:
        while True:
            plan = scheduler.schedule(env.now)
            if plan.is_empty:
                wake_at = scheduler.next_wakeup_s(env.now)
                delay_s = None if wake_at is None or wake_at <= env.now else wake_at - env.now
                if scheduler.arrivals_done:
                    if not scheduler.has_pending:
                        return
                    if delay_s is None:  # nothing will arrive and no wake-up lies ahead
                        raise StallError(_stall_message(scheduler, env.now))
                wakeup[0] = env.event()
                waits: list[simpy.Event] = [wakeup[0]]
                if delay_s is not None:
                    waits.append(env.timeout(delay_s))
                yield env.any_of(waits)
                continue
            cost = execution.price(plan)
            start = env.now
            yield env.timeout(cost.duration_s)
            scheduler.complete(plan, env.now)
            if check_invariants:
                scheduler.check_invariants()
            recorder.record_step(start, plan, cost, scheduler)
            if on_step is not None:
                on_step(env.now)

    env.process(arrivals())
    done = env.process(replica())
    env.run(until=done if max_time is None else max_time)
    provenance = {
        "pagesim_version": __version__,
        "seed": scenario.seed,
        "policy": system.policy.value,
        "era": ERA[system.policy],
        "system": system_knobs(system),
        "defaults_from": _defaults_from(resolved.sources, execution),
        "era_notes": era_notes(system, scenario.workload.sampling),
        "model": scenario.model.name,
        "gpu": scenario.gpu.name,
        "tensor_parallel": scenario.tensor_parallel,
        "kv_dtype": scenario.kv_dtype.value,
        "num_kv_blocks": capacity.num_gpu_blocks,
        "num_cpu_blocks": capacity.num_cpu_blocks,
        "block_size": capacity.block_size,
        "block_bytes": capacity.block_bytes,
        "execution_model": execution.describe(),
        "workload": workload_stats.provenance(),  # where lengths came from; rows clipped
    }
    result = recorder.result(scenario.name, system.name, env.now, scheduler, provenance)
    described = provenance["execution_model"]
    priced = described.get("warnings", []) if isinstance(described, dict) else []
    device = described.get("device") if isinstance(described, dict) else None
    over = utilization_warnings(result.summary, scenario.gpu.name, device)
    result.provenance["warnings"] = [*priced, *over]
    result.summary["num_kv_blocks"] = capacity.num_gpu_blocks
    result.summary["block_size"] = capacity.block_size
    # Figures only some execution models have (a mixture of experts' expert reads).
    extra = described.get("summary") if isinstance(described, dict) else None
    if isinstance(extra, dict):
        result.summary.update(extra)
    if system.speculative is not None:
        result.summary.update(speculative_summary(scheduler, execution, result.summary))
    return result


def speculative_summary(
    scheduler: Scheduler, execution: ExecutionModel, summary: dict[str, float | int | str | None]
) -> dict[str, float | int | str | None]:
    """The verifications' counts (policies/speculative.py SpecStats) and the draft's time
    (execution/speculative.py), with its share of the busy time."""
    spec = getattr(getattr(scheduler, "state", None), "spec", None)
    out: dict[str, float | int | str | None] = {} if spec is None else dict(spec.stats.summary())
    draft_s = getattr(execution, "draft_s", None)
    if isinstance(draft_s, float):
        busy = summary.get("busy_s")
        out["spec_draft_s"] = draft_s
        out["spec_draft_share"] = draft_s / busy if isinstance(busy, float) and busy > 0 else None
    return out


def _defaults_from(sources: dict[str, str], execution: ExecutionModel) -> dict[str, str]:
    """The era defaults' sources (core.defaults) and the host overhead's (execution/overhead.py),
    which the execution model applies; a model without one (a fidelity executor) adds none."""
    found = dict(sources)
    host = execution.describe().get("host_overhead_source")
    if isinstance(host, str):
        found[HOST_OVERHEAD_KEY] = host
    return found


def _stall_message(scheduler: Scheduler, now_s: float) -> str:
    running, waiting, swapped = scheduler.queue_lengths()
    return (
        f"scheduler stalled at t={now_s:.3f}s with {running} running, {waiting} waiting and "
        f"{swapped} swapped requests and nothing schedulable (a policy bug)"
    )

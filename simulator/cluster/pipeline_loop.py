"""A pipeline-parallel replica's heartbeat: up to P batches in the pipe at once.

vLLM V1 with P stages keeps a queue of up to P batches in flight (vllm/v1/engine/core.py
`EngineCore.step_with_batch_queue`, queue size `VllmConfig.max_concurrent_batches` = P without
async scheduling, vllm/config/vllm.py, v0.34.0). Each engine step

    1. schedules a batch while the queue has room, and hands it to the first stage without
       waiting (a new batch goes before any output: the pipe fills first);
    2. when the queue is full or nothing more can be scheduled, blocks on the oldest batch
       until its last stage returns, and applies its tokens (`update_from_output`).

A request in a batch still in the pipe is not scheduled again: a decode needs the token the
batch has yet to produce (V1's scheduler has no new token for it: `num_new_tokens == 0`, "PP>1
and we have already scheduled all prompt tokens but they are not finished yet"). pagesim keeps
every request of an in-flight batch out of the next batches, a prompt whose next chunk vLLM
could already schedule included (an estimate that errs slow for long chunked prompts). With
fewer runnable requests than it takes to fill P batches the pipe has bubbles: a lone request
gets one token per trip through all the stages.

While the engine blocks on a batch nothing new is scheduled (a request that arrives meanwhile
waits for the block to end, as vLLM's busy loop reads its inputs between steps). Each batch's
stage times come from execution/pipeline_model.py, its place in the pipe from
execution/pipeline_clock.py. The recorder keeps one row per batch, from when it entered the
first stage, with the stages' mean time (pipeline_model.py says why). The decode fast path
(runs of pure decode steps in one event) is off for a pipelined replica.

Not modelled: async scheduling with stages. v0.34.0 turns it on by default on the
multiprocessing executor (vllm/config/vllm.py `VllmConfig.__post_init__`; not on Ray's), and
then keeps P + 1 batches and schedules a decode before its token returns (output placeholders;
the first stage waits for the token's broadcast). pagesim runs the pipe as vLLM does with it off
(`--no-async-scheduling`, or the Ray executor), and says so in the vllm serve command.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from typing import NamedTuple

import simpy

from pagesim.simulator.core.plan import StepCost, StepPlan
from pagesim.simulator.execution.pipeline_clock import PipelineClock, StageSpan
from pagesim.simulator.execution.pipeline_model import PipelineModel
from pagesim.simulator.policies.paged import PagedScheduler
from pagesim.simulator.policies.seq_group import SeqGroup


class InFlight(NamedTuple):
    """A batch in the pipe: its plan, its span on each stage, and its recorder row."""

    plan: StepPlan
    spans: tuple[StageSpan, ...]
    row: StepCost

    @property
    def done_s(self) -> float:
        return self.spans[-1].end_s


def schedule_beside(scheduler: PagedScheduler, busy: set[int], now_s: float) -> StepPlan:
    """The scheduler's next batch, with the requests in `busy` (in the pipe) out of sight: they
    keep their place in the running list and their count toward max_num_seqs, cannot be
    preempted, and get no work in this batch."""
    state = scheduler.state
    if not busy:
        return scheduler.schedule(now_s)
    before: list[SeqGroup] = state.running
    state.running = [g for g in before if g.request.request_id not in busy]
    try:
        plan = scheduler.schedule(now_s)
    finally:
        after = state.running
        kept = {id(g) for g in after}
        known = {id(g) for g in before}
        state.running = [g for g in before if g.request.request_id in busy or id(g) in kept] + [
            g for g in after if id(g) not in known
        ]
    return plan


class PipelineLoop:
    """Runs a replica's batches through its stages (`run`, a SimPy process body)."""

    def __init__(
        self,
        env: simpy.Environment,
        scheduler: PagedScheduler,
        model: PipelineModel,
        finish: Callable[[float, StepPlan, StepCost], None],
        idle: Callable[[], simpy.Event | None],
    ) -> None:
        self._env = env
        self._scheduler = scheduler
        self._model = model
        self._clock = PipelineClock(model.num_stages)
        # The replica's seams (cluster/replica.py): `finish(start, plan, row)` applies a batch's
        # tokens and records it; `idle()` is the event to wait on, or None when the run is over.
        self._finish = finish
        self._idle = idle
        self.in_flight: deque[InFlight] = deque()
        self.num_batches = 0

    def _busy(self) -> set[int]:
        return {w.request_id for batch in self.in_flight for w in batch.plan.listed_work}

    def run(self) -> Generator[simpy.Event, None, None]:
        env, scheduler, in_flight = self._env, self._scheduler, self.in_flight
        depth = self._model.num_stages
        while True:
            if len(in_flight) < depth:
                plan = schedule_beside(scheduler, self._busy(), env.now)
                if not plan.is_empty:
                    stage_s, transfer_s, row = self._model.stage_costs(plan)
                    spans = self._clock.run(env.now, stage_s, transfer_s)
                    in_flight.append(InFlight(plan, spans, row))
                    self.num_batches += 1
                    continue  # fill the pipe before waiting on any output
            if in_flight:
                oldest = in_flight[0]
                if oldest.done_s > env.now:
                    yield env.timeout(oldest.done_s - env.now)
                in_flight.popleft()
                self._finish(oldest.spans[0].start_s, oldest.plan, oldest.row)
                continue
            idle = self._idle()
            if idle is None:
                return
            yield idle

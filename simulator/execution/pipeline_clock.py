"""The timeline of batches through a pipeline of stages: when each batch runs on each stage.

Batches go through the stages in the order they were scheduled (each stage runs one batch at a
time, first come first served), and a batch's activations reach stage s + 1 a transfer time after
stage s finishes it. Stage s's send is asynchronous: it starts its next batch at once (vLLM's
non-last ranks post `isend_tensor_dict` and return, v1/worker/gpu_worker.py `execute_model`,
v0.34.0), so a transfer delays only the receiving stage.

    start(b, s) = max(ready(b, s), end(b - 1, s))
    ready(b, 0) = the time b was scheduled,  ready(b, s) = end(b, s - 1) + transfer(b, s - 1)
    end(b, s)   = start(b, s) + stage_time(b, s)

Balanced stages of time t, transfers of x, B batches all scheduled at 0 (the closed form the
tests pin): batch b runs on stage s from b t + s (t + x); the last ends at
(B + P - 1) t + (P - 1) x. A batch's latency through the pipe is P t + (P - 1) x; once full the
pipe finishes a batch every t. A plain object (no SimPy): the replica's pipelined loop
(simulator/cluster/pipeline_loop.py) asks it when a batch will be done.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class StageSpan(NamedTuple):
    """When one batch ran on one stage (seconds of simulated time)."""

    start_s: float
    end_s: float


class PipelineClock:
    """When each stage is next free; `run` places the next batch."""

    def __init__(self, num_stages: int) -> None:
        if num_stages < 1:
            raise ValueError("a pipeline has at least one stage")
        self._free_s = [0.0] * num_stages

    @property
    def num_stages(self) -> int:
        return len(self._free_s)

    def run(
        self, ready_s: float, stage_s: Sequence[float], transfer_s: Sequence[float]
    ) -> tuple[StageSpan, ...]:
        """Place a batch scheduled at `ready_s` whose stages take `stage_s` and whose
        activations take `transfer_s[s]` from stage s to s + 1; returns its span per stage."""
        num_stages = len(self._free_s)
        if len(stage_s) != num_stages or len(transfer_s) != num_stages - 1:
            raise ValueError("one time per stage and one transfer per stage boundary")
        spans = []
        arrive_s = ready_s
        for s, duration_s in enumerate(stage_s):
            start_s = max(arrive_s, self._free_s[s])
            end_s = start_s + duration_s
            self._free_s[s] = end_s
            spans.append(StageSpan(start_s, end_s))
            if s < num_stages - 1:
                arrive_s = end_s + transfer_s[s]
        return tuple(spans)

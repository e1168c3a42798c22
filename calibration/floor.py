"""The per-step floor: the executor's own minimal step, timed from first launch to results.

A profile prices a step as max(sum of its kernels, floor). The floor is what the executor
(forward.py, forward_gpu.py) spends on the smallest step it can run: one sequence decoding one
token over a one-token context, every layer and the LM head, timed by the host from the first
launch until the results are ready (`StepTiming.wall_s`), median over the repeats. On a GPU that
is the larger of the launch work Python does and the kernels' own time (at one token, mostly
reading the weights); it is measured eagerly and, on the GPU, replayed from a CUDA graph, and
the profile records both (calibrate's `cuda_graphs` picks which one prices steps).

One layer's weights serve every layer here (ExecutorConfig.share_layer_weights): the launches
and the bytes each layer reads are those of distinct weights (a Llama-2-7B layer's 202 M fp16
weights are ~400 MB, many times the 60 MB of L2 an H200 reports (device tool notes, KINDS.md),
so nothing is served from the cache), in 1/L of the memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from pagesim.calibration.executor_config import ExecutorConfig
from pagesim.calibration.harness import Samples
from pagesim.calibration.step_inputs import decode_inputs
from pagesim.simulator.core.catalog import ModelSpec

FLOOR_MODES = ("eager", "cuda-graph")


@dataclass(frozen=True, slots=True)
class FloorSamples:
    eager: Samples
    graph: Samples | None  # None: not measured (CPU) or the capture failed
    graph_error: str | None


def measure_floor(
    model: ModelSpec,
    backend: str,
    block_size: int,
    *,
    warmup: int,
    repeats: int,
    with_graphs: bool,
    progress: Callable[[str], None] = lambda _: None,
) -> FloorSamples:
    """Wall time of the executor's minimal step, eager and (with_graphs) replayed from a graph."""
    from pagesim.calibration.executor import make_forward

    config = ExecutorConfig(backend=backend, share_layer_weights=True, warmup_steps=0)
    forward = make_forward(config, model, 2, block_size, model.num_layers)
    forward.warmup()

    def samples() -> tuple[Samples, set[str]]:
        modes: set[str] = set()
        times = []
        for i in range(warmup + repeats):  # each step's inputs uploaded untimed, as the executor
            inputs = forward.upload(decode_inputs([(0,)], [1], block_size))
            timing = forward.run(inputs, check=False)
            modes.add(timing.mode)
            if i >= warmup:
                times.append(timing.wall_s)
        return Samples(tuple(times)), modes

    eager, _ = samples()
    progress(f"executor's minimal step (eager): {eager.median_s * 1e3:.3f} ms")
    if not with_graphs:
        return FloorSamples(eager, None, None)
    forward.config = replace(config, cuda_graphs=True)
    warmup = max(1, warmup)  # the first graph-mode step captures (untimed) and replays
    graph, modes = samples()
    if forward.graph_error is not None or modes != {"graph"}:
        error = forward.graph_error or f"the minimal step ran as {sorted(modes)}"
        progress(f"executor's minimal step (CUDA graph): not measured: {error}")
        return FloorSamples(eager, None, error)
    progress(f"executor's minimal step (CUDA graph): {graph.median_s * 1e3:.3f} ms")
    return FloorSamples(eager, graph, None)

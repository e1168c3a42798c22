"""The real executor's forward pass on the CPU: finite at depth, host time per step, graph mode.

The GPU executor runs the same layer structure (tests/calibration/test_gpu_executor.py compares it
with this one); here NumPy runs it, with fp16 activations where the GPU's numerics matter.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sim_helpers import tiny_scenario

from pagesim.calibration.executor import (
    ExecutorConfig,
    PlanExecutor,
    measured_factory,
    running_figures,
)
from pagesim.calibration.forward import HostForward
from pagesim.calibration.graphs import graph_context
from pagesim.calibration.step_inputs import StepInputs, decode_inputs
from pagesim.simulator.core.catalog import ModelSpec, get_model
from pagesim.simulator.engine import simulate


def _random_kv(device: HostForward, seed: int = 1) -> None:
    """Unit-normal fp16 K/V in every block (a cache that earlier steps filled)."""
    rng = np.random.default_rng(seed)
    for cache in device.k_cache + device.v_cache:
        cache[...] = rng.standard_normal(cache.shape, dtype=np.float32).astype(np.float16)


# Three sequences' blocks (block size 16): up to 160, 16 and 48 tokens.
TABLES = [(3, 1, 5, 7, 8, 9, 10, 11, 12, 13), (2,), (0, 4, 6)]


def _decode(device: HostForward, lens: list[int]) -> StepInputs:
    return device.upload(decode_inputs(TABLES, lens, 16))


@pytest.mark.slow
def test_32_layers_of_llama_2_7b_in_fp16_stay_finite() -> None:
    """Llama-2-7B's shapes, all 32 layers, activations rounded to fp16 after every operation
    (as the GPU computes them); one layer's weights serve all 32 to fit the CPU's memory."""
    model = get_model("llama-2-7b")
    config = ExecutorConfig(cpu_dtype="float16", share_layer_weights=True)
    device = HostForward(config, model, 14, 16, model.num_layers)
    _random_kv(device)
    timing, (h, logits) = device._run_eager(_decode(device, [20, 7, 30]))
    assert h.dtype == np.float16 and h.shape == (3, 4096)
    assert np.isfinite(h).all() and np.isfinite(logits).all()
    rms = np.sqrt(np.mean(h.astype(np.float32) ** 2, axis=-1))
    np.testing.assert_allclose(rms, 1.0, rtol=0.05)  # the final norm's output: unit RMS
    assert 0.1 < np.abs(logits.astype(np.float32)).max() < 100
    assert timing.layers_s > 0 and timing.host_s == timing.wall_s > 0


DEEP_TINY = ModelSpec("deep-tiny", 32, 2, 2, 128, 256, 688, 1000, True, 2048, 0)


def test_without_norms_32_fp16_layers_overflow() -> None:
    """Why the norms are there: the same 32-layer stack without them (gate * up squares the
    activations' scale every layer) ends in inf/NaN in fp16; with them it stays finite."""
    outputs = {}
    for with_norms in (True, False):
        device = HostForward(ExecutorConfig(cpu_dtype="float16"), DEEP_TINY, 14, 16, 32)
        _random_kv(device)
        if not with_norms:
            device._norm = lambda x, r: ((r.astype(np.float32) + x).astype(np.float16),) * 2
            device._first_norm = lambda x: (x.astype(np.float16),) * 2
        with np.errstate(all="ignore"):
            _, (_, logits) = device._run_eager(_decode(device, [20, 7, 30]))
        outputs[with_norms] = logits
    assert np.isfinite(outputs[True]).all()
    assert not np.isfinite(outputs[False]).all()


def test_host_time_and_mode_are_recorded_per_step(tmp_path: Path) -> None:
    executors: list[PlanExecutor] = []
    lines: list[str] = []
    config = ExecutorConfig(warmup_steps=1, progress_every_steps=25)
    factory = measured_factory(config, sink=executors, progress=lines.append)
    result = simulate(tiny_scenario(tmp_path, 40), execution_factory=factory)
    (executor,) = executors
    assert len(executor.records) == len(result.steps) > 25
    for record in executor.records:
        assert record.host_s > 0 and record.wall_s >= record.host_s and record.mode == "eager"
    assert len(lines) == len(executor.records) // 25
    assert lines[0].startswith("executed 25 steps: measured median")
    assert "host issue median" in lines[0]


def test_running_figures_report_the_error_against_the_shadow() -> None:
    from pagesim.calibration.executor import StepRecord

    records = [
        StepRecord(i, 1, 0, 1, 0, 1, 10, 0, 1e-3, 1e-3, 0.0, 5e-4, 1.1e-3, "graph", 1.1e-3, True)
        for i in range(4)
    ]
    line = running_figures(records)
    assert "median |err| 10.00%" in line and "bias +10.00%" in line
    assert "4 steps replayed from CUDA graphs" in line


@pytest.mark.parametrize(("context", "bucket"), [(1, 128), (128, 128), (129, 256), (600, 1024)])
def test_graph_context_rounds_up_to_a_power_of_two(context: int, bucket: int) -> None:
    assert graph_context(context) == bucket


def _tiny_device(cuda_graphs: bool) -> HostForward:
    model = ModelSpec("tiny", 2, 4, 2, 64, 256, 512, 1000, True, 2048, 0)
    config = ExecutorConfig(cuda_graphs=cuda_graphs, cpu_dtype="float16")
    device = HostForward(config, model, 14, 16, 2)
    _random_kv(device, seed=3)
    return device


def test_graph_mode_replays_decode_steps_from_static_buffers_exactly() -> None:
    """The static-buffer path a CUDA graph replays gives the eager step's logits, bit for bit,
    as lengths and tables change under one captured shape and across shapes."""
    eager, graphs = _tiny_device(False), _tiny_device(True)
    steps = [[20, 7, 30], [21, 8, 31], [130, 9, 32], [40, 10]]  # 130 > 128: a new bucket
    modes = []
    for lens in steps:
        tables = TABLES[: len(lens)]
        expected = eager._run_eager(eager.upload(decode_inputs(tables, lens, 16)))[1][1]
        inputs = graphs.upload(decode_inputs(tables, lens, 16))
        timing = graphs.run(inputs, check=True)
        key = (len(lens), graph_context(max(lens)))
        np.testing.assert_array_equal(graphs._graphs[key].outputs[1], expected)
        modes.append((timing.mode, timing.captured))
    assert modes == [("graph", True), ("graph", False), ("graph", True), ("graph", True)]
    assert sorted(graphs._graphs) == [(2, 128), (3, 128), (3, 256)]


def test_a_prefill_step_runs_eagerly_in_graph_mode(tmp_path: Path) -> None:
    executors: list[PlanExecutor] = []
    config = ExecutorConfig(cuda_graphs=True, poison_unmapped=True, warmup_steps=1)
    factory = measured_factory(config, sink=executors)
    result = simulate(tiny_scenario(tmp_path, 40), execution_factory=factory)
    (executor,) = executors
    modes = {r.mode for r in executor.records if r.num_prefill_seqs}
    assert modes == {"eager"}
    graph_steps = [r for r in executor.records if r.mode == "graph"]
    assert graph_steps and all(r.num_prefill_seqs == 0 for r in graph_steps)
    described = executor.describe()
    assert described["cuda_graphs"] is True and described["num_graph_steps"] == len(graph_steps)
    assert result.summary["num_finished"] == 40


def test_graph_count_is_capped() -> None:
    device = _tiny_device(True)
    device.config = ExecutorConfig(cuda_graphs=True, max_graphs=1, cpu_dtype="float16")
    first = device.run(_decode(device, [20, 7, 30]), check=True)
    second = device.run(device.upload(decode_inputs(TABLES[:2], [20, 7], 16)), check=True)
    assert (first.mode, second.mode) == ("graph", "eager") and device.num_graph_fallbacks == 1


def test_a_failed_capture_turns_graph_mode_off_and_runs_eagerly() -> None:
    device = _tiny_device(True)

    def refuse(static: StepInputs) -> None:
        raise RuntimeError("capture refused")

    device._capture = refuse  # type: ignore[method-assign]
    first = device.run(_decode(device, [20, 7, 30]), check=True)
    second = device.run(_decode(device, [21, 8, 31]), check=True)
    assert (first.mode, second.mode) == ("eager", "eager")
    assert device.graph_error is not None and "capture refused" in device.graph_error


def test_a_hybrid_model_is_refused_with_the_reason(tmp_path: Path) -> None:
    """The executor walks one block table per sequence; a model with sliding-window layers has
    one per layer group (simulator.kv.hybrid_cache): an input error, not a traceback."""
    from dataclasses import replace

    from hybrid_helpers import hybrid_scheduler, layout_of, tiny_hybrid

    from pagesim.simulator.core.errors import InputError
    from pagesim.simulator.core.model_spec import LayerKind

    model = tiny_hybrid((LayerKind.FULL, LayerKind.SLIDING), window=8)
    scenario = replace(tiny_scenario(tmp_path), model=model)
    scheduler = hybrid_scheduler(layout_of(model), num_blocks=8)
    with pytest.raises(InputError, match="one per layer group"):
        PlanExecutor(scenario, scenario.systems[0], scheduler, ExecutorConfig())

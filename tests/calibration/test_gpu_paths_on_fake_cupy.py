"""The GPU-only Python (executor, graph mode, floor, elementwise timing, bench, preflight) run on
the CPU against tests/fake_cupy.py, a NumPy stand-in for CuPy whose kernels follow the .cu
launch contracts. The first GPU call is rare and short: this catches a wrong argument, a typo or
a missing attribute here instead of there. The kernels themselves are checked on a GPU by
tests/calibration/test_gpu_*.py.
"""

from __future__ import annotations

import sys
from typing import Any

import fake_cupy
import numpy as np
import pytest

from pagesim.calibration.executor_config import ExecutorConfig
from pagesim.calibration.forward import HostForward
from pagesim.calibration.graphs import graph_context
from pagesim.calibration.harness import Samples
from pagesim.calibration.step_inputs import StepInputs, build_step_inputs, decode_inputs
from pagesim.simulator.core.catalog import ModelSpec
from pagesim.simulator.core.plan import SeqWork, StepPlan

TINY = ModelSpec("tiny-gqa", 2, 8, 2, 64, 256, 512, 1000, True, 2048, 0)
TABLES = [(3, 1, 5, 7, 8, 9, 10, 11, 12, 13), (2,), (0, 4, 6)]


@pytest.fixture
def cp(monkeypatch: pytest.MonkeyPatch) -> Any:
    fake = fake_cupy.make()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    fake_cupy.clear_caches()
    from pagesim.calibration.forward_gpu import GpuForward

    def captured(stream: Any, work: Any) -> tuple[Any, Any]:
        """A "graph" that reruns the work and writes its result where the capture left it,
        as a replayed CUDA graph writes into the memory it captured."""
        result = work()

        class Graph:
            def launch(self, stream: Any = None) -> None:
                np.copyto(result, work())

        return Graph(), result

    monkeypatch.setattr(GpuForward, "_captured", staticmethod(captured))
    yield fake
    fake_cupy.clear_caches()


def _pair(cp: Any, config: ExecutorConfig) -> tuple[HostForward, Any]:
    """A CPU forward (fp16 activations) and a (fake) GPU one with the same weights and K/V."""
    from pagesim.calibration.forward_gpu import GpuForward

    cpu = HostForward(ExecutorConfig(cpu_dtype="float16"), TINY, 14, 16, TINY.num_layers)
    rng = np.random.default_rng(7)
    for cache in cpu.k_cache + cpu.v_cache:
        cache[...] = rng.standard_normal(cache.shape, dtype=np.float32).astype(np.float16)
    gpu = GpuForward(cp, config, TINY, 14, 16, TINY.num_layers)
    for layer in range(TINY.num_layers):
        gpu.k_cache[layer][...] = cpu.k_cache[layer]
        gpu.v_cache[layer][...] = cpu.v_cache[layer]
        cpu.weights[layer] = [w.astype(np.float16).astype(np.float32) for w in cpu.weights[layer]]
        for i, w in enumerate(cpu.weights[layer]):
            gpu.weights[layer][i][...] = w
    cpu.lm_head = cpu.lm_head.astype(np.float16).astype(np.float32)
    gpu.lm_head[...] = cpu.lm_head
    cpu._embed = cpu._embed.astype(np.float16).astype(np.float32)
    gpu._embed = cpu._embed.astype(np.float16)
    return cpu, gpu


def _copy(inputs: StepInputs) -> StepInputs:
    fields = ("slot_blocks", "slot_offsets", "decode_rows", "decode_tables", "decode_lens")
    arrays = [np.array(getattr(inputs, f)) for f in fields]
    return StepInputs(inputs.num_tokens, *arrays, [], np.array(inputs.sample_rows))


def _rel(got: np.ndarray, ref: np.ndarray) -> float:
    got64, ref64 = got.astype(np.float64), ref.astype(np.float64)
    return float(np.linalg.norm(got64 - ref64) / np.linalg.norm(ref64))


def test_the_gpu_forward_wires_its_launches_like_the_cpu_forward(cp: Any) -> None:
    cpu, gpu = _pair(cp, ExecutorConfig(backend="cupy"))
    plan = StepPlan.build([SeqWork(0, 0, 1, 130, False), SeqWork(1, 1, 9, 9, True)])
    table = dict(enumerate(TABLES)).__getitem__
    decode = decode_inputs(TABLES, [131, 10, 41], 16)
    for make in (lambda: build_step_inputs(plan, table, 16), lambda: _copy(decode)):
        ref = cpu._run_eager(cpu.upload(make()))[1][1]
        timing, (_, got) = gpu._run_eager(gpu.upload(make()))
        assert _rel(got, ref) < 2e-3
        assert timing.mode == "eager" and timing.wall_s >= timing.host_s > 0
    for layer in range(TINY.num_layers):  # both wrote the same K/V
        np.testing.assert_allclose(gpu.k_cache[layer], cpu.k_cache[layer], atol=2e-3)


def test_graph_mode_loads_static_buffers_and_replays(cp: Any) -> None:
    _, eager = _pair(cp, ExecutorConfig(backend="cupy"))
    _, graphs = _pair(cp, ExecutorConfig(backend="cupy", cuda_graphs=True))
    modes = []
    for lens in ([20, 7, 30], [21, 8, 31], [130, 9, 32], [131, 10, 33]):
        expected = eager._run_eager(eager.upload(decode_inputs(TABLES, lens, 16)))[1][1]
        timing = graphs.run(graphs.upload(decode_inputs(TABLES, lens, 16)), check=True)
        entry = graphs._graphs[(3, graph_context(max(lens)))]
        assert _rel(entry.outputs[1], expected) < 2e-3
        modes.append((timing.mode, timing.captured))
    assert graphs.graph_error is None
    assert modes == [("graph", True), ("graph", False), ("graph", True), ("graph", False)]
    plan = graphs._graphs[(3, 256)].static.extras["decode_plan"]
    assert plan.total_context is None and plan.num_partitions * plan.partition_size >= 256


def test_the_floor_is_measured_eagerly_and_from_a_graph(cp: Any) -> None:
    from pagesim.calibration.floor import measure_floor

    floor = measure_floor(TINY, "cupy", 16, warmup=1, repeats=3, with_graphs=True)
    assert floor.graph_error is None and floor.graph is not None
    assert len(floor.eager.samples_s) == len(floor.graph.samples_s) == 3


def test_the_elementwise_work_runs_the_fused_kernels(cp: Any) -> None:
    from pagesim.calibration.backends import LayerShapes
    from pagesim.calibration.elementwise import cupy_elementwise

    shapes = LayerShapes.from_model(TINY)
    prepared = cupy_elementwise(cp, shapes, 5, 16, np.random.default_rng(0))
    gathered = prepared.fn()
    assert gathered.shape == (5, 8, 64) and prepared.bytes > 0


def test_the_bench_fills_every_column(cp: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from pagesim.calibration import backends
    from pagesim.calibration.kernel_bench import bench_kernel

    def copy_bandwidth(self: Any, num_bytes: int, warmup: int, repeats: int) -> tuple:
        return 4e12, Samples((1e-3,))

    monkeypatch.setattr(backends.CupyBackend, "copy_bandwidth", copy_bandwidth)
    rows = bench_kernel(TINY, shapes=[(2, 200), (1, 600)], warmup=1, repeats=2, flushes=("read",))
    assert [(r["num_seqs"], r["kv_dtype"]) for r in rows] == [
        (2, "fp16"), (2, "bf16"), (1, "fp16"), (1, "bf16")
    ]  # fmt: skip
    for row in rows:
        assert row["time_s"] > 0 and row["ctas_per_sm"] == 4
        assert "128:" in str(row["partition_sweep"])
    assert all(r["same_output_as_contiguous"] for r in rows if r["kv_dtype"] == "fp16")
    assert rows[2]["partitions"] > 1  # one 600-token sequence on 132 SMs: split


def test_the_preflight_checks_run(cp: Any) -> None:
    from pagesim.calibration import preflight

    device = preflight._device(cp, 1.0)
    assert device["name"] == "Fake H200" and device["nvrtc"] == "13.0"
    with pytest.raises(preflight.PreflightError, match="GiB of GPU memory free"):
        preflight._device(cp, 1000.0)
    report = preflight._kernel(cp, 32, 8)
    assert report["ctas_per_sm"] == report["launch_bound"] == 4
    assert float(str(report["max_rel_err"])) < 2e-3
    preflight._layer_ops(cp)

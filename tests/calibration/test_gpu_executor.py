"""The GPU executor against the CPU one, and CUDA-graph replays against eager steps.

Marked `gpu`; skipped with a reason where CuPy or a GPU is absent. The CPU executor (NumPy, fp16
activations) is the reference: the GPU one, given the same weights, K/V and step, must give the
same logits within fp16 rounding; its fused kernels (kernels/layer_ops.cu) must match their
NumPy twins (calibration/layer_ops.py); a decode step replayed from a CUDA graph must match the
same step run eagerly, as lengths and block tables change between replays.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gpu_helpers import gpu_skip_reason

from pagesim.calibration import layer_ops
from pagesim.calibration.executor_config import ExecutorConfig
from pagesim.calibration.forward import HostForward
from pagesim.calibration.step_inputs import StepInputs, build_step_inputs, decode_inputs
from pagesim.simulator.core.catalog import ModelSpec, get_model
from pagesim.simulator.core.plan import SeqWork, StepPlan

REASON = gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

TINY = ModelSpec("tiny-gqa", 2, 8, 2, 128, 512, 1024, 4000, True, 4096, 0)
TABLES = [(3, 1, 5, 7, 8, 9, 10, 11, 12, 13), (2,), (0, 4, 6)]


def _rel(got: Any, ref: np.ndarray) -> float:
    import cupy as cp

    got32 = cp.asnumpy(got).astype(np.float64)
    ref64 = np.asarray(ref, dtype=np.float64)
    return float(np.linalg.norm(got32 - ref64) / np.linalg.norm(ref64))


def _pair(config: ExecutorConfig, model: ModelSpec = TINY) -> tuple[HostForward, Any]:
    """A CPU forward (fp16 activations) and a GPU one holding the same weights and K/V."""
    import cupy as cp

    from pagesim.calibration.forward_gpu import GpuForward

    cpu = HostForward(ExecutorConfig(cpu_dtype="float16"), model, 14, 16, model.num_layers)
    rng = np.random.default_rng(7)
    for cache in cpu.k_cache + cpu.v_cache:
        cache[...] = rng.standard_normal(cache.shape, dtype=np.float32).astype(np.float16)
    gpu = GpuForward(cp, config, model, 14, 16, model.num_layers)
    for layer in range(model.num_layers):
        gpu.k_cache[layer][...] = cp.asarray(cpu.k_cache[layer])
        gpu.v_cache[layer][...] = cp.asarray(cpu.v_cache[layer])
        for i, w in enumerate(cpu.weights[layer]):
            gpu.weights[layer][i][...] = cp.asarray(w.astype(np.float16))
    gpu.lm_head[...] = cp.asarray(cpu.lm_head.astype(np.float16))
    gpu._embed = cp.asarray(cpu._embed.astype(np.float16))
    cpu._embed = cpu._embed.astype(np.float16).astype(np.float32)  # the values the GPU holds
    for layer in range(model.num_layers):  # the CPU computes with the fp16-rounded weights too
        cpu.weights[layer] = [w.astype(np.float16).astype(np.float32) for w in cpu.weights[layer]]
    cpu.lm_head = cpu.lm_head.astype(np.float16).astype(np.float32)
    return cpu, gpu


def _mixed_plan() -> StepPlan:
    return StepPlan.build(
        [
            SeqWork(0, 0, 1, 130, False),  # decode over 130 cached tokens
            SeqWork(1, 1, 9, 9, True),  # a whole 9-token prompt
            SeqWork(2, 2, 16, 40, True),  # a chunk of 16 over 24 cached tokens
        ]
    )


def test_layer_ops_kernels_match_their_numpy_twins() -> None:
    import cupy as cp

    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 4096), dtype=np.float32).astype(np.float16)
    res = rng.standard_normal((5, 4096), dtype=np.float32).astype(np.float16)
    weight = (1 + 0.1 * rng.standard_normal(4096, dtype=np.float32)).astype(np.float16)
    for add in (True, False):
        residual = cp.asarray(res)
        out = layer_ops.gpu_add_rms_norm(cp, cp.asarray(x), residual, cp.asarray(weight), add=add)
        ref_out, ref_res = layer_ops.add_rms_norm(x if add else None, res if add else x, weight)
        assert _rel(out, ref_out) < 2e-3 and _rel(residual, ref_res) < 2e-3
    gate_up = rng.standard_normal((7, 2 * 11008), dtype=np.float32).astype(np.float16)
    assert (
        _rel(layer_ops.gpu_silu_mul(cp, cp.asarray(gate_up), 132), layer_ops.silu_mul(gate_up))
        < 2e-3
    )
    qkv = rng.standard_normal((4, 3 * 256), dtype=np.float32).astype(np.float16)
    k_cache = np.full((6, 2, 16, 128), np.nan, dtype=np.float16)
    v_cache = k_cache.copy()
    blocks, offsets = np.array([5, 0, 5, 2]), np.array([3, 15, 4, 0])
    k_dev, v_dev = cp.asarray(k_cache), cp.asarray(v_cache)
    layer_ops.gpu_write_kv(
        k_dev,
        v_dev,
        cp.asarray(qkv),
        cp.asarray(blocks.astype(np.int32)),
        cp.asarray(offsets.astype(np.int32)),
        256,
        512,
    )
    k = qkv[:, 256:512].reshape(4, 2, 128)
    v = qkv[:, 512:].reshape(4, 2, 128)
    layer_ops.write_kv(k_cache, v_cache, k, v, blocks, offsets)
    np.testing.assert_array_equal(cp.asnumpy(k_dev), k_cache)  # NaN where nothing was written
    np.testing.assert_array_equal(cp.asnumpy(v_dev), v_cache)


def test_gpu_forward_matches_the_cpu_forward() -> None:
    cpu, gpu = _pair(ExecutorConfig(backend="cupy"))
    plan = _mixed_plan()
    table = dict(enumerate(TABLES)).__getitem__
    for step in (build_step_inputs(plan, table, 16), decode_inputs(TABLES, [131, 10, 41], 16)):
        ref = cpu._run_eager(cpu.upload(step))[1][1]
        again = build_step_inputs(plan, table, 16) if step.prefills else step
        got = gpu._run_eager(gpu.upload(_copy(again)))[1][1]
        assert _rel(got, ref.astype(np.float32)) < 2e-2


def _copy(inputs: StepInputs) -> StepInputs:
    return StepInputs(
        inputs.num_tokens,
        np.array(inputs.slot_blocks),
        np.array(inputs.slot_offsets),
        np.array(inputs.decode_rows),
        np.array(inputs.decode_tables),
        np.array(inputs.decode_lens),
        list(inputs.prefills),
        np.array(inputs.sample_rows),
    )


def test_graph_replays_match_eager_steps_as_lengths_change() -> None:
    import cupy as cp

    _, eager = _pair(ExecutorConfig(backend="cupy"))
    _, graphs = _pair(ExecutorConfig(backend="cupy", cuda_graphs=True))
    modes = []
    for lens in ([20, 7, 30], [21, 8, 31], [130, 9, 32], [131, 10, 33]):
        expected = eager._run_eager(eager.upload(decode_inputs(TABLES, lens, 16)))[1][1]
        timing = graphs.run(graphs.upload(decode_inputs(TABLES, lens, 16)), check=True)
        entry = graphs._graphs[(3, 128 if max(lens) <= 128 else 256)]
        assert _rel(entry.outputs[1], cp.asnumpy(expected).astype(np.float32)) < 1e-2
        assert timing.layers_s > 0 and timing.wall_s >= timing.host_s > 0
        modes.append((timing.mode, timing.captured))
    assert graphs.graph_error is None
    assert modes == [("graph", True), ("graph", False), ("graph", True), ("graph", False)]
    for layer in range(TINY.num_layers):  # both wrote the same K/V into the same slots
        k_eager, k_graph = cp.asnumpy(eager.k_cache[layer]), cp.asnumpy(graphs.k_cache[layer])
        assert float(np.abs(k_eager.astype(np.float32) - k_graph).max()) < 1e-2


def test_32_gpu_layers_of_llama_2_7b_stay_finite() -> None:
    import cupy as cp

    from pagesim.calibration.forward_gpu import GpuForward

    model = get_model("llama-2-7b")
    config = ExecutorConfig(backend="cupy", share_layer_weights=True)
    gpu = GpuForward(cp, config, model, 14, 16, model.num_layers)
    for cache in gpu.k_cache + gpu.v_cache:
        cache[...] = cp.random.standard_normal(cache.shape, dtype=cp.float32)
    timing, (h, logits) = gpu._run_eager(gpu.upload(decode_inputs(TABLES, [131, 10, 41], 16)))
    assert bool(cp.isfinite(h).all()) and bool(cp.isfinite(logits).all())
    assert timing.layers_s > 0 and timing.host_s > 0

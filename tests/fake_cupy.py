"""A NumPy-backed stand-in for CuPy, so the GPU code paths run on the CPU.

Arrays are NumPy arrays; RawModule "kernels" follow the .cu files' launch contracts in NumPy
(the decode kernel and its reduce per CTA, log2-domain softmax; kernels/layer_ops.cu through its
NumPy twins in calibration/layer_ops.py; the timing kernels do nothing); events read the host
clock; a CUDA graph is emulated by the tests that need one. What this checks: that every launch
gets its arguments in the order and C types the kernels declare, that the Python around the
launches (plans, uploads, static buffers, bookkeeping) is right. What it cannot check: the
kernels themselves (tests/calibration/test_gpu_*.py do, on a GPU) or CuPy's real behaviour.
"""

from __future__ import annotations

import contextlib
import math
import re
import time
import types
from collections.abc import Iterator
from typing import Any

import numpy as np

from pagesim.calibration import layer_ops
from pagesim.calibration.attention_reference import bf16_bits_to_float, float_to_bf16_bits
from pagesim.calibration.partitions import NUM_THREADS


def _emulate_decode(name: str, grid, block, args) -> None:
    """What pagesim::decode_attention writes, computed per CTA in NumPy (log2-domain softmax)."""
    dtype, head_dim, block_size, heads, paged = (
        int(v) if v.isdigit() else v == "true"
        for v in re.findall(r"<(\d+), (\d+), (\d+), (\d+), (\w+)>", name)[0]
    )
    assert block == (NUM_THREADS, 1, 1)
    out, part_acc, part_max, part_sum, q, k_cache, v_cache, tables, lens = args[:9]
    scalars = args[9:]
    assert [type(s) for s in scalars] == [np.int32] * 5 + [np.float32], "exact C types"
    row_stride, num_heads, num_kv_heads, partition_size, num_partitions = map(int, scalars[:5])
    scale_log2 = float(scalars[5])
    group = num_heads // num_kv_heads
    tiles = group // heads
    assert grid == (num_kv_heads * tiles, q.shape[0], num_partitions)
    to32 = bf16_bits_to_float if dtype == 1 else (lambda a: a.astype(np.float32))
    for x in range(grid[0]):
        kv_head, head0 = x // tiles, (x // tiles) * group + (x % tiles) * heads
        for seq in range(grid[1]):
            length = int(lens[seq])
            for part in range(grid[2]):
                start = part * partition_size
                if part > 0 and start >= length:
                    continue
                t = np.arange(start, min(length, start + partition_size))
                if paged:
                    blocks = tables.reshape(-1)[seq * row_stride + t // block_size]
                    k = to32(k_cache[blocks, kv_head, t % block_size])
                    v = to32(v_cache[blocks, kv_head, t % block_size])
                else:
                    k, v = to32(k_cache[seq, kv_head, t]), to32(v_cache[seq, kv_head, t])
                for h in range(head0, head0 + heads):
                    s = (to32(q[seq, h]) * scale_log2) @ k.T
                    m = s.max() if len(t) else -np.inf
                    p = np.exp2(s - (m if len(t) else 0.0))
                    acc, total = p @ v if len(t) else np.zeros(head_dim), p.sum()
                    if num_partitions == 1:
                        res = acc / total if total > 0 else np.zeros(head_dim)
                        out[seq, h] = float_to_bf16_bits(res) if dtype == 1 else res
                    else:
                        i = (seq * num_heads + h) * num_partitions + part
                        part_acc[i * head_dim : (i + 1) * head_dim] = acc
                        part_max[i], part_sum[i] = m, total


def _emulate_reduce(name: str, grid, block, args) -> None:
    dtype, head_dim = (int(v) for v in re.findall(r"<(\d+), (\d+)>", name)[0])
    out, part_acc, part_max, part_sum, lens, num_heads, partition_size, num_partitions = args
    assert [type(a) for a in args[5:]] == [np.int32] * 3
    assert grid == (int(num_heads), out.shape[0], 1) and block == (head_dim, 1, 1)
    parts = int(num_partitions)
    for seq in range(grid[1]):
        live = max(1, min(parts, math.ceil(int(lens[seq]) / int(partition_size))))
        for h in range(grid[0]):
            base = (seq * int(num_heads) + h) * parts
            m = part_max[base : base + live]
            top = m.max() if np.isfinite(m).any() else 0.0
            w = np.exp2(m - top)
            acc = part_acc[base * head_dim : (base + live) * head_dim].reshape(live, head_dim)
            total = float(part_sum[base : base + live] @ w)
            res = (w @ acc) / total if total > 0 else np.zeros(head_dim)
            out[seq, h] = float_to_bf16_bits(res) if dtype == 1 else res


def _emulate_layer_op(name: str, grid: tuple, block: tuple, args: tuple) -> None:
    """kernels/layer_ops.cu through calibration/layer_ops.py, checking the C types."""
    if name == "pagesim_add_rms_norm":
        out, residual, x, weight, hidden, add, _eps = args
        assert [type(a) for a in args[4:]] == [np.int32, np.int32, np.float32]
        assert grid == (residual.shape[0], 1, 1) and int(hidden) == residual.shape[1]
        h, r = layer_ops.add_rms_norm(x if add else None, residual if add else x, weight)
        residual[...] = r
        out[...] = h
    elif name == "pagesim_silu_mul":
        out, gate_up, ffn, total = args
        assert (type(ffn), type(total)) == (np.int32, np.int64)
        assert int(total) == out.size and out.shape[1] == int(ffn)
        out[...] = layer_ops.silu_mul(gate_up)
    elif name == "pagesim_write_kv":
        k_cache, v_cache, qkv, blocks, offsets, width, k_col, v_col, kv_heads, bsize, dim = args
        assert all(type(a) is np.int32 for a in args[5:]) and blocks.dtype == np.int32
        assert grid == (qkv.shape[0], 1, 1) and int(width) == qkv.shape[1]
        t, span = qkv.shape[0], int(kv_heads) * int(dim)
        k = qkv[:, int(k_col) : int(k_col) + span].reshape(t, int(kv_heads), int(dim))
        v = qkv[:, int(v_col) : int(v_col) + span].reshape(t, int(kv_heads), int(dim))
        assert k_cache.shape[1:] == (int(kv_heads), int(bsize), int(dim))
        layer_ops.write_kv(k_cache, v_cache, k, v, blocks, offsets)
    elif name not in ("pagesim_noop", "pagesim_l2_flush_read"):
        raise AssertionError(f"no such kernel {name}")


class _Kernel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, grid: tuple, block: tuple, args: tuple) -> None:
        if "decode_attention_reduce" in self.name:
            _emulate_reduce(self.name, grid, block, args)
        elif "decode_attention" in self.name:
            _emulate_decode(self.name, grid, block, args)
        else:
            _emulate_layer_op(self.name, grid, block, args)


class RawModule:
    def __init__(self, code: str, options: tuple = (), name_expressions: list[str] | None = None):
        assert options == ()  # calibration/kernel.py's NVRTC_OPTIONS
        self.code = code
        self.names = name_expressions or []

    def get_function(self, name: str) -> _Kernel:
        assert name in self.names or re.search(rf"\b{re.escape(name)}\b", self.code), name
        return _Kernel(name)


class Event:
    def record(self, stream: Any = None) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        return None


class Stream:
    null: Stream

    def __init__(self, non_blocking: bool = False) -> None:
        self.ptr = 1

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def synchronize(self) -> None:
        return None


Stream.null = Stream()


class Device:
    def __init__(self, device_id: int = 0) -> None:
        self.id = device_id
        self.compute_capability = "90"
        self.attributes = {"MultiProcessorCount": 132, "L2CacheSize": 60 << 20}


class MemoryPool:
    def malloc(self, size: int) -> None:
        raise AssertionError("the fake never allocates through a pool")

    def free_all_blocks(self) -> None:
        return None


@contextlib.contextmanager
def _using_allocator(allocator: object = None) -> Iterator[None]:
    yield


def _matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    result = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.result_type(a, b))
    if out is None:
        return result
    out[...] = result
    return out


def make() -> types.ModuleType:
    fake = types.ModuleType("cupy")
    fake.__version__ = "fake"
    for name in ("float16", "float32", "uint8", "uint16", "uint32", "int32", "int64"):
        setattr(fake, name, getattr(np, name))
    for name in ("empty", "zeros", "ones", "full", "empty_like", "arange", "maximum", "take"):
        setattr(fake, name, getattr(np, name))
    for name in ("isfinite", "array_equal", "ascontiguousarray", "linalg"):
        setattr(fake, name, getattr(np, name))
    fake.asarray = np.array  # a copy, as an upload is
    fake.asnumpy = np.asarray
    fake.matmul = _matmul
    rng = np.random.default_rng(0)
    fake.random = types.SimpleNamespace(
        standard_normal=lambda shape, dtype=np.float32: rng.standard_normal(shape, dtype=dtype),
        random=lambda shape, dtype=np.float32: rng.random(shape, dtype=dtype),
    )
    fake.RawModule = RawModule
    fake.get_default_memory_pool = MemoryPool
    runtime = types.SimpleNamespace(
        getDeviceCount=lambda: 1,
        getDeviceProperties=lambda i: {
            "name": b"Fake H200",
            "multiProcessorCount": 132,
            "l2CacheSize": 60 << 20,
            "totalGlobalMem": 141 << 30,
        },
        driverGetVersion=lambda: 13000,
        runtimeGetVersion=lambda: 13000,
        memGetInfo=lambda: (130 << 30, 141 << 30),
        memsetAsync=lambda *args: None,
    )
    fake.cuda = types.SimpleNamespace(
        Device=Device,
        runtime=runtime,
        Event=Event,
        Stream=Stream,
        MemoryPool=MemoryPool,
        using_allocator=_using_allocator,
        get_current_stream=lambda: Stream.null,
        get_elapsed_time=lambda a, b: (b.t - a.t) * 1e3,
        nvrtc=types.SimpleNamespace(getVersion=lambda: (13, 0)),
    )
    return fake


def clear_caches() -> None:
    from pagesim.calibration import kernel

    for cached in (
        kernel.compiled_functions,
        kernel._num_sms,
        kernel.resident_ctas_per_sm,
        kernel._module,
    ):
        cached.cache_clear()


__all__ = ["NUM_THREADS", "bf16_bits_to_float", "float_to_bf16_bits", "make", "math"]

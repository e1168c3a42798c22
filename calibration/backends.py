"""Per-device operations the calibration times: decode attention, GEMMs, prefill, copies, launches.

Each `prepare_*` method builds its inputs (outside any timed region) and returns a `Prepared`: a
zero-argument callable that runs only the measured work, plus the bytes and FLOPs it must move
and compute. Two backends:

- `CupyBackend`: the paged kernel of kernels/paged_attention.cu, GEMMs through `cupy.matmul`
  (cuBLAS, fp16 in, fp32 accumulate), prefill through torch's scaled_dot_product_attention
  (a CuPy matmul/softmax fallback where torch is absent), CUDA-event timing with L2 flushes.
- `NumpyBackend`: the same operations in NumPy on the CPU, timed with perf_counter_ns. GEMMs run
  in float32 because NumPy's float16 matmul is not BLAS-backed and would time a Python-level loop.

CuPy and torch are imported only when a `CupyBackend` is made.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pagesim.calibration import attention_reference
from pagesim.calibration.harness import (
    CudaEventTimer,
    PerfCounterTimer,
    Samples,
    Timer,
    cpu_provenance,
    gpu_provenance,
    wall_samples,
)
from pagesim.calibration.shapes import FP16_BYTES, LayerShapes, Prepared


def gemm_cost(tokens: int, k: int, n: int) -> tuple[int, int]:
    """(bytes, flops) of [tokens, k] @ [k, n] in fp16."""
    return FP16_BYTES * (tokens * k + k * n + tokens * n), 2 * tokens * k * n


def decode_cost(shapes: LayerShapes, context_lens: list[int]) -> tuple[int, int]:
    """(bytes, flops) of one layer's decode attention: K/V once, q read, out written."""
    kv_tokens = sum(context_lens)
    q_out = 2 * len(context_lens) * shapes.num_heads * shapes.head_dim * FP16_BYTES
    flops = 4 * shapes.num_heads * shapes.head_dim * kv_tokens
    return kv_tokens * shapes.kv_bytes_per_token + q_out, flops


def prefill_cost(shapes: LayerShapes, num_seqs: int, prompt_len: int) -> tuple[int, int]:
    """(bytes, flops) of causal attention over whole prompts (q, k, v read, out written)."""
    pairs = num_seqs * prompt_len * (prompt_len + 1) // 2
    elems = (
        num_seqs * prompt_len * shapes.head_dim * (2 * shapes.num_heads + 2 * shapes.num_kv_heads)
    )
    return FP16_BYTES * elems, 4 * shapes.num_heads * shapes.head_dim * pairs


def table_for(
    rng: np.random.Generator, context_lens: list[int], block_size: int, num_blocks: int
) -> np.ndarray:
    """A block table mapping each sequence to distinct, shuffled physical blocks of a pool."""
    per_seq = [-(-n // block_size) for n in context_lens]
    needed = sum(per_seq)
    if needed > num_blocks:
        raise ValueError(f"the KV pool holds {num_blocks} blocks, {needed} needed")
    physical = rng.permutation(num_blocks)[:needed].astype(np.int32)
    table = np.zeros((len(context_lens), max(1, max(per_seq))), dtype=np.int32)
    cursor = 0
    for s, n in enumerate(per_seq):
        table[s, :n] = physical[cursor : cursor + n]
        cursor += n
    return table


class NumpyBackend:
    """The CPU backend: NumPy operations timed with perf_counter_ns (device = "cpu")."""

    name = "numpy"

    def __init__(self) -> None:
        self.timer: Timer = PerfCounterTimer()
        self._rng = np.random.default_rng(0)
        self.kv_pool: tuple[np.ndarray, np.ndarray] | None = None
        self._weights: dict[tuple[int, int], np.ndarray] = {}

    def provenance(self) -> dict[str, object]:
        return cpu_provenance()

    def copy_bandwidth(self, num_bytes: int, warmup: int, repeats: int) -> tuple[float, Samples]:
        """Bytes read + written per second of np.copyto over `num_bytes` arrays."""
        src = np.frombuffer(self._rng.bytes(num_bytes), dtype=np.uint8)
        dst = np.empty_like(src)
        samples = self.timer.sample(lambda: np.copyto(dst, src), warmup=warmup, repeats=repeats)
        return 2 * num_bytes / samples.median_s, samples

    def reserve_kv(self, shapes: LayerShapes, num_blocks: int, block_size: int) -> None:
        shape = (num_blocks, shapes.num_kv_heads, block_size, shapes.head_dim)
        k = self._rng.standard_normal(shape, dtype=np.float32).astype(np.float16)
        v = self._rng.standard_normal(shape, dtype=np.float32).astype(np.float16)
        self.kv_pool = (k, v)

    def prepare_decode(self, shapes: LayerShapes, context_lens: list[int]) -> Prepared:
        assert self.kv_pool is not None, "reserve_kv first"
        k_cache, v_cache = self.kv_pool
        table = table_for(self._rng, context_lens, k_cache.shape[2], k_cache.shape[0])
        lens = np.asarray(context_lens, dtype=np.int32)
        q = self._rng.standard_normal(
            (len(context_lens), shapes.num_heads, shapes.head_dim), dtype=np.float32
        ).astype(np.float16)

        def run() -> object:
            return attention_reference.numpy_decode_attention(q, k_cache, v_cache, table, lens)

        return Prepared(run, *decode_cost(shapes, context_lens))

    def prepare_gemm(self, tokens: int, k: int, n: int) -> Prepared:
        weight = self._weights.get((k, n))
        if weight is None:
            weight = self._rng.random((k, n), dtype=np.float32) - np.float32(0.5)
            self._weights[(k, n)] = weight
        x = self._rng.random((tokens, k), dtype=np.float32) - np.float32(0.5)
        out = np.empty((tokens, n), dtype=np.float32)
        return Prepared(lambda: np.matmul(x, weight, out=out), *gemm_cost(tokens, k, n))

    def prepare_prefill(self, shapes: LayerShapes, num_seqs: int, prompt_len: int) -> Prepared:
        shape_q = (num_seqs, prompt_len, shapes.num_heads, shapes.head_dim)
        shape_kv = (num_seqs, prompt_len, shapes.num_kv_heads, shapes.head_dim)
        q = self._rng.standard_normal(shape_q, dtype=np.float32)
        k = self._rng.standard_normal(shape_kv, dtype=np.float32)
        v = self._rng.standard_normal(shape_kv, dtype=np.float32)
        return Prepared(
            lambda: attention_reference.numpy_prefill_attention(q, k, v),
            *prefill_cost(shapes, num_seqs, prompt_len),
        )

    def prepare_elementwise(self, shapes: LayerShapes, tokens: int, block_size: int) -> Prepared:
        """A layer's norms, activation, K/V write and query gather at `tokens` tokens."""
        from pagesim.calibration.elementwise import numpy_elementwise

        return numpy_elementwise(shapes, tokens, block_size, self._rng)

    def empty_step(self, num_launches: int, warmup: int, repeats: int) -> Samples:
        """A step that launches nothing: `num_launches` empty calls (NumPy work is synchronous)."""

        def noop() -> None:
            return None

        def step() -> None:
            for _ in range(num_launches):
                noop()

        return wall_samples(step, noop, warmup=warmup, repeats=repeats)

    def release(self) -> None:
        self.kv_pool = None
        self._weights.clear()


class CupyBackend:
    """The GPU backend: the paged kernel, cuBLAS GEMMs, torch SDPA prefill, CUDA-event timing."""

    name = "cupy"

    def __init__(self, flush: str = "read") -> None:
        from pagesim.calibration.kernel import _num_sms, device_int, import_cupy

        self.cupy = import_cupy()
        device_id = self.cupy.cuda.Device().id
        self.l2_bytes = device_int(self.cupy, "l2CacheSize", "L2CacheSize", device_id) or 0
        self.num_sms = _num_sms(device_id)
        self.timer = CudaEventTimer(self.cupy, self.l2_bytes, flush, self.num_sms)
        self._rng = np.random.default_rng(0)
        self.kv_pool: tuple[Any, Any] | None = None
        self._weights: dict[tuple[int, int], Any] = {}
        try:
            import torch
            import torch.nn.functional as functional
        except ImportError:
            self.torch: Any = None
            self._sdpa: Any = None
        else:
            self.torch = torch if torch.cuda.is_available() else None
            self._sdpa = functional.scaled_dot_product_attention if self.torch else None
        self.prefill_impl = "torch-sdpa" if self.torch is not None else "cupy-matmul-softmax"

    def provenance(self) -> dict[str, object]:
        info = gpu_provenance(self.cupy)
        info["l2_flush_bytes"] = self.timer.flush_bytes
        info["l2_flush_mode"] = self.timer.flush_mode
        info["prefill_impl"] = self.prefill_impl
        return info

    def random_fp16(self, shape: tuple[int, ...]) -> Any:
        """Uniform [-1, 1) fp16 made on the device (never zeros: they can time faster)."""
        cp = self.cupy
        out = cp.empty(shape, dtype=cp.float16)
        flat = out.reshape(-1)
        step = 1 << 27
        for start in range(0, flat.size, step):
            chunk = flat[start : start + step]
            chunk[...] = cp.random.random(chunk.size, dtype=cp.float32) * 2 - 1
        return out

    def copy_bandwidth(self, num_bytes: int, warmup: int, repeats: int) -> tuple[float, Samples]:
        """Bytes read + written per second of a device-to-device cudaMemcpyAsync."""
        cp = self.cupy
        src = self.random_fp16((num_bytes // 2,)).view(cp.uint8)  # random bytes, never zeros
        dst = cp.empty_like(src)

        def copy() -> None:
            dst.data.copy_from_device_async(src.data, num_bytes)

        samples = self.timer.sample(copy, warmup=warmup, repeats=repeats)
        return 2 * num_bytes / samples.median_s, samples

    def reserve_kv(self, shapes: LayerShapes, num_blocks: int, block_size: int) -> None:
        self.kv_pool = None
        shape = (num_blocks, shapes.num_kv_heads, block_size, shapes.head_dim)
        self.kv_pool = (self.random_fp16(shape), self.random_fp16(shape))

    def prepare_decode(self, shapes: LayerShapes, context_lens: list[int]) -> Prepared:
        from pagesim.calibration.kernel import plan_decode_attention

        assert self.kv_pool is not None, "reserve_kv first"
        cp = self.cupy
        k_cache, v_cache = self.kv_pool
        table = table_for(self._rng, context_lens, k_cache.shape[2], k_cache.shape[0])
        q = self.random_fp16((len(context_lens), shapes.num_heads, shapes.head_dim))
        plan = plan_decode_attention(
            q,
            k_cache,
            v_cache,
            cp.asarray(np.asarray(context_lens, dtype=np.int32)),
            cp.asarray(table),
            validate=False,
        )
        return Prepared(plan.run, *decode_cost(shapes, context_lens))

    def prepare_gemm(self, tokens: int, k: int, n: int) -> Prepared:
        cp = self.cupy
        weight = self._weights.get((k, n))
        if weight is None:
            weight = self.random_fp16((k, n))
            self._weights[(k, n)] = weight
        x = self.random_fp16((tokens, k))
        out = cp.empty((tokens, n), dtype=cp.float16)
        return Prepared(lambda: cp.matmul(x, weight, out=out), *gemm_cost(tokens, k, n))

    def prepare_prefill(self, shapes: LayerShapes, num_seqs: int, prompt_len: int) -> Prepared:
        cost = prefill_cost(shapes, num_seqs, prompt_len)
        h, hkv, d = shapes.num_heads, shapes.num_kv_heads, shapes.head_dim
        if self.torch is not None:
            torch = self.torch
            q = torch.rand(num_seqs, h, prompt_len, d, device="cuda", dtype=torch.float16) - 0.5
            k = torch.rand(num_seqs, hkv, prompt_len, d, device="cuda", dtype=torch.float16) - 0.5
            v = torch.rand(num_seqs, hkv, prompt_len, d, device="cuda", dtype=torch.float16) - 0.5
            sdpa = self._sdpa
            if h != hkv:
                try:  # enable_gqa needs torch >= 2.5
                    sdpa(q[:, :, :16], k[:, :, :16], v[:, :, :16], is_causal=True, enable_gqa=True)
                except TypeError:
                    k = k.repeat_interleave(h // hkv, dim=1)
                    v = v.repeat_interleave(h // hkv, dim=1)
                else:
                    return Prepared(lambda: sdpa(q, k, v, is_causal=True, enable_gqa=True), *cost)
            return Prepared(lambda: sdpa(q, k, v, is_causal=True), *cost)
        cp = self.cupy
        q = self.random_fp16((num_seqs, hkv, h // hkv * prompt_len, d))
        k = self.random_fp16((num_seqs, hkv, prompt_len, d))
        v = self.random_fp16((num_seqs, hkv, prompt_len, d))
        rows = cp.arange(h // hkv * prompt_len) % prompt_len
        future = rows[:, None] < cp.arange(prompt_len)[None, :]
        scale = 1.0 / math.sqrt(d)

        def naive() -> object:
            scores = cp.matmul(q, k.swapaxes(-1, -2)).astype(cp.float32) * scale
            scores = cp.where(future, -cp.inf, scores)
            scores = cp.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            return cp.matmul(scores.astype(cp.float16), v)

        return Prepared(naive, *cost)

    def prepare_elementwise(self, shapes: LayerShapes, tokens: int, block_size: int) -> Prepared:
        """The executor's fused norm, activation and K/V-write kernels and its query gather."""
        from pagesim.calibration.elementwise import cupy_elementwise

        return cupy_elementwise(self.cupy, shapes, tokens, block_size, self._rng)

    def empty_step(self, num_launches: int, warmup: int, repeats: int) -> Samples:
        """Host wall time to launch `num_launches` empty kernels and synchronise."""
        from pagesim.calibration.kernel import noop_kernel

        noop = noop_kernel()
        stream = self.cupy.cuda.get_current_stream()

        def launch() -> None:
            for _ in range(num_launches):
                noop((1, 1, 1), (32, 1, 1), ())

        return wall_samples(launch, stream.synchronize, warmup=warmup, repeats=repeats)

    def release(self) -> None:
        self.kv_pool = None
        self._weights.clear()
        self.cupy.get_default_memory_pool().free_all_blocks()
        if self.torch is not None:
            self.torch.cuda.empty_cache()


def make_backend(name: str, flush: str = "read") -> NumpyBackend | CupyBackend:
    """The backend called `name`; `flush` is the GPU timer's L2 flush ("read" or "memset")."""
    from pagesim.simulator.core.errors import InputError

    if name == "numpy":
        return NumpyBackend()
    if name == "cupy":
        return CupyBackend(flush)
    raise InputError(f"unknown calibration backend {name!r}; valid: numpy, cupy")

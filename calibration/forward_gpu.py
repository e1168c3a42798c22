"""The forward pass on the GPU: cuBLAS GEMMs, the paged kernel, kernels/layer_ops.cu, torch SDPA.

Per layer of a decode step this issues 9 launches (QKV GEMM, K/V write, q gather, decode
attention and, when split, its reduce, output GEMM, add+norm, gate+up GEMM, SiLU-and-mul, down
GEMM, add+norm); prefill chunks add torch's SDPA (and a few copies) per chunk.

Timing: CUDA events around the launches (layers, then LM head), plus the host's own clock: how
long Python took to issue the launches (`host_s`) and until the results were ready (`wall_s`).
When host_s approaches the event time the step is host-bound, as an eager engine is at small
batch; CUDA-graph mode removes most of that.

Graph mode (`ExecutorConfig.cuda_graphs`): a decode-only step of S sequences whose longest
context rounds up to C tokens (`graphs.graph_context`) is captured once into two CUDA graphs
(layers; LM head) on a side stream, with a private memory pool that only that graph uses (CuPy's
relaxed capture mode lets the pool grow while capturing; a warm-up run on the same stream first
compiles kernels and sets up cuBLAS). Its inputs are static device buffers that each step
overwrites before the replay; the decode kernel is planned for C tokens (partitions past a
sequence's length exit at once), so lengths may change between replays. Steps with a prefill
chunk run eagerly: torch's SDPA runs on torch's stream and is not captured (vLLM V1 also runs
its attention outside its piecewise graphs).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import numpy as np

from pagesim.calibration import layer_ops
from pagesim.calibration.executor_config import ExecutorConfig, StepTiming
from pagesim.calibration.forward import HostForward
from pagesim.calibration.graphs import GraphEntry
from pagesim.calibration.step_inputs import StepInputs


class GpuForward(HostForward):
    """The GPU: fp16 activations and weights, CUDA-event timing, optional CUDA graphs."""

    timer_name = "cuda-events"

    def __init__(self, cupy: Any, config: ExecutorConfig, model: Any, *args: Any) -> None:
        from pagesim.calibration.kernel import _num_sms

        self.cp = cupy
        try:
            import torch
        except ImportError:
            torch = None
        self.torch = torch if torch is not None and torch.cuda.is_available() else None
        self.prefill_impl = "torch-sdpa" if self.torch is not None else "cupy-matmul-softmax"
        self.num_sms = _num_sms(cupy.cuda.Device().id)
        self._graph_stream: Any = None
        super().__init__(config, model, *args)
        self.blas_threads_note = "n/a (GPU)"

    @property
    def gemm_dtype(self) -> str:
        return "float16"

    @property
    def act_dtype(self) -> Any:
        return np.dtype(np.float16)

    def _provenance(self) -> dict[str, object]:
        from pagesim.calibration.harness import gpu_provenance

        return gpu_provenance(self.cp)

    def _check_memory(self, cache_shape: tuple[int, ...]) -> None:
        return None  # the device reports out-of-memory itself, at allocation

    def _zeros_fp16(self, shape: tuple[int, ...]) -> Any:
        return self.cp.zeros(shape, dtype=self.cp.float16)

    def _ones(self, n: int) -> Any:
        return self.cp.ones(n, dtype=self.cp.float16)

    def _random(self, shape: tuple[int, int], scale: float = 1.0) -> Any:
        cp = self.cp
        out = cp.empty(shape, dtype=cp.float16)
        for row in range(0, shape[0], 4096):  # in slabs: no fp32 copy of a whole matrix
            block = out[row : row + 4096]
            block[...] = cp.random.standard_normal(block.shape, dtype=cp.float32) * scale
        return out

    def _finite(self, array: Any) -> bool:
        return bool(self.cp.isfinite(array).all())

    def _index(self, host: np.ndarray) -> Any:
        return self.cp.asarray(host)

    def _empty(self, shape: tuple[int, ...]) -> Any:
        return self.cp.empty(shape, dtype=self.cp.float16)

    # -- the layer's operations: one launch each -------------------------------------------
    def _matmul(self, a: Any, w: Any) -> Any:
        return self.cp.matmul(a, w)

    def _first_norm(self, x: Any) -> tuple[Any, Any]:
        residual = self.cp.empty_like(x)
        return layer_ops.gpu_add_rms_norm(
            self.cp, x, residual, self.norm_weight, add=False
        ), residual

    def _norm(self, x: Any, residual: Any) -> tuple[Any, Any]:
        return layer_ops.gpu_add_rms_norm(self.cp, x, residual, self.norm_weight), residual

    def _activation(self, up: Any) -> Any:
        if self.is_gated:
            return layer_ops.gpu_silu_mul(self.cp, up, self.num_sms)
        return self.cp.maximum(up, 0)

    def _write_kv(self, layer: int, qkv: Any, inputs: StepInputs) -> None:
        q_out, kv_out = self.heads * self.head_dim, self.kv_heads * self.head_dim
        layer_ops.gpu_write_kv(
            self.k_cache[layer],
            self.v_cache[layer],
            qkv,
            inputs.extras["slot_blocks_i32"],
            inputs.extras["slot_offsets_i32"],
            q_out,
            q_out + kv_out,
        )

    def _decode(self, layer: int, q: Any, inputs: StepInputs) -> Any:
        plan, decode_q = inputs.extras["decode_plan"], inputs.extras["decode_q"]
        self.cp.take(q, inputs.decode_rows, axis=0, out=decode_q)
        k0, v0 = self.k_cache[0], self.v_cache[0]
        k, v = self.k_cache[layer], self.v_cache[layer]
        for function, grid, block, args in plan.launches:
            bound = tuple(k if a is k0 else v if a is v0 else a for a in args)
            function(grid, block, bound)
        return plan.out

    def _prefill(self, q: Any, k: Any, v: Any) -> Any:
        if self.torch is None:
            return super()._prefill(q, k, v)
        torch, cp = self.torch, self.cp
        n, c = q.shape[0], k.shape[0]
        qt = torch.from_dlpack(cp.ascontiguousarray(q.transpose(1, 0, 2)))[None]  # [1,H,n,D]
        kt = torch.from_dlpack(cp.ascontiguousarray(k.transpose(1, 0, 2)))[None]
        vt = torch.from_dlpack(cp.ascontiguousarray(v.transpose(1, 0, 2)))[None]
        if self.heads != self.kv_heads:
            kt = kt.repeat_interleave(self.heads // self.kv_heads, dim=1)
            vt = vt.repeat_interleave(self.heads // self.kv_heads, dim=1)
        sdpa = torch.nn.functional.scaled_dot_product_attention
        if c == n:
            out = sdpa(qt, kt, vt, is_causal=True)
        else:  # a chunk over cached context: query i sees keys up to c - n + i
            allowed = torch.ones(n, c, dtype=torch.bool, device=qt.device).tril(c - n)
            out = sdpa(qt, kt, vt, attn_mask=allowed)
        return cp.from_dlpack(out[0].transpose(0, 1).contiguous())  # [n, H, D]

    # -- inputs ----------------------------------------------------------------------------
    def upload(self, inputs: StepInputs) -> StepInputs:
        """Device copies of the step's index arrays and the decode kernel's plan (untimed)."""
        from pagesim.calibration.kernel import plan_decode_attention

        cp = self.cp
        super().upload(inputs)
        for name in ("slot_blocks", "slot_offsets", "decode_rows", "sample_rows"):
            setattr(inputs, name, cp.asarray(getattr(inputs, name)))
        inputs.extras["slot_blocks_i32"] = inputs.slot_blocks.astype(cp.int32)
        inputs.extras["slot_offsets_i32"] = inputs.slot_offsets.astype(cp.int32)
        for chunk in inputs.prefills:
            if chunk.token_blocks is not None:
                chunk.token_blocks = cp.asarray(chunk.token_blocks)
                chunk.token_offsets = cp.asarray(chunk.token_offsets)
        if inputs.num_decode_seqs:
            host_lens = inputs.decode_lens
            inputs.decode_tables = cp.asarray(inputs.decode_tables)
            inputs.decode_lens = cp.asarray(inputs.decode_lens)
            q = cp.empty((len(host_lens), self.heads, self.head_dim), dtype=cp.float16)
            inputs.extras["decode_q"] = q
            inputs.extras["max_context"] = int(host_lens.max())
            inputs.extras["decode_plan"] = plan_decode_attention(
                q,
                self.k_cache[0],
                self.v_cache[0],
                inputs.decode_lens,
                inputs.decode_tables,
                validate=False,
            )
        return inputs

    def _run_eager(self, inputs: StepInputs) -> tuple[StepTiming, tuple[Any, Any]]:
        cuda = self.cp.cuda
        start, mid, end = cuda.Event(), cuda.Event(), cuda.Event()
        wall = time.perf_counter()
        start.record()
        h = self.layers(inputs)
        mid.record()
        logits = self.lm_head_logits(h, inputs)
        end.record()
        host_s = time.perf_counter() - wall
        end.synchronize()
        wall_s = time.perf_counter() - wall
        timing = StepTiming(
            cuda.get_elapsed_time(start, mid) * 1e-3,
            cuda.get_elapsed_time(mid, end) * 1e-3,
            host_s,
            wall_s,
            "eager",
            False,
        )
        return timing, (h, logits)

    # -- graph mode ------------------------------------------------------------------------
    def _static_inputs(self, num_seqs: int, context: int) -> StepInputs:
        """Device buffers a decode graph reads, and the kernel planned for `context` tokens."""
        from pagesim.calibration.kernel import plan_decode_attention

        cp = self.cp
        host = super()._static_inputs(num_seqs, context)
        static = StepInputs(
            num_seqs,
            cp.asarray(host.slot_blocks),
            cp.asarray(host.slot_offsets),
            cp.asarray(host.decode_rows),
            cp.asarray(host.decode_tables),
            cp.asarray(host.decode_lens),
            [],
            cp.asarray(host.sample_rows),
            {"context": context},
        )
        static.extras["slot_blocks_i32"] = cp.zeros(num_seqs, dtype=cp.int32)
        static.extras["slot_offsets_i32"] = cp.zeros(num_seqs, dtype=cp.int32)
        q = cp.empty((num_seqs, self.heads, self.head_dim), dtype=cp.float16)
        static.extras["decode_q"] = q
        static.extras["decode_plan"] = plan_decode_attention(
            q,
            self.k_cache[0],
            self.v_cache[0],
            static.decode_lens,
            static.decode_tables,
            max_context=context,
            validate=False,
        )
        return static

    def _load(self, static: StepInputs, inputs: StepInputs) -> None:
        """Overwrite the static buffers from the step's (already uploaded) device arrays."""
        static.extras["slot_blocks_i32"][...] = inputs.extras["slot_blocks_i32"]
        static.extras["slot_offsets_i32"][...] = inputs.extras["slot_offsets_i32"]
        width = inputs.decode_tables.shape[1]
        static.decode_tables[:, :width] = inputs.decode_tables
        static.decode_tables[:, width:] = 0  # never read: past every sequence's last block
        static.decode_lens[...] = inputs.decode_lens

    def _capture(self, static: StepInputs) -> GraphEntry:
        cp = self.cp
        if self._graph_stream is None:
            self._graph_stream = cp.cuda.Stream(non_blocking=True)
        stream = self._graph_stream
        pool = cp.cuda.MemoryPool()  # private: nothing else may reuse what the graphs write
        cp.cuda.Stream.null.synchronize()  # buffers loaded on the null stream
        with cp.cuda.using_allocator(pool.malloc), stream:
            h = self.layers(static)  # warm-up: compiles, sets cuBLAS up, fills the pool
            self.lm_head_logits(h, static)
            stream.synchronize()
            layers_graph, h = self._captured(stream, lambda: self.layers(static))
            lm_graph, logits = self._captured(stream, lambda: self.lm_head_logits(h, static))

        def replay_layers() -> None:
            layers_graph.launch(stream)

        def replay_lm_head() -> None:
            lm_graph.launch(stream)

        # The pool, and the embeddings the graph reads (upload may swap in a larger table).
        return GraphEntry(static, replay_layers, replay_lm_head, [h, logits], [pool, self._embed])

    @staticmethod
    def _captured(stream: Any, work: Any) -> tuple[Any, Any]:
        """(graph, result) of `work()` captured on `stream`; a failure ends the capture first."""
        stream.begin_capture()
        try:
            result = work()
        except BaseException:
            # The capture is already invalid; end it, and report the first error.
            with contextlib.suppress(Exception):
                stream.end_capture()
            raise
        return stream.end_capture(), result

    def _replay(self, entry: GraphEntry, captured: bool) -> StepTiming:
        cuda = self.cp.cuda
        stream = self._graph_stream
        cuda.Stream.null.synchronize()  # block moves and buffer loads were queued there
        start, mid, end = cuda.Event(), cuda.Event(), cuda.Event()
        wall = time.perf_counter()
        start.record(stream)
        entry.replay_layers()
        mid.record(stream)
        entry.replay_lm_head()
        end.record(stream)
        host_s = time.perf_counter() - wall
        end.synchronize()
        wall_s = time.perf_counter() - wall
        return StepTiming(
            cuda.get_elapsed_time(start, mid) * 1e-3,
            cuda.get_elapsed_time(mid, end) * 1e-3,
            host_s,
            wall_s,
            "graph",
            captured,
        )

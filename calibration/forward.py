"""The model's forward pass over the paged KV cache: what the real executor runs per step.

Per step of T tokens (shapes of one GPU, tensor_parallel 1), per executed layer l:

    h = norm(x)                         first layer only: residual = embeddings
    qkv = h @ W_qkv[l]                  [T, hidden] x [hidden, (H + 2 Hkv) D]
    K/V of the T new tokens -> slots    position p goes to block table[p // B], slot p % B
    decode seqs:  paged decode attention over their real block tables
    prefill seqs: causal attention of a chunk's n queries over its c keys (keys read back from
                  the paged cache when the chunk continues cached context, c > n)
    residual += attn @ W_o[l];  h = norm(residual)
    residual += act(h @ W_gate_up[l]) @ W_down[l];  h = norm(residual)
    logits = h[last token of each sequence] @ W_lm      (once, never scaled)

(`layer_ops` holds the norm and activation; norms keep activations O(1) at any depth.) Weights
are random with the model's shapes, scaled to preserve variance; with `share_layer_weights` one
layer's arrays serve every layer (the same launches and bytes per layer, 1/L of the memory).

`HostForward` runs it in NumPy on the CPU: GEMMs in float32 (NumPy's float16 matmul is not
BLAS-backed), activations rounded to `cpu_dtype` after each operation (float16 mimics the GPU's
numerics), timed with perf_counter. `forward_gpu.GpuForward` runs the same steps with cuBLAS,
the paged kernel and kernels/layer_ops.cu. Both support CUDA-graph mode (`cuda_graphs`):
decode-only steps run from static buffers, captured once per (sequences, context bucket) and
replayed, as vLLM runs decode steps; on the CPU the same static-buffer path is replayed eagerly,
so its bookkeeping (`graphs`) is tested without a GPU.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from pagesim.calibration import layer_ops
from pagesim.calibration.attention_reference import numpy_decode_attention
from pagesim.calibration.blas import blas_threads
from pagesim.calibration.executor_config import (
    CPU_DTYPES,
    ExecutorConfig,
    ExecutorReadError,
    StepTiming,
)
from pagesim.calibration.graphs import GraphEntry, graph_context
from pagesim.calibration.step_inputs import StepInputs, static_decode_inputs, warmup_inputs
from pagesim.simulator.core.errors import InputError

GIB = 1 << 30


class HostForward:
    """The forward pass in NumPy (the CPU executor); the GPU subclass overrides the primitives."""

    timer_name = "perf_counter"
    prefill_impl = "numpy-matmul-softmax"

    def __init__(
        self, config: ExecutorConfig, model: Any, num_blocks: int, block_size: int, num_layers: int
    ) -> None:
        if config.cpu_dtype not in CPU_DTYPES:
            raise InputError(f"cpu_dtype must be one of {CPU_DTYPES}, got {config.cpu_dtype!r}")
        self.config = config
        self.heads, self.kv_heads, self.head_dim = (
            model.num_heads,
            model.num_kv_heads,
            model.head_dim,
        )
        self.hidden, self.ffn, self.vocab = (
            model.hidden_size,
            model.intermediate_size,
            model.vocab_size,
        )
        self.is_gated = model.is_gated_mlp
        self.block_size = block_size
        self.num_layers = num_layers
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self._rng = np.random.default_rng(config.seed)
        q_out, kv_out = self.heads * self.head_dim, self.kv_heads * self.head_dim
        up = (2 if self.is_gated else 1) * self.ffn
        self.shapes = [
            (self.hidden, q_out + 2 * kv_out),
            (q_out, self.hidden),
            (self.hidden, up),
            (self.ffn, self.hidden),
        ]
        cache_shape = (num_blocks, self.kv_heads, block_size, self.head_dim)
        self._check_memory(cache_shape)
        self.k_cache = [self._zeros_fp16(cache_shape) for _ in range(num_layers)]
        self.v_cache = [self._zeros_fp16(cache_shape) for _ in range(num_layers)]
        distinct = 1 if config.share_layer_weights else num_layers
        made = [[self._weight(k, n) for k, n in self.shapes] for _ in range(distinct)]
        self.weights = [made[i % distinct] for i in range(num_layers)]
        self.norm_weight = self._ones(self.hidden)  # RMSNorm weights start at one
        self.lm_head = self._weight(self.hidden, self.vocab)
        self._embed = self._random((64, self.hidden))
        self._saved: dict[int, list[Any]] = {}  # CPU block -> per layer (k, v) of one block
        self._graphs: dict[tuple[int, int], GraphEntry] = {}
        self.num_graph_fallbacks = 0  # decode steps run eagerly because max_graphs was reached
        self.graph_error: str | None = None  # why graph mode was turned off, if it was
        self.provenance = self._provenance()
        with blas_threads(config.cpu_threads) as count:
            self.blas_threads_note: object = "unchanged" if count is None else count

    # -- array helpers (overridden on the GPU) ---------------------------------------------
    @property
    def gemm_dtype(self) -> str:
        return "float32"

    @property
    def act_dtype(self) -> Any:
        return np.dtype(self.config.cpu_dtype)

    def _provenance(self) -> dict[str, object]:
        from pagesim.calibration.harness import cpu_provenance

        return cpu_provenance()

    def _check_memory(self, cache_shape: tuple[int, ...]) -> None:
        kv_bytes = 2 * self.num_layers * math.prod(cache_shape) * 2
        distinct = 1 if self.config.share_layer_weights else self.num_layers
        layer = sum(k * n for k, n in self.shapes)
        weight_bytes = 4 * (distinct * layer + self.hidden * self.vocab)
        if kv_bytes + weight_bytes > self.config.max_host_bytes:
            raise InputError(
                f"executing {self.num_layers} layers over {cache_shape[0]:,} KV blocks needs "
                f"{(kv_bytes + weight_bytes) / GIB:.1f} GiB of host memory (cap "
                f"{self.config.max_host_bytes / GIB:.1f} GiB): execute fewer layers (--layers), "
                "set the system's num_kv_blocks, or use a smaller model on the CPU"
            )

    def _zeros_fp16(self, shape: tuple[int, ...]) -> Any:
        array = np.empty(shape, dtype=np.float16)
        array.fill(0)  # touch every page now, not inside a timed step
        return array

    def _ones(self, n: int) -> Any:
        return np.ones(n, dtype=np.float32)

    def _random(self, shape: tuple[int, int], scale: float = 1.0) -> Any:
        """Uniform on [-sqrt(3), sqrt(3)) x scale: unit variance x scale, and ~3x faster to
        draw than normals (a Llama-2-7B layer holds 202 M weights)."""
        array = self._rng.random(shape, dtype=np.float32)
        array *= np.float32(2 * math.sqrt(3) * scale)
        array -= np.float32(math.sqrt(3) * scale)
        return array

    def _weight(self, k: int, n: int) -> Any:
        return self._random((k, n), 1.0 / math.sqrt(k))  # variance-preserving

    def _finite(self, array: Any) -> bool:
        return bool(np.isfinite(array).all())

    # -- the layer's operations ------------------------------------------------------------
    def _matmul(self, a: Any, w: Any) -> Any:
        return (a.astype(np.float32, copy=False) @ w).astype(self.act_dtype, copy=False)

    def _norm(self, x: Any, residual: Any) -> tuple[Any, Any]:
        """(norm(residual + x), residual + x)."""
        return layer_ops.add_rms_norm(x, residual, self.norm_weight)

    def _first_norm(self, x: Any) -> tuple[Any, Any]:
        """(norm(x), residual = x): the first layer's input norm."""
        return layer_ops.add_rms_norm(None, x.astype(self.act_dtype), self.norm_weight)

    def _activation(self, up: Any) -> Any:
        return layer_ops.silu_mul(up) if self.is_gated else layer_ops.relu(up)

    def _write_kv(self, layer: int, qkv: Any, inputs: StepInputs) -> None:
        t, q_out, kv_out = (
            inputs.num_tokens,
            self.heads * self.head_dim,
            self.kv_heads * self.head_dim,
        )
        k = qkv[:, q_out : q_out + kv_out].reshape(t, self.kv_heads, self.head_dim)
        v = qkv[:, q_out + kv_out :].reshape(t, self.kv_heads, self.head_dim)
        layer_ops.write_kv(
            self.k_cache[layer], self.v_cache[layer], k, v, inputs.slot_blocks, inputs.slot_offsets
        )

    def _decode(self, layer: int, q: Any, inputs: StepInputs) -> Any:
        out = numpy_decode_attention(
            q[inputs.decode_rows],
            self.k_cache[layer],
            self.v_cache[layer],
            inputs.decode_tables,
            inputs.decode_lens,
            self.scale,
        )
        return out.astype(self.act_dtype)

    def _prefill(self, q: Any, k: Any, v: Any) -> Any:
        """Causal attention of n queries (the last n positions) over c keys: [n, H, D]."""
        out = layer_ops.chunk_attention(q, k, v, self.scale)
        return out.astype(self.act_dtype)

    def _attention(self, layer: int, qkv: Any, inputs: StepInputs) -> Any:
        """[T, H * D]: decode rows from the paged kernel, prefill chunks from causal attention."""
        t, h, d = inputs.num_tokens, self.heads, self.head_dim
        q_out, kv_out = h * d, self.kv_heads * d
        q = qkv[:, :q_out].reshape(t, h, d)
        if inputs.is_decode_only:
            return self._decode(layer, q, inputs).reshape(t, q_out)
        attn = self._empty((t, h, d))
        if inputs.num_decode_seqs:
            attn[inputs.decode_rows] = self._decode(layer, q, inputs)
        k_cache, v_cache = self.k_cache[layer], self.v_cache[layer]
        for chunk in inputs.prefills:
            rows = slice(chunk.row, chunk.row + chunk.num_new)
            if chunk.token_blocks is None:
                keys = qkv[rows, q_out : q_out + kv_out].reshape(chunk.num_new, self.kv_heads, d)
                values = qkv[rows, q_out + kv_out :].reshape(chunk.num_new, self.kv_heads, d)
            else:
                keys = k_cache[chunk.token_blocks, :, chunk.token_offsets]
                values = v_cache[chunk.token_blocks, :, chunk.token_offsets]
            attn[rows] = self._prefill(q[rows], keys, values)
        return attn.reshape(t, q_out)

    def _empty(self, shape: tuple[int, ...]) -> Any:
        return np.empty(shape, dtype=self.act_dtype)

    def _embeddings(self, num_tokens: int) -> Any:
        return self._embed[:num_tokens]

    # -- the step --------------------------------------------------------------------------
    def layers(self, inputs: StepInputs) -> Any:
        """The executed layers; returns the final normed hidden states [T, hidden]."""
        h, residual = self._first_norm(self._embeddings(inputs.num_tokens))
        for layer in range(self.num_layers):
            w_qkv, w_out, w_up, w_down = self.weights[layer]
            qkv = self._matmul(h, w_qkv)
            self._write_kv(layer, qkv, inputs)
            h, residual = self._norm(
                self._matmul(self._attention(layer, qkv, inputs), w_out), residual
            )
            up = self._activation(self._matmul(h, w_up))
            h, residual = self._norm(self._matmul(up, w_down), residual)
        return h

    def lm_head_logits(self, h: Any, inputs: StepInputs) -> Any:
        rows = h if inputs.is_decode_only else h[inputs.sample_rows]
        return self._matmul(rows, self.lm_head)

    def upload(self, inputs: StepInputs) -> StepInputs:
        """Device copies of the step's inputs (NumPy: the same arrays); untimed."""
        if inputs.num_tokens > len(self._embed):
            self._embed = self._random((2 * inputs.num_tokens, self.hidden))
        return inputs

    def warmup(self) -> None:
        """A small mixed step over block 0 (compiles kernels, faults pages, wakes BLAS threads)."""
        self.run(self.upload(warmup_inputs(self.block_size)), check=False)

    def run(self, inputs: StepInputs, *, check: bool) -> StepTiming:
        """Execute one uploaded step (decode-only steps from a graph in graph mode).

        A capture that fails turns graph mode off for the rest of the run (`graph_error` says
        why, the executor's describe() reports it) rather than losing the run."""
        if self.config.cuda_graphs and self.graph_error is None and inputs.is_decode_only:
            timing = self._run_graph(inputs, check)
            if timing is not None:
                return timing
        timing, outputs = self._run_eager(inputs)
        if check:
            self._check(*outputs)
        return timing

    def _run_graph(self, inputs: StepInputs, check: bool) -> StepTiming | None:
        key = (inputs.num_decode_seqs, graph_context(inputs.max_context))
        entry = self._graphs.get(key)
        captured = entry is None
        if entry is None:
            if len(self._graphs) >= self.config.max_graphs:
                self.num_graph_fallbacks += 1
                return None
            static = self._static_inputs(*key)
            self._load(static, inputs)
            try:
                entry = self._capture(static)
            except Exception as exc:  # a driver or library refusing capture: run eagerly
                self.graph_error = f"capturing {key} failed: {type(exc).__name__}: {exc}"
                return None
            self._graphs[key] = entry
        else:
            self._load(entry.static, inputs)
        timing = self._replay(entry, captured)
        if check:
            self._check(*entry.outputs)
        return timing

    def _check(self, h: Any, logits: Any) -> None:
        if not (self._finite(h) and self._finite(logits)):
            raise ExecutorReadError(
                "a step's output is not finite with unmapped KV blocks poisoned: attention read "
                "a block outside the sequences' block tables"
            )

    def _run_eager(self, inputs: StepInputs) -> tuple[StepTiming, tuple[Any, Any]]:
        with blas_threads(self.config.cpu_threads):
            start = time.perf_counter()
            h = self.layers(inputs)
            mid = time.perf_counter()
            logits = self.lm_head_logits(h, inputs)
            end = time.perf_counter()
        timing = StepTiming(mid - start, end - mid, end - start, end - start, "eager", False)
        return timing, (h, logits)

    # -- graph mode (the CPU replays the static-buffer path eagerly) -------------------------
    def _static_inputs(self, num_seqs: int, context: int) -> StepInputs:
        """Buffers a decode graph of `num_seqs` sequences up to `context` tokens reads."""
        return static_decode_inputs(num_seqs, context, self.block_size)

    def _load(self, static: StepInputs, inputs: StepInputs) -> None:
        """Copy a decode step's inputs into a graph's static buffers (untimed)."""
        static.slot_blocks[...] = inputs.slot_blocks
        static.slot_offsets[...] = inputs.slot_offsets
        width = inputs.decode_tables.shape[1]
        static.decode_tables[:, :width] = inputs.decode_tables
        static.decode_tables[:, width:] = 0  # never read: past every sequence's last block
        static.decode_lens[...] = inputs.decode_lens

    def _capture(self, static: StepInputs) -> GraphEntry:
        """The CPU has no graphs: the "replays" run the static-buffer step eagerly."""

        def layers() -> None:
            entry.outputs[0] = self.layers(static)

        def lm_head() -> None:
            entry.outputs[1] = self.lm_head_logits(entry.outputs[0], static)

        entry = GraphEntry(static, layers, lm_head, [None, None])
        return entry

    def _replay(self, entry: GraphEntry, captured: bool) -> StepTiming:
        with blas_threads(self.config.cpu_threads):
            start = time.perf_counter()
            entry.replay_layers()
            mid = time.perf_counter()
            entry.replay_lm_head()
            end = time.perf_counter()
        return StepTiming(mid - start, end - mid, end - start, end - start, "graph", captured)

    # -- block moves (untimed) -------------------------------------------------------------
    def save(self, gpu_blocks: tuple[int, ...], cpu_blocks: tuple[int, ...]) -> None:
        for src, dst in zip(gpu_blocks, cpu_blocks, strict=True):
            self._saved[dst] = [
                (self.k_cache[i][src].copy(), self.v_cache[i][src].copy())
                for i in range(self.num_layers)
            ]

    def restore(self, cpu_blocks: tuple[int, ...], gpu_blocks: tuple[int, ...]) -> None:
        for src, dst in zip(cpu_blocks, gpu_blocks, strict=True):
            for i, (k, v) in enumerate(self._saved[src]):
                self.k_cache[i][dst] = k
                self.v_cache[i][dst] = v

    def forget_saved(self, keep: set[int]) -> None:
        self._saved = {b: data for b, data in self._saved.items() if b in keep}

    def copy_block(self, src: int, dst: int) -> None:
        for i in range(self.num_layers):
            self.k_cache[i][dst] = self.k_cache[i][src]
            self.v_cache[i][dst] = self.v_cache[i][src]

    def poison(self, live: set[int]) -> int:
        dead = np.setdiff1d(np.arange(len(self.k_cache[0])), np.fromiter(live, dtype=np.int64))
        index = self._index(dead)
        for i in range(self.num_layers):
            self.k_cache[i][index] = np.nan
            self.v_cache[i][index] = np.nan
        return len(dead)

    def _index(self, host: np.ndarray) -> Any:
        return host

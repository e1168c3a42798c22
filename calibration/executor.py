"""A real executor: an ExecutionModel whose `price(plan)` runs the plan and returns the time taken.

`simulate(scenario, execution_factory=measured_factory(...))` drives the simulated clock with
measured step durations instead of predicted ones; the same `RunResult` comes out, its provenance
labelled `execution_model.kind = "measured"`. Per step, on one GPU's shapes (tensor_parallel 1):

    per executed layer l (all L layers, or the first L' of them, timed and scaled by L / L'):
        qkv  = x @ W_qkv[l]                           GEMM  [T, hidden] x [hidden, (H + 2 Hkv) D]
        K/V of the T new tokens -> their slots         scatter into k/v_cache[l] through the
                                                       scheduler's block tables: position p goes
                                                       to block table[p // B], slot p % B
        decode seqs:  paged decode attention over their real block tables (NumPy reference
                      `numpy_decode_attention` on CPU; kernels/paged_attention.cu on GPU)
        prefill seqs: causal attention of the chunk's n queries over its c keys (keys read back
                      from the paged cache when the chunk continues cached context, c > n)
        x = attn @ W_o[l];  h = x @ W_gate_up[l];  x = (gate * up) @ W_down[l]
    logits = x[last token of each sequence] @ W_lm   (once, never scaled)

    compute_s = layers_time x L / L' + lm_head_time   (measured: perf_counter on CPU, CUDA events
                                                        on GPU, around the launches above)
    swap_s, copy_s, flops, bytes_moved                 the roofline's (analytic; stated in describe)

Weights are random with the model's shapes (variance-preserving scale, so activations stay O(1));
the KV cache is allocated once for the scheduler's whole block pool, per executed layer, as
[num_blocks, num_kv_heads, block_size, head_dim] fp16. NumPy runs GEMMs in float32 (its float16
matmul is not BLAS-backed), as the CPU calibration backend does. Not executed (as neither the
roofline nor a profile prices them): norms, rotary embedding, residual adds, sampling.

Swaps and copy-on-write copies are carried out on the arrays (so the KV a sequence reads is the
KV it wrote) outside the timed region; their time is the roofline's. Host-side inputs (block
tables, slot mapping, the GPU kernel's launch plan) are built before the timer starts, as
calibration separates `plan` from `run`. On the GPU the CUDA events span the launches, so time
the GPU spends waiting for Python to issue the next kernel (about 15 operations per layer, no CUDA
graphs) counts, as it would in an eager engine.

Only paged policies (vllm-v0, vllm-v1) are executed: static and orca allocate contiguous
regions with no block table, and are refused with an InputError.
"""

from __future__ import annotations

import ctypes
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from pagesim.calibration.reference import numpy_decode_attention
from pagesim.simulator.core.catalog import KVDtype
from pagesim.simulator.core.config import Scenario, SystemConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.plan import StepCost, StepPlan
from pagesim.simulator.core.scheduler import Scheduler
from pagesim.simulator.execution.model import ExecutionModel
from pagesim.simulator.execution.roofline import RooflineModel
from pagesim.simulator.policies.paged import PagedScheduler

GIB = 1 << 30
BACKENDS = ("numpy", "cupy")


_BLAS_SYMBOLS = (  # (get, set) pairs of OpenBLAS builds NumPy ships or links
    ("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
    ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
    ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
    ("openblas_get_num_threads", "openblas_set_num_threads"),
)


@cache
def _openblas() -> tuple[Any, Any] | None:
    """(get, set) thread-count functions of the OpenBLAS loaded in this process, if any."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower()}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for get, put in _BLAS_SYMBOLS:
            if hasattr(library, get) and hasattr(library, put):
                return getattr(library, get), getattr(library, put)
    return None


@contextmanager
def blas_threads(num_threads: int | None) -> Iterator[int | None]:
    """Run NumPy's BLAS on `num_threads` threads inside the block; yields the count in force
    (None where it cannot be set: another BLAS, or no /proc). On small CPUs shared with other
    work, OpenBLAS's spinning threads make small GEMMs several times slower and noisier."""
    functions = _openblas() if num_threads is not None else None
    if functions is None:
        yield None
        return
    get, put = functions
    before = int(get())
    put(num_threads)
    try:
        yield num_threads
    finally:
        put(before)


class ExecutorReadError(RuntimeError):
    """A step's output was not finite with unmapped blocks poisoned: a read outside the tables."""


@dataclass(frozen=True, slots=True)
class ExecutorConfig:
    backend: str = "numpy"  # "numpy" (CPU) | "cupy" (GPU)
    num_layers: int | None = None  # layers executed (None: all); time scaled by L / this
    max_host_bytes: int = 2 * GIB  # numpy: KV cache + weights must fit in this
    poison_unmapped: bool = False  # tests: NaN every block no table maps before each step
    warmup_steps: int = 3
    seed: int = 0
    cpu_threads: int | None = 1  # numpy: BLAS threads while executing (None: leave as is)


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One executed step: its shape, the measured time, and the shadow model's prediction."""

    index: int
    num_seqs: int
    num_prefill_seqs: int
    num_decode_seqs: int
    num_prefill_tokens: int
    num_decode_tokens: int
    decode_kv_tokens: int  # Σ context of decoding sequences
    prefill_sq: int  # Σ n(2c - n) over prefill chunks (the profile's prefill variable)
    measured_compute_s: float
    measured_layers_s: float  # executed layers only, unscaled
    measured_lm_head_s: float
    wall_s: float  # host wall time of the timed region (launch + synchronise on GPU)
    predicted_compute_s: float | None
    is_inside_range: bool | None  # the shadow profile priced it without extrapolating


@dataclass(slots=True)
class _Prefill:
    row: int  # first row of the chunk among the step's tokens
    num_new: int
    context: int
    token_blocks: np.ndarray | None  # [context] physical block of each key (None: c == n)
    token_offsets: np.ndarray | None


@dataclass(slots=True)
class _Inputs:
    """Host-side inputs of one step, built before the timer starts."""

    num_tokens: int
    slot_blocks: Any  # [T] physical block of each new token
    slot_offsets: Any  # [T] slot within it
    decode_rows: Any  # [Sd] row of each decoding sequence's token
    decode_tables: Any  # int32 [Sd, max blocks]
    decode_lens: Any  # int32 [Sd]
    prefills: list[_Prefill]
    sample_rows: Any  # [S] last row of each sequence
    decode_plan: Any = None  # GPU: the kernel's launch plan for layer 0
    decode_q: Any = None  # GPU: the plan's query buffer [Sd, H, D]


class PlanExecutor:
    """ExecutionModel that executes each plan over `scheduler.kv`'s block tables and times it."""

    name = "measured"

    def __init__(
        self,
        scenario: Scenario,
        system: SystemConfig,
        scheduler: Scheduler,
        config: ExecutorConfig = ExecutorConfig(),
        shadow: ExecutionModel | None = None,
    ) -> None:
        if not isinstance(scheduler, PagedScheduler):
            raise InputError(
                f"system {system.name!r}: the measured executor runs paged policies only "
                f"(vllm-v0, vllm-v1); {system.policy.value} reserves contiguous regions with no "
                "block table to execute"
            )
        if scenario.tensor_parallel != 1:
            raise InputError(
                "the measured executor runs one GPU: tensor_parallel must be 1, got "
                f"{scenario.tensor_parallel}"
            )
        if scenario.kv_dtype is KVDtype.FP8:
            raise InputError("the measured executor runs a 16-bit KV cache; fp8 is not supported")
        if config.backend not in BACKENDS:
            raise InputError(
                f"unknown executor backend {config.backend!r}; valid: {', '.join(BACKENDS)}"
            )
        model = scenario.model
        if model.num_heads % model.num_kv_heads:
            raise InputError(f"{model.name}: num_heads must be a multiple of num_kv_heads")
        num_exec = model.num_layers if config.num_layers is None else config.num_layers
        if not 1 <= num_exec <= model.num_layers:
            raise InputError(
                f"--layers must be in [1, {model.num_layers}] for {model.name}, got {num_exec}"
            )
        self.scenario, self.system, self.config = scenario, system, config
        self.kv = scheduler.kv
        self.shadow = shadow
        self.roofline = RooflineModel(
            model,
            scenario.gpu,
            scenario.execution,
            scenario.kv_dtype,
            block_size=system.block_size,
        )
        self.num_layers = model.num_layers
        self.num_exec_layers = num_exec
        self.layer_scale = model.num_layers / num_exec
        self.records: list[StepRecord] = []
        self.num_poisoned_blocks = 0  # summed over steps (poison mode)
        self._mirror: dict[int, tuple[int, ...]] = {}  # seq -> GPU table when last executed
        self._swapped: dict[int, tuple[int, ...]] = {}  # seq -> its CPU table
        self._device = _make_device(config, model, self.kv.num_blocks, system.block_size, num_exec)
        for _ in range(config.warmup_steps):
            self._device.warmup()

    # -- ExecutionModel ---------------------------------------------------------------------
    def price(self, plan: StepPlan) -> StepCost:
        analytic = self.roofline.price(plan)
        self._move_blocks(plan)
        if not plan.work:
            return analytic  # swaps only: nothing to compute
        predicted = inside = None
        if self.shadow is not None:
            before = getattr(self.shadow, "num_steps_extrapolated", None)
            predicted = self.shadow.price(plan).compute_s
            after = getattr(self.shadow, "num_steps_extrapolated", None)
            inside = None if before is None else after == before
        if self.config.poison_unmapped:
            self.num_poisoned_blocks += self._device.poison(self._live_blocks())
        inputs = self._inputs(plan)
        layers_s, lm_s, wall_s = self._device.run(inputs, check=self.config.poison_unmapped)
        compute_s = layers_s * self.layer_scale + lm_s
        for item in plan.work:
            self._mirror[item.seq_id] = self.kv.block_table(item.seq_id)
        self.records.append(
            _record(len(self.records), plan, compute_s, layers_s, lm_s, wall_s, predicted, inside)
        )
        return StepCost(
            compute_s, analytic.swap_s, analytic.copy_s, analytic.flops, analytic.bytes_moved
        )

    def describe(self) -> dict[str, object]:
        device = self._device
        return {
            "kind": self.name,
            "backend": self.config.backend,
            "device": device.provenance.get("device"),
            "device_provenance": device.provenance,
            "timer": device.timer_name,
            "model": self.scenario.model.name,
            "gpu": self.scenario.gpu.name,
            "block_size": self.system.block_size,
            "num_kv_blocks": self.kv.num_blocks,
            "num_layers": self.num_layers,
            "num_layers_executed": self.num_exec_layers,
            "layer_subset": (
                "all layers"
                if self.num_exec_layers == self.num_layers
                else f"first {self.num_exec_layers} of {self.num_layers} layers, time x "
                f"{self.layer_scale:g}; LM head once"
            ),
            "gemm_dtype": device.gemm_dtype,
            "cpu_blas_threads": device.blas_threads_note,
            "prefill_impl": device.prefill_impl,
            "num_steps_executed": len(self.records),
            "analytic_parts": "swap_s and copy_s from the roofline (blocks x block bytes / host "
            "link; copies at attention bandwidth); FLOPs and bytes are the roofline's counts",
            "not_executed": "norms, rotary embedding, residual adds, sampling; the gate*up "
            "product stands in for SiLU-and-mul",
        }

    # -- block bookkeeping ------------------------------------------------------------------
    def _move_blocks(self, plan: StepPlan) -> None:
        """Swap-outs, then swap-ins, then copy-on-write copies, on the arrays (untimed)."""
        kv, device = self.kv, self._device
        if plan.num_swap_out_blocks:
            for seq_id, gpu_table in list(self._mirror.items()):
                if seq_id in self._swapped or not kv.has_seq(seq_id) or not kv.is_swapped(seq_id):
                    continue
                cpu_table = kv.block_table(seq_id)
                device.save(gpu_table[: len(cpu_table)], cpu_table)
                self._swapped[seq_id] = cpu_table
                del self._mirror[seq_id]
        if plan.num_swap_in_blocks:
            # A table seen now may already hold this step's copy-on-write copy (dst) where the
            # swapped-in block (src) sits: restore into the src, the copy below fills the dst.
            original = {copy.dst_block: copy.src_block for copy in plan.copies}
            for seq_id, cpu_table in list(self._swapped.items()):
                if kv.has_seq(seq_id) and kv.is_swapped(seq_id):
                    continue
                del self._swapped[seq_id]
                if kv.has_seq(seq_id):
                    table = kv.block_table(seq_id)[: len(cpu_table)]
                    device.restore(cpu_table, tuple(original.get(b, b) for b in table))
            held = {b for table in self._swapped.values() for b in table}
            device.forget_saved(held)
        for copy in plan.copies:
            device.copy_block(copy.src_block, copy.dst_block)
        if len(self._mirror) > 4 * max(1, len(plan.work)):  # drop finished sequences
            self._mirror = {s: t for s, t in self._mirror.items() if kv.has_seq(s)}

    def _live_blocks(self) -> set[int]:
        """GPU blocks holding KV someone may read: mapped by a table, or cached for prefix hits."""
        kv = self.kv
        live = {b for s in kv.seq_ids() if not kv.is_swapped(s) for b in kv.block_table(s)}
        if kv.enable_prefix_cache:
            live.update(b for b in range(kv.num_blocks) if kv.block_hash(b) is not None)
        return live

    def _inputs(self, plan: StepPlan) -> _Inputs:
        block_size = self.kv.block_size
        slot_blocks: list[np.ndarray] = []
        slot_offsets: list[np.ndarray] = []
        decode_rows: list[int] = []
        decode_tables: list[tuple[int, ...]] = []
        decode_lens: list[int] = []
        prefills: list[_Prefill] = []
        sample_rows: list[int] = []
        row = 0
        for item in plan.work:
            table = np.asarray(self.kv.block_table(item.seq_id), dtype=np.int64)
            n, c = item.num_new_tokens, item.context_len
            positions = np.arange(c - n, c)
            slot_blocks.append(table[positions // block_size])
            slot_offsets.append(positions % block_size)
            if item.is_prefill or n > 1:
                keys = None
                if c > n:
                    keys = np.arange(c)
                prefills.append(
                    _Prefill(
                        row,
                        n,
                        c,
                        None if keys is None else table[keys // block_size],
                        None if keys is None else keys % block_size,
                    )
                )
            else:
                decode_rows.append(row)
                decode_tables.append(tuple(table[: -(-c // block_size)]))
                decode_lens.append(c)
            row += n
            sample_rows.append(row - 1)
        width = max((len(t) for t in decode_tables), default=1)
        tables = np.zeros((len(decode_tables), width), dtype=np.int32)
        for i, t in enumerate(decode_tables):
            tables[i, : len(t)] = t
        return self._device.upload(
            _Inputs(
                row,
                np.concatenate(slot_blocks),
                np.concatenate(slot_offsets),
                np.asarray(decode_rows, dtype=np.int64),
                tables,
                np.asarray(decode_lens, dtype=np.int32),
                prefills,
                np.asarray(sample_rows, dtype=np.int64),
            )
        )


def _record(
    index: int,
    plan: StepPlan,
    compute_s: float,
    layers_s: float,
    lm_s: float,
    wall_s: float,
    predicted: float | None,
    inside: bool | None,
) -> StepRecord:
    decode_kv = prefill_sq = 0
    for item in plan.work:
        if item.is_prefill:
            prefill_sq += item.num_new_tokens * (2 * item.context_len - item.num_new_tokens)
        else:
            decode_kv += item.context_len
    return StepRecord(
        index,
        plan.num_seqs,
        plan.num_prefill_seqs,
        plan.num_decode_seqs,
        plan.num_prefill_tokens,
        plan.num_decode_tokens,
        decode_kv,
        prefill_sq,
        compute_s,
        layers_s,
        lm_s,
        wall_s,
        predicted,
        inside,
    )


def measured_factory(
    config: ExecutorConfig = ExecutorConfig(),
    shadow_factory: Callable[[Scenario, SystemConfig], ExecutionModel] | None = None,
    sink: list[PlanExecutor] | None = None,
) -> Callable[[Scenario, SystemConfig, Scheduler], PlanExecutor]:
    """An `execution_factory` for `simulate`: a PlanExecutor per run (appended to `sink`), each
    plan also priced by `shadow_factory(scenario, system)`'s model when given."""

    def factory(scenario: Scenario, system: SystemConfig, scheduler: Scheduler) -> PlanExecutor:
        shadow = None if shadow_factory is None else shadow_factory(scenario, system)
        executor = PlanExecutor(scenario, system, scheduler, config, shadow)
        if sink is not None:
            sink.append(executor)
        return executor

    return factory


# -- devices ---------------------------------------------------------------------------------


def _make_device(
    config: ExecutorConfig, model: Any, num_blocks: int, block_size: int, num_layers: int
) -> _Device:
    if config.backend == "cupy":
        from pagesim.calibration.kernel import import_cupy

        return _CupyDevice(import_cupy(), config, model, num_blocks, block_size, num_layers)
    return _Device(np, config, model, num_blocks, block_size, num_layers)


class _Device:
    """Arrays and the forward pass, written once over an array module (NumPy here)."""

    timer_name = "perf_counter"
    gemm_dtype = "float32"
    prefill_impl = "numpy-matmul-softmax"

    def __init__(
        self,
        xp: Any,
        config: ExecutorConfig,
        model: Any,
        num_blocks: int,
        block_size: int,
        num_layers: int,
    ) -> None:
        self.xp = xp
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
        self.cpu_threads = config.cpu_threads
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
        self._check_memory(config, cache_shape)
        self.k_cache = [self._zeros_fp16(cache_shape) for _ in range(num_layers)]
        self.v_cache = [self._zeros_fp16(cache_shape) for _ in range(num_layers)]
        self.weights = [[self._weight(k, n) for k, n in self.shapes] for _ in range(num_layers)]
        self.lm_head = self._weight(self.hidden, self.vocab)
        self._embed = self._random((64, self.hidden))
        self._saved: dict[int, list[Any]] = {}  # CPU block -> per layer (k, v) of one block
        self.provenance = self._provenance()
        with blas_threads(self.cpu_threads) as count:
            self.blas_threads_note = "unchanged" if count is None else count

    # array helpers (overridden on the GPU)
    def _provenance(self) -> dict[str, object]:
        from pagesim.calibration.harness import cpu_provenance

        return cpu_provenance()

    def _check_memory(self, config: ExecutorConfig, cache_shape: tuple[int, ...]) -> None:
        kv_bytes = 2 * self.num_layers * math.prod(cache_shape) * 2
        weight_bytes = 4 * (
            self.num_layers * sum(k * n for k, n in self.shapes) + self.hidden * self.vocab
        )
        if kv_bytes + weight_bytes > config.max_host_bytes:
            raise InputError(
                f"executing {self.num_layers} layers over {cache_shape[0]:,} KV blocks needs "
                f"{(kv_bytes + weight_bytes) / GIB:.1f} GiB of host memory (cap "
                f"{config.max_host_bytes / GIB:.1f} GiB): execute fewer layers (--layers), set "
                "the system's num_kv_blocks, or use a smaller model on the CPU"
            )

    def _zeros_fp16(self, shape: tuple[int, ...]) -> Any:
        array = np.empty(shape, dtype=np.float16)
        array.fill(0)  # touch every page now, not inside a timed step
        return array

    def _random(self, shape: tuple[int, int], scale: float = 1.0) -> Any:
        return self._rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)

    def _weight(self, k: int, n: int) -> Any:
        return self._random((k, n), 1.0 / math.sqrt(k))  # variance-preserving

    def _finite(self, array: Any) -> bool:
        return bool(np.isfinite(array).all())

    def _synchronize(self) -> None:
        return None

    # inputs and bookkeeping
    def upload(self, inputs: _Inputs) -> _Inputs:
        if inputs.num_tokens > len(self._embed):
            self._embed = self._random((2 * inputs.num_tokens, self.hidden))
        return inputs

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
        index = self.xp.asarray(dead)
        for i in range(self.num_layers):
            self.k_cache[i][index] = np.nan
            self.v_cache[i][index] = np.nan
        return len(dead)

    # the step
    def warmup(self) -> None:
        """A small step over block 0 (compiles kernels, faults pages, wakes BLAS threads)."""
        n = min(8, self.block_size)
        inputs = self.upload(
            _Inputs(
                n + 1,
                np.zeros(n + 1, dtype=np.int64),
                np.arange(n + 1) % self.block_size,
                np.asarray([n], dtype=np.int64),
                np.zeros((1, 1), dtype=np.int32),
                np.asarray([1], dtype=np.int32),
                [_Prefill(0, n, n, None, None)],
                np.asarray([n - 1, n], dtype=np.int64),
            )
        )
        self.run(inputs, check=False)

    def run(self, inputs: _Inputs, *, check: bool) -> tuple[float, float, float]:
        """Execute one step; (executed layers' seconds, LM head seconds, wall seconds)."""
        with blas_threads(self.cpu_threads):
            start = time.perf_counter()
            x = self._layers(inputs)
            mid = time.perf_counter()
            logits = x[inputs.sample_rows] @ self.lm_head
            end = time.perf_counter()
        if check and not (self._finite(x) and self._finite(logits)):
            raise ExecutorReadError(
                "a step's output is not finite with unmapped KV blocks poisoned: attention read "
                "a block outside the sequences' block tables"
            )
        return mid - start, end - mid, end - start

    def _layers(self, inputs: _Inputs) -> Any:
        xp = self.xp
        t = inputs.num_tokens
        h, hkv, d = self.heads, self.kv_heads, self.head_dim
        q_out, kv_out = h * d, hkv * d
        x = self._embed[:t]
        for layer in range(self.num_layers):
            w_qkv, w_out, w_up, w_down = self.weights[layer]
            qkv = x @ w_qkv
            q = qkv[:, :q_out].reshape(t, h, d)
            k = qkv[:, q_out : q_out + kv_out].reshape(t, hkv, d)
            v = qkv[:, q_out + kv_out :].reshape(t, hkv, d)
            k_cache, v_cache = self.k_cache[layer], self.v_cache[layer]
            k_cache[inputs.slot_blocks, :, inputs.slot_offsets] = k
            v_cache[inputs.slot_blocks, :, inputs.slot_offsets] = v
            attn = xp.empty((t, h, d), dtype=qkv.dtype)
            if len(inputs.decode_rows):
                attn[inputs.decode_rows] = self._decode(layer, q, inputs)
            for chunk in inputs.prefills:
                rows = slice(chunk.row, chunk.row + chunk.num_new)
                if chunk.token_blocks is None:
                    keys, values = k[rows], v[rows]
                else:
                    keys = k_cache[chunk.token_blocks, :, chunk.token_offsets]
                    values = v_cache[chunk.token_blocks, :, chunk.token_offsets]
                attn[rows] = self._prefill(q[rows], keys, values)
            x = attn.reshape(t, q_out) @ w_out
            up = x @ w_up
            x = (up[:, : self.ffn] * up[:, self.ffn :] if self.is_gated else up) @ w_down
        return x

    def _decode(self, layer: int, q: Any, inputs: _Inputs) -> Any:
        return numpy_decode_attention(
            q[inputs.decode_rows],
            self.k_cache[layer],
            self.v_cache[layer],
            inputs.decode_tables,
            inputs.decode_lens,
            self.scale,
        )

    def _prefill(self, q: Any, k: Any, v: Any) -> Any:
        """Causal attention of n queries (the last n positions) over c keys: [n, H, D]."""
        xp = self.xp
        n, c = q.shape[0], k.shape[0]
        group = self.heads // self.kv_heads
        qf = q.reshape(n, self.kv_heads, group, self.head_dim).transpose(1, 2, 0, 3)
        kf = k.astype(qf.dtype).transpose(1, 0, 2)[:, None]  # [Hkv, 1, c, D]
        vf = v.astype(qf.dtype).transpose(1, 0, 2)[:, None]
        scores = (qf @ kf.swapaxes(-1, -2)) * self.scale  # [Hkv, G, n, c]
        future = xp.arange(c)[None, :] > (xp.arange(n)[:, None] + (c - n))
        scores = xp.where(future, -xp.inf, scores)
        weights = xp.exp(scores - scores.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        out = weights @ vf  # [Hkv, G, n, D]
        return out.transpose(2, 0, 1, 3).reshape(n, self.heads, self.head_dim)


class _CupyDevice(_Device):
    """The GPU: fp16 GEMMs (cuBLAS), the paged kernel, torch SDPA prefill, CUDA-event timing."""

    timer_name = "cuda-events"
    gemm_dtype = "float16"

    def __init__(self, cupy: Any, config: ExecutorConfig, model: Any, *args: Any) -> None:
        self.cp = cupy
        try:
            import torch
        except ImportError:
            torch = None
        self.torch = torch if torch is not None and torch.cuda.is_available() else None
        self.prefill_impl = "torch-sdpa" if self.torch is not None else "cupy-matmul-softmax"
        super().__init__(cupy, config, model, *args)
        self.blas_threads_note = "n/a (GPU)"

    def _provenance(self) -> dict[str, object]:
        from pagesim.calibration.harness import gpu_provenance

        return gpu_provenance(self.cp)

    def _check_memory(self, config: ExecutorConfig, cache_shape: tuple[int, ...]) -> None:
        return None  # the device reports out-of-memory itself, at allocation

    def _zeros_fp16(self, shape: tuple[int, ...]) -> Any:
        return self.cp.zeros(shape, dtype=self.cp.float16)

    def _random(self, shape: tuple[int, int], scale: float = 1.0) -> Any:
        cp = self.cp
        out = cp.empty(shape, dtype=cp.float16)
        for row in range(0, shape[0], 4096):  # in slabs: no fp32 copy of a whole matrix
            block = out[row : row + 4096]
            block[...] = cp.random.standard_normal(block.shape, dtype=cp.float32) * scale
        return out

    def _finite(self, array: Any) -> bool:
        return bool(self.cp.isfinite(array).all())

    def _synchronize(self) -> None:
        self.cp.cuda.get_current_stream().synchronize()

    def upload(self, inputs: _Inputs) -> _Inputs:
        from pagesim.calibration.kernel import plan_decode_attention

        cp = self.cp
        super().upload(inputs)
        for name in ("slot_blocks", "slot_offsets", "decode_rows", "sample_rows"):
            setattr(inputs, name, cp.asarray(getattr(inputs, name)))
        for chunk in inputs.prefills:
            if chunk.token_blocks is not None:
                chunk.token_blocks = cp.asarray(chunk.token_blocks)
                chunk.token_offsets = cp.asarray(chunk.token_offsets)
        if len(inputs.decode_lens):
            inputs.decode_tables = cp.asarray(inputs.decode_tables)
            inputs.decode_lens = cp.asarray(inputs.decode_lens)
            q = cp.empty((len(inputs.decode_lens), self.heads, self.head_dim), dtype=cp.float16)
            inputs.decode_q = q
            inputs.decode_plan = plan_decode_attention(
                q,
                self.k_cache[0],
                self.v_cache[0],
                inputs.decode_lens,
                inputs.decode_tables,
                validate=False,
            )
        return inputs

    def run(self, inputs: _Inputs, *, check: bool) -> tuple[float, float, float]:
        cuda = self.cp.cuda
        start, mid, end = cuda.Event(), cuda.Event(), cuda.Event()
        wall = time.perf_counter()
        start.record()
        x = self._layers(inputs)
        mid.record()
        logits = x[inputs.sample_rows] @ self.lm_head
        end.record()
        end.synchronize()
        wall_s = time.perf_counter() - wall
        if check and not (self._finite(x) and self._finite(logits)):
            raise ExecutorReadError(
                "a step's output is not finite with unmapped KV blocks poisoned: attention read "
                "a block outside the sequences' block tables"
            )
        return (
            cuda.get_elapsed_time(start, mid) * 1e-3,
            cuda.get_elapsed_time(mid, end) * 1e-3,
            wall_s,
        )

    def _decode(self, layer: int, q: Any, inputs: _Inputs) -> Any:
        plan = inputs.decode_plan
        inputs.decode_q[...] = q[inputs.decode_rows]
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

"""A real executor: an ExecutionModel whose `price(plan)` runs the plan and returns the time taken.

`simulate(scenario, execution_factory=measured_factory(...))` drives the simulated clock with
measured step durations instead of predicted ones; the same `RunResult` comes out, its provenance
labelled `execution_model.kind = "measured"`. Each step executes the model's forward pass
(`forward.py`: per layer QKV, the new tokens' K/V into their slots, paged decode attention over
the scheduler's real block tables and causal prefill attention, output projection, MLP, RMSNorm
and residual adds; then the LM head) on NumPy (CPU) or CuPy (GPU, `forward_gpu.py`):

    compute_s = layers_time x L / L' + lm_head_time   (all L layers, or the first L' of them)
                (measured: perf_counter on CPU, CUDA events on GPU, around the launches)
    swap_s, copy_s, flops, bytes_moved                 the roofline's (analytic; in describe)

Per step the record also keeps the host's view: `host_s`, how long Python took to issue the
step, and `wall_s`, until its results were ready. Where host_s is close to the event time the GPU
waited on the host (an eager engine at small batch); `ExecutorConfig.cuda_graphs` replays
decode-only steps from CUDA graphs, as vLLM does, and each record says which mode ran it.

Swaps and copy-on-write copies are carried out on the arrays (so the KV a sequence reads is the
KV it wrote) outside the timed region; their time is the roofline's. Host-side inputs (block
tables, slot mapping, the GPU kernel's launch plan) are built before the timer starts, as
calibration separates `plan` from `run`.

Only paged policies (vllm-v0, vllm-v1) are executed: static and orca allocate contiguous
regions with no block table, and are refused with an InputError.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pagesim.calibration.blas import blas_threads
from pagesim.calibration.executor_config import (
    BACKENDS,
    ExecutorConfig,
    ExecutorReadError,
    StepTiming,
)
from pagesim.calibration.forward import HostForward
from pagesim.calibration.step_inputs import StepInputs, build_step_inputs
from pagesim.simulator.core.catalog import KVDtype, ModelSpec
from pagesim.simulator.core.config import Scenario, SystemConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.plan import StepCost, StepPlan, step_cost
from pagesim.simulator.core.scheduler import Scheduler
from pagesim.simulator.execution.model import ExecutionModel
from pagesim.simulator.execution.roofline import RooflineModel
from pagesim.simulator.kv.paged_cache import PagedKVCache
from pagesim.simulator.policies.paged import PagedScheduler

__all__ = [
    "ExecutorConfig",
    "ExecutorReadError",
    "PlanExecutor",
    "StepRecord",
    "blas_threads",
    "make_forward",
    "measured_factory",
]


DEFAULT_CONFIG = ExecutorConfig()


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One executed step: its shape, the measured times, and the shadow model's prediction."""

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
    host_s: float  # host time to issue the step (GPU: until the last launch returned)
    wall_s: float  # host time until the step's results were ready (launch + synchronise)
    mode: str  # "eager" | "graph"
    predicted_compute_s: float | None
    is_inside_range: bool | None  # the shadow profile priced it without extrapolating


def make_forward(
    config: ExecutorConfig, model: ModelSpec, num_blocks: int, block_size: int, num_layers: int
) -> HostForward:
    """The forward pass of `config.backend` over a KV pool of `num_blocks` blocks."""
    if config.backend not in BACKENDS:
        raise InputError(
            f"unknown executor backend {config.backend!r}; valid: {', '.join(BACKENDS)}"
        )
    if config.backend == "cupy":
        from pagesim.calibration.forward_gpu import GpuForward
        from pagesim.calibration.kernel import import_cupy

        return GpuForward(import_cupy(), config, model, num_blocks, block_size, num_layers)
    return HostForward(config, model, num_blocks, block_size, num_layers)


class PlanExecutor:
    """ExecutionModel that executes each plan over `scheduler.kv`'s block tables and times it."""

    name = "measured"

    def __init__(
        self,
        scenario: Scenario,
        system: SystemConfig,
        scheduler: Scheduler,
        config: ExecutorConfig = DEFAULT_CONFIG,
        shadow: ExecutionModel | None = None,
        progress: Callable[[str], None] | None = None,
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
        if not isinstance(scheduler.kv, PagedKVCache):
            raise InputError(
                f"{scenario.model.name}: the measured executor runs one block table per "
                "sequence; a model with sliding-window or state layers has one per layer group"
            )
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
        self.progress = progress
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
        self._device = make_forward(config, model, self.kv.num_blocks, system.block_size, num_exec)
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
        timing = self._device.run(inputs, check=self.config.poison_unmapped)
        compute_s = timing.layers_s * self.layer_scale + timing.lm_head_s
        for item in plan.work:
            self._mirror[item.seq_id] = self.kv.block_table(item.seq_id)
        self.records.append(_record(len(self.records), plan, compute_s, timing, predicted, inside))
        every = self.config.progress_every_steps
        if self.progress is not None and every > 0 and len(self.records) % every == 0:
            self.progress(running_figures(self.records))
        return step_cost(
            compute_s, analytic.swap_s, analytic.copy_s, analytic.flops, analytic.bytes_moved
        )

    def describe(self) -> dict[str, object]:
        device = self._device
        modes = [r.mode for r in self.records]
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
            "cuda_graphs": self.config.cuda_graphs,
            "num_steps_executed": len(self.records),
            "num_graph_steps": modes.count("graph"),
            "num_graph_fallbacks": device.num_graph_fallbacks,
            "graph_error": device.graph_error,
            "analytic_parts": "swap_s and copy_s from the roofline (blocks x block bytes / host "
            "link; copies at attention bandwidth); FLOPs and bytes are the roofline's counts",
            "not_executed": "rotary embedding, sampling; norm weights are ones and the weights "
            "random (timing does not depend on their values)",
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

    def _inputs(self, plan: StepPlan) -> StepInputs:
        inputs = build_step_inputs(plan, self.kv.block_table, self.kv.block_size)
        return self._device.upload(inputs)


def _record(
    index: int,
    plan: StepPlan,
    compute_s: float,
    timing: StepTiming,
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
        timing.layers_s,
        timing.lm_head_s,
        timing.host_s,
        timing.wall_s,
        timing.mode,
        predicted,
        inside,
    )


def running_figures(records: list[StepRecord]) -> str:
    """One line of figures over the steps so far: step error against the shadow, host share."""
    measured = np.array([r.measured_compute_s for r in records])
    host = np.array([r.host_s for r in records])
    wall = np.array([r.wall_s for r in records])
    line = (
        f"executed {len(records)} steps: measured median {np.median(measured) * 1e3:.3f} ms, "
        f"host issue median {np.median(host) * 1e3:.3f} ms, wall median "
        f"{np.median(wall) * 1e3:.3f} ms"
    )
    predicted = np.array(
        [np.nan if r.predicted_compute_s is None else r.predicted_compute_s for r in records]
    )
    ok = np.isfinite(predicted) & (measured > 0)
    if ok.any():
        error = (predicted[ok] - measured[ok]) / measured[ok] * 100.0
        line += (
            f"; step error vs prediction: median |err| {np.median(np.abs(error)):.2f}%, "
            f"bias {error.mean():+.2f}%"
        )
    graphs = sum(r.mode == "graph" for r in records)
    if graphs:
        line += f"; {graphs} steps replayed from CUDA graphs"
    return line


def measured_factory(
    config: ExecutorConfig = DEFAULT_CONFIG,
    shadow_factory: Callable[[Scenario, SystemConfig], ExecutionModel] | None = None,
    sink: list[PlanExecutor] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Callable[[Scenario, SystemConfig, Scheduler], PlanExecutor]:
    """An `execution_factory` for `simulate`: a PlanExecutor per run (appended to `sink`), each
    plan also priced by `shadow_factory(scenario, system)`'s model when given; `progress` gets a
    line of running figures every `config.progress_every_steps` steps."""

    def factory(scenario: Scenario, system: SystemConfig, scheduler: Scheduler) -> PlanExecutor:
        shadow = None if shadow_factory is None else shadow_factory(scenario, system)
        executor = PlanExecutor(scenario, system, scheduler, config, shadow, progress)
        if sink is not None:
            sink.append(executor)
        return executor

    return factory

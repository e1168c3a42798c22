"""The host's work per engine step (scheduling, preparing inputs, sampling, processing outputs), by
engine era, and which of it overlaps the GPU's.

    host_s    = fixed_s + per_seq_s x sequences in the step
    compute_s = serial_s + max(gpu_s, overlapped_s)

where each part of host_s is serial (the GPU waits for it) or overlapped (done while the GPU
runs the step), as the era's engine does it:

- V0 (vllm-v0; static and orca priced alike): vLLM's V0 engine as of v0.6.3-v0.6.4 (the last
  releases where it was the default, October-November 2024). Serial: `fixed_s`, scheduling and
  preparing the step's inputs, launching its CUDA graph or kernels, waiting for the sampled
  tokens: **fitted** to vLLM's CI runs of that engine on real GPUs (calibration/published_fit.py,
  builds 9523 and 9555). Overlapped: `per_seq_s`, processing each sequence's output
  (detokenizing, checking stops, building the request's output), which asynchronous output
  processing (on by default since v0.6.0 with CUDA graphs: vllm/engine/llm_engine.py
  LLMEngine.step, `async_callback`) runs while the next step's GPU work runs: 0.10 ms per
  sequence, measured by vLLM's RFC #6913 (July 2024: `_process_model_outputs` 0.2 ms at batch 1,
  3.4 ms at batch 32, Llama-3-70B on 4 H100s), the same slope as Vidur's CPU overheads of the
  earlier engine (microsoft/vidur data/profiling/a100/cpu_overheads.csv: 0.100 ms per sequence).
  Its other effect, outputs reaching the client one step late, is in frontend.py.
- V1 (vllm-v1): 1.0 ms, nothing per sequence, serial: an **estimate** (the order of what V1 was
  built for, a persistent batch and CUDA graphs keeping the step's CPU work small: vLLM's V1
  announcement, January 2025, which gives no figure); no published V1 run of the benchmarks
  above exists in the training set to fit it to.
- V1 with async scheduling (opt-in in v0.11; on by default from v0.14.0 unless the
  speculative method cannot take it, so under `vllm_version` "0.33" and "0.34":
  core/vllm_eras.py async_scheduling_default, applied by `for_system`; `[execution]
  async_scheduling` sets it for every V1 system): the same host work, overlapped with the GPU
  step, but for a gap left between steps: 0.16 ms serial, an **estimate** from the one
  measurement found, a prototype of V1's async scheduling (vLLM PR #11133, December 2024: the
  gap between decode steps fell from 5-6 ms to 150-170 us with CUDA graphs, Llama-2-7B at
  batch 256).

A scenario's `step_overhead_s` and `step_overhead_s_per_seq` replace the two figures and keep
the era's split between serial and overlapped.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from pagesim.simulator.core.config import (
    NEWEST_VLLM,
    ExecutionConfig,
    Policy,
    SystemConfig,
)
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.vllm_eras import async_scheduling_default


class EngineEra(Enum):
    """Which vLLM engine a policy stands for: its host time, CUDA graphs, all-reduce and front
    end (overhead.py, cuda_graphs.py, allreduce.py, frontend.py)."""

    V0 = "v0"  # vLLM V0 as of v0.6.3-v0.6.4 (vllm/engine/llm_engine.py); static and orca too
    V1 = "v1"  # vLLM >= 0.8 (vllm/v1/), reference v0.11.0


def era_of(policy: Policy) -> EngineEra:
    return EngineEra.V1 if policy is Policy.VLLM_V1 else EngineEra.V0


V0_FIXED_S = 1.183e-3  # fitted: calibration/published_fit.py
V0_PER_SEQ_S = 0.100e-3  # vLLM RFC #6913 (module docstring); overlapped
V1_FIXED_S = 1.0e-3  # an estimate (module docstring)
ASYNC_GAP_S = 0.16e-3  # V1 async scheduling's gap between steps, serial (vLLM PR #11133)

_SOURCES = {
    EngineEra.V0: "vLLM V0 of v0.6.3-v0.6.4: serial part fitted to vLLM CI builds 9523/9555 "
    "(calibration/published_fit.py); output processing 0.100 ms x sequences overlapped "
    "(asynchronous output processing; vLLM RFC #6913)",
    EngineEra.V1: "estimate: about 1 ms per step with CUDA graphs and a persistent batch (vLLM V1, "
    "v0.11; not measured)",
}


@dataclass(frozen=True, slots=True)
class HostOverhead:
    era: EngineEra
    fixed_s: float
    per_seq_s: float
    is_overlapped: bool  # all of it overlaps the GPU step (V1 async scheduling)
    is_per_seq_overlapped: bool  # the per-sequence part overlaps it (V0 output processing)
    source: str

    def parts(self) -> tuple[float, float, float, float]:
        """(serial fixed, serial per sequence, overlapped fixed, overlapped per sequence)."""
        fixed_over = self.is_overlapped
        seq_over = self.is_overlapped or self.is_per_seq_overlapped
        return (
            ASYNC_GAP_S if fixed_over else self.fixed_s,
            0.0 if seq_over else self.per_seq_s,
            self.fixed_s if fixed_over else 0.0,
            self.per_seq_s if seq_over else 0.0,
        )

    def describe(self) -> dict[str, object]:
        return {
            "engine_era": self.era.value,
            "host_overhead_s": self.fixed_s,
            "host_overhead_s_per_seq": self.per_seq_s,
            "host_overlapped": self.is_overlapped,
            "host_async_gap_s": ASYNC_GAP_S if self.is_overlapped else 0.0,
            "host_per_seq_overlapped": self.is_per_seq_overlapped,
            "host_overhead_source": self.source,
        }

    def text(self) -> str:
        """One line for the resolved knobs: the figures and what overlaps the GPU."""
        value = f"{1e3 * self.fixed_s:.3g} ms + {1e3 * self.per_seq_s:.3g} ms x sequences"
        if self.is_overlapped:
            return value + f", overlapped with the GPU step but {1e3 * ASYNC_GAP_S:.2g} ms"
        if self.is_per_seq_overlapped:
            return value + " (the per-sequence part overlapped with the GPU step)"
        return value


def for_system(config: ExecutionConfig, system: SystemConfig) -> ExecutionConfig:
    """`config` with `async_scheduling` decided for `system`: the scenario's value where it set
    one, else the default of the system's vLLM release (vllm-v1; core/vllm_eras.py
    async_scheduling_default); never for the V0-era policies, nor for pipeline stages, which
    pagesim runs as vLLM does without it (cluster/pipeline_loop.py)."""
    if system.policy is not Policy.VLLM_V1 or system.pipeline_parallel > 1:
        is_async = False
    elif config.async_scheduling is not None:
        is_async = config.async_scheduling
    else:
        version = system.vllm_version or NEWEST_VLLM
        is_async = async_scheduling_default(version, system.speculative)
    return replace(config, async_scheduling=is_async)


def host_overhead(config: ExecutionConfig, era: EngineEra) -> HostOverhead:
    """The era's defaults, with any value the scenario sets in their place."""
    fixed = config.step_overhead_s
    per_seq = config.step_overhead_s_per_seq
    source = _SOURCES[era]
    if fixed is not None and per_seq is not None:
        source = "set in the scenario ([execution] step_overhead_s, step_overhead_s_per_seq)"
    elif fixed is not None or per_seq is not None:  # the other figure is still the era's
        given, other = (
            ("step_overhead_s", "per sequence")
            if fixed is not None
            else ("step_overhead_s_per_seq", "fixed")
        )
        source = f"set in the scenario ([execution] {given}); {other}: {_SOURCES[era]}"
    if fixed is None:
        fixed = V1_FIXED_S if era is EngineEra.V1 else V0_FIXED_S
    if per_seq is None:
        per_seq = 0.0 if era is EngineEra.V1 else V0_PER_SEQ_S
    for name, value in (("step_overhead_s", fixed), ("step_overhead_s_per_seq", per_seq)):
        if not 0 <= value < 60:
            raise InputError(f"execution.{name} must be in [0, 60) seconds, got {value!r}")
    is_async = bool(config.async_scheduling) and era is EngineEra.V1
    return HostOverhead(era, fixed, per_seq, is_async, era is EngineEra.V0, source)

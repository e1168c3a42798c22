"""The host's work per engine step (scheduling, preparing inputs, sampling, processing outputs), by
engine era, and whether it overlaps the GPU's.

    host_s = fixed_s + per_seq_s x sequences in the step
    compute_s = gpu_s + host_s            (the host waits for the GPU, then the GPU for the host)
    compute_s = max(gpu_s, host_s)        (V1 async scheduling: the host prepares step n + 1
                                           while the GPU runs step n)

The defaults, and where they come from:

- V0 (vllm-v0; static and orca priced alike): 1.20 ms + 0.100 ms per sequence. Vidur's measured
  CPU overheads of a vLLM-0.x-era engine (microsoft/vidur, MIT, data/profiling/a100/
  cpu_overheads.csv: schedule + sampler + prepare inputs + process outputs medians, Llama-2-7B,
  TP 1, A100 host, batch 8 to 64), least squares: within 5% at every batch. Beyond 64 sequences
  it is a linear extrapolation.
- V1 (vllm-v1): 1.0 ms, nothing per sequence: an estimate, not measured here (FACTS.md: "V1 keeps
  per-step CPU work near 1 ms with CUDA graphs and a persistent batch", from vLLM's V1
  announcement, Jan 2025).
- V1 with async scheduling: the same host work, overlapped with the GPU step. vLLM v0.11:
  opt-in (`--async-scheduling`); on by default from v0.33 (FACTS.md).

The vLLM v0.6.0 performance post (Sept 2024: Llama-3-8B on one H100, v0.5.3) found the GPU busy
only 38% of the time, the rest in the API server and scheduling: the V0 figures are of that order.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from pagesim.simulator.core.config import ExecutionConfig, Policy
from pagesim.simulator.core.errors import InputError


class EngineEra(Enum):
    """Which vLLM engine a policy stands for, for its host overhead."""

    V0 = "v0"  # vLLM 0.4-0.6 (vllm/core/, vllm/engine/llm_engine.py); static and orca too
    V1 = "v1"  # vLLM >= 0.8 (vllm/v1/), reference v0.11.0


def era_of(policy: Policy) -> EngineEra:
    return EngineEra.V1 if policy is Policy.VLLM_V1 else EngineEra.V0


V0_FIXED_S = 1.20e-3
V0_PER_SEQ_S = 0.100e-3
V1_FIXED_S = 1.0e-3  # an estimate (see the table above)

_SOURCES = {
    EngineEra.V0: "Vidur cpu_overheads.csv (vLLM-0.x-era engine, A100 host): 1.20 ms + 0.100 ms "
    "x sequences, fitted at batch 8-64",
    EngineEra.V1: "estimate: about 1 ms per step with CUDA graphs (FACTS.md, vLLM V1 post)",
}


@dataclass(frozen=True, slots=True)
class HostOverhead:
    era: EngineEra
    fixed_s: float
    per_seq_s: float
    is_overlapped: bool
    source: str

    def describe(self) -> dict[str, object]:
        return {
            "engine_era": self.era.value,
            "host_overhead_s": self.fixed_s,
            "host_overhead_s_per_seq": self.per_seq_s,
            "host_overlapped": self.is_overlapped,
            "host_overhead_source": self.source,
        }


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
    return HostOverhead(
        era, fixed, per_seq, config.async_scheduling and era is EngineEra.V1, source
    )

"""How vLLM of one engine era runs a system's steps beyond the operators: which steps replay a
CUDA graph, at what padded size (cuda_graphs.py), and which all-reduce each call runs
(allreduce.py). The roofline and an imported profile price operators as measured one by one;
given a `VllmRuntime` they price the step as vLLM runs it."""

from __future__ import annotations

from dataclasses import dataclass

from pagesim.simulator.core.config import Scenario, SystemConfig
from pagesim.simulator.core.defaults import resolve_system
from pagesim.simulator.execution.cuda_graphs import CudaGraphs, cuda_graphs_for
from pagesim.simulator.execution.overhead import EngineEra, era_of


@dataclass(frozen=True, slots=True)
class VllmRuntime:
    era: EngineEra
    graphs: CudaGraphs
    gpu_name: str  # the all-reduce's rules depend on the GPU's architecture (allreduce.py)

    def describe(self) -> dict[str, object]:
        return {"cuda_graphs": self.graphs.describe(), "all_reduce_rules": _RULES[self.era]}


_RULES = {
    EngineEra.V0: "vLLM v0.6.4: custom all-reduce (one-shot / two-shot) under 8 MiB on NVLink, "
    "NCCL otherwise",
    EngineEra.V1: "vLLM v0.11: custom all-reduce under its size limit on NVLink, NCCL otherwise "
    "(symmetric memory priced as NCCL)",
}


def runtime_of(scenario: Scenario, system: SystemConfig) -> VllmRuntime:
    """The runtime of `system`'s engine era, with its knobs (the era's defaults where unset)."""
    era = era_of(system.policy)
    resolved = resolve_system(system, scenario.model, scenario.gpu, scenario.tensor_parallel)
    knobs = resolved.system
    assert knobs.max_num_seqs is not None and knobs.max_num_batched_tokens is not None
    graphs = cuda_graphs_for(era, knobs.max_num_seqs, knobs.max_num_batched_tokens)
    return VllmRuntime(era, graphs, scenario.gpu.name)

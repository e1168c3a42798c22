"""KV blocks of a pipeline-parallel system: each stage holds only its own layers' KV.

A stage's GPUs hold its layers' weights (execution/pipeline.py `stage_model`) and, for every
token, its layers' KV only, so each stage gets its own block count by kv/capacity.py's rule. The
engine's one scheduler hands out block ids valid on every stage, so the replica gets the fewest
of any stage: vLLM V1 merges the workers' KV-cache specs and sets every worker's block count to
the smallest among them (v1/core/kv_cache_planning.py `get_kv_cache_configs`, step 5, v0.34.0).
The block's bytes reported are the largest stage's (per GPU).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from pagesim.simulator.core.config import Scenario, SystemConfig
from pagesim.simulator.execution.pipeline import stage_models
from pagesim.simulator.kv.capacity import Capacity


def _stage_runs(scenario: Scenario, system: SystemConfig) -> list[tuple[Scenario, SystemConfig]]:
    """Each stage as a scenario of its own model, with a system of one stage."""
    flat = replace(system, pipeline_parallel=1, pipeline_layer_partition=None)
    models = stage_models(scenario.model, system.pipeline_parallel, system.pipeline_layer_partition)
    return [(replace(scenario, model=model), flat) for model in models]


def pipeline_capacity(
    scenario: Scenario,
    system: SystemConfig,
    capacity_of: Callable[[Scenario, SystemConfig], Capacity],
) -> Capacity:
    """The replica's capacity: the fewest GPU (and CPU) blocks of any stage."""
    stages = [capacity_of(s, flat) for s, flat in _stage_runs(scenario, system)]
    widest = max(stages, key=lambda c: c.block_bytes)
    return replace(
        widest,
        num_gpu_blocks=min(c.num_gpu_blocks for c in stages),
        num_cpu_blocks=min(c.num_cpu_blocks for c in stages),
    )


def pipeline_no_memory_reason(
    scenario: Scenario,
    system: SystemConfig,
    reason_of: Callable[[Scenario, SystemConfig], str | None],
) -> str | None:
    """Why some stage gets no KV block (naming the stage), or None."""
    for index, (stage, flat) in enumerate(_stage_runs(scenario, system)):
        reason = reason_of(stage, flat)
        if reason is not None:
            return f"pipeline stage {index}: {reason}"
    return None

"""Reading and checking a [[systems]] `pipeline_parallel` and `pipeline_layer_partition`.

What pagesim models is vLLM V1's pipeline (core/pipeline_stages.py, cluster/pipeline_loop.py), so
a system with more than one stage must be a vllm-v1 system priced by the roofline. vLLM V0
(0.5-0.6) ran stages otherwise: one scheduler per stage ("virtual engine"), each with 1/P of the
KV blocks (vllm/engine/llm_engine.py `LLMEngine.__init__` and core/scheduler.py
`Scheduler.__init__`, `num_gpu_blocks //= pipeline_parallel_size`, v0.6.4), which pagesim does
not model; static batching and Orca are the vLLM paper's single-GPU baselines.
"""

from __future__ import annotations

from pagesim.simulator.core.config import ExecutionKind, Policy, Scenario, SystemConfig
from pagesim.simulator.core.model_spec import LayerKind
from pagesim.simulator.scenario.table import Table, described


def read_layer_partition(t: Table, key: str) -> tuple[int, ...]:
    """A list of layer counts, one per stage (vLLM's VLLM_PP_LAYER_PARTITION, as a list)."""
    value = t.data[key]
    if (
        not isinstance(value, list)
        or not value
        or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in value)
    ):
        t.fail(
            key,
            f"expected a list of layer counts >= 0, one per stage (e.g. [63, 63]), got "
            f"{described(value)}",
        )
    return tuple(value)


def pipeline_refusal(s: SystemConfig, scenario: Scenario) -> tuple[str, str] | None:
    """(key, problem) when the system's stages cannot run on the scenario, else None."""
    pp, partition = s.pipeline_parallel, s.pipeline_layer_partition
    model = scenario.model
    if partition is not None:
        if len(partition) != pp:
            return (
                "pipeline_layer_partition",
                f"has {len(partition)} entries; pipeline_parallel is {pp}: give one per stage",
            )
        if sum(partition) != model.num_layers:
            return (
                "pipeline_layer_partition",
                f"sums to {sum(partition)}; {model.name} has {model.num_layers} decoder layers",
            )
    if pp == 1:
        return None
    if pp > model.num_layers:
        return (
            "pipeline_parallel",
            f"{pp} is more than {model.name}'s {model.num_layers} decoder layers (a stage would "
            f"hold none); valid: 1..{model.num_layers}",
        )
    if s.policy is not Policy.VLLM_V1:
        why = (
            "vLLM V0 ran stages as virtual engines, each its own scheduler with 1/P of the KV "
            "blocks (v0.6.4), which pagesim does not model"
            if s.policy is Policy.VLLM_V0
            else "static batching and Orca are single-replica baselines"
        )
        return (
            "pipeline_parallel",
            f"{pp} stages need policy vllm-v1 (its batch queue keeps up to P batches in the "
            f"pipe); {why}; the policy is {s.policy.value!r}: use 1",
        )
    if (s.execution or scenario.execution.kind) is not ExecutionKind.ROOFLINE:
        return (
            "pipeline_parallel",
            "pipeline stages are priced by the roofline (a measured profile times the whole "
            'model\'s step); set execution = "roofline" or use 1',
        )
    unmodelled = [
        (scenario.execution.async_scheduling is True, "async scheduling ([execution])"),
        (s.speculative is not None, "speculative decoding"),
        (s.kv_offload is not None, "a KV offload tier (kv_offload)"),
        (scenario.data_parallel > 1, "data-parallel attention ([model] data_parallel > 1)"),
        (
            any(kind is not LayerKind.FULL for kind in model.kinds()),
            f"{model.name}'s sliding-window or state layers",
        ),
    ]
    for is_set, what in unmodelled:
        if is_set:
            return ("pipeline_parallel", f"{pp} stages with {what} are not modelled yet; use 1")
    return None

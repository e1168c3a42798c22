"""How many KV blocks a system gets on its GPU: the one rule the engine, the scenario checks and
`pagesim kv` all use.

    KV budget = GPU memory (as the driver reports it) x utilization - weights per GPU
                - activation reserve (an estimate of vLLM's profiled peak unless given)
    blocks    = floor(KV budget / bytes per block)

with bytes per block = KV bytes per token (per GPU under tensor parallelism) x block size.

A hybrid model (sliding-window or state layers) is laid out as vLLM V1 lays it out
(kv/hybrid_layout.py): a block is one layer group's page, `block_bytes` = block size x one
layer's bytes per token x layers per group, and its block size may be raised for state layers.
With the hybrid manager off (`hybrid_kv_cache_manager = false`, vLLM's
--disable-hybrid-kv-cache-manager) a model of full and sliding-window layers is laid out as one
group of all of them: every layer keeps KV for every token (vLLM v1/core/kv_cache_utils.py
unify_hybrid_kv_cache_specs turns each SlidingWindowSpec into a FullAttentionSpec, "blocks are
allocated for all tokens", while the attention still computes over the window only); a model of
one layer kind keeps its layout; one mixing state layers with attention cannot run (vLLM: "failed
to convert the KV cache specs to one unified type").

A system that speculates with a draft model, an EAGLE head or an MTP layer holds the drafter too:
its weights, and its attention layers' KV in every block (vLLM V1 loads the drafter into the
target's config, whose attention layers the KV cache spec then includes: v1/spec_decode/eagle.py
and draft_model.py `load_model`, "that mutates the forward_context of the vllm_config").
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pagesim.simulator.core.catalog import GIB, GPUSpec, ModelSpec
from pagesim.simulator.core.config import Policy, Scenario, SystemConfig
from pagesim.simulator.core.defaults import driver_memory_bytes, resolve_system
from pagesim.simulator.core.draft import draft_model_spec
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.model_spec import LayerKind
from pagesim.simulator.core.pipeline_stages import stage_models
from pagesim.simulator.kv.hybrid_layout import HybridLayout, hybrid_layout


def kv_budget_bytes(
    gpu: GPUSpec,
    memory_utilization: float,
    weight_bytes: int,
    activation_reserve_bytes: float = 0.0,
) -> float:
    """Bytes left for the KV cache on one GPU (negative when the weights do not fit): the
    utilization applies to the memory the driver reports, as vLLM's does (v1/worker/
    gpu_worker.py determine_available_memory), not to the marketed size."""
    return driver_memory_bytes(gpu) * memory_utilization - weight_bytes - activation_reserve_bytes


def weight_bytes_per_gpu(model: ModelSpec, tensor_parallel: int, data_parallel: int = 1) -> int:
    """Weights split over the tensor-parallel group: 16-bit, or the decoder layers' linear
    weights (or a checkpoint's experts) in the model's weight dtype (`ModelSpec.weight_bytes`).
    Expert parallelism over the same GPUs holds the same bytes per GPU. With data_parallel d
    (DP attention + expert-parallel MoE, vLLM --data-parallel-size d --enable-expert-parallel)
    each GPU holds 1/t of everything but the routed experts, and 1/(d t) of those."""
    if data_parallel == 1 or model.moe is None:
        return model.weight_bytes(2, tensor_parallel)
    moe = model.moe
    bits = model.weight_dtype.bits
    num_moe_layers = model.num_layers - model.num_dense_mlp_layers
    routed = num_moe_layers * moe.num_experts * moe.expert_params(model.hidden_size) * bits / 8
    rest = model.weight_bytes(2, 1) - routed
    return int(rest / tensor_parallel + routed / (tensor_parallel * data_parallel))


def kv_bytes_per_token(scenario: Scenario, system: SystemConfig) -> int:
    """KV bytes per token per GPU of a system: the model's, plus its drafter's if it has one."""
    tp = scenario.tensor_parallel
    per_token = scenario.model.kv_bytes_per_token(scenario.kv_dtype, tp)
    if system.speculative is None:
        return per_token
    drafter = draft_model_spec(system.speculative, scenario.model)
    return per_token + (0 if drafter is None else drafter.kv_bytes_per_token(scenario.kv_dtype, tp))


def drafter_weight_bytes(system: SystemConfig, model: ModelSpec, tensor_parallel: int) -> int:
    """Weight bytes per GPU of the system's drafter (0 without one; same tensor parallelism)."""
    if system.speculative is None:
        return 0
    drafter = draft_model_spec(system.speculative, model)
    return 0 if drafter is None else weight_bytes_per_gpu(drafter, tensor_parallel)


@dataclass(frozen=True, slots=True)
class Capacity:
    """KV memory of one system on one GPU."""

    num_gpu_blocks: int
    num_cpu_blocks: int
    block_size: int
    block_bytes: int
    kv_bytes_per_token: int
    layout: HybridLayout | None = None  # a hybrid model's groups; None: one group of all layers

    @property
    def num_token_slots(self) -> int:
        return self.num_gpu_blocks * self.block_size


def no_kv_memory_reason(scenario: Scenario, system: SystemConfig) -> str | None:
    """Why `system` gets no KV block on the scenario's GPU, or None when it gets at least one."""
    if system.num_kv_blocks is not None:
        return None
    if system.pipeline_parallel > 1:  # why some stage gets no block, naming the stage
        for index, (stage, flat) in enumerate(_stage_runs(scenario, system)):
            reason = no_kv_memory_reason(stage, flat)
            if reason is not None:
                return f"pipeline stage {index}: {reason}"
        return None
    model, gpu, tp = scenario.model, scenario.gpu, scenario.tensor_parallel
    system = resolve_system(system, model, gpu, tp).system
    assert system.activation_reserve_gib is not None
    weights = weight_bytes_per_gpu(model, tp, scenario.data_parallel)
    weights += drafter_weight_bytes(system, model, tp)
    reserve = system.activation_reserve_gib * GIB
    available = kv_budget_bytes(gpu, system.gpu_memory_utilization, weights, reserve)
    block_bytes = block_shape(scenario, system)[1]
    if available >= block_bytes:
        return None
    return (
        f"no memory left for the KV cache: {model.name} weights"
        f"{' (and its drafter)' if system.speculative is not None else ''} take "
        f"{weights / GIB:.1f} GiB per GPU and {gpu.name} x {system.gpu_memory_utilization:g} "
        f"less {system.activation_reserve_gib:.2f} GiB of activations is "
        f"{driver_memory_bytes(gpu) * system.gpu_memory_utilization / GIB:.1f} GiB; "
        "use a bigger GPU, more tensor_parallel, or set num_kv_blocks"
    )


def flattens(system: SystemConfig, model: ModelSpec) -> bool:
    """Whether the hybrid manager off lays `model` out as one group of full layers: only a mix
    of full and sliding-window layers (vLLM's unify_hybrid_kv_cache_specs returns early when
    every layer is of one kind, which keeps an all-window model's window)."""
    kinds = set(model.kinds())
    return (
        not system.hybrid_kv_cache_manager
        and LayerKind.FULL in kinds
        and LayerKind.SLIDING in kinds
        and LayerKind.STATE not in kinds
    )


def hybrid_off_reason(system: SystemConfig, model: ModelSpec) -> str | None:
    """Why `system` cannot run with its hybrid KV-cache manager off, or None (also when on)."""
    if system.hybrid_kv_cache_manager:
        return None
    if system.policy is not Policy.VLLM_V1:
        return (
            "false: the hybrid KV-cache manager is vLLM V1's (--disable-hybrid-kv-cache-manager); "
            f"the policy is {system.policy.value!r}: set it on vllm-v1 systems only"
        )
    kinds = set(model.kinds())
    if LayerKind.STATE in kinds and len(kinds) > 1:
        return (
            f"false: model {model.name!r} has state (linear-attention) layers, which vLLM cannot "
            'lay out without its hybrid KV-cache manager (it refuses to start: "failed to '
            'convert the KV cache specs to one unified type"); set it true'
        )
    return None


def block_shape(scenario: Scenario, system: SystemConfig) -> tuple[int, int, HybridLayout | None]:
    """(tokens per block, bytes per block, hybrid layout or None) of `system` on the scenario."""
    model, tp = scenario.model, scenario.tensor_parallel
    reason = hybrid_off_reason(system, model)
    if reason is not None:
        raise InputError(f"system {system.name!r}: hybrid_kv_cache_manager = {reason}")
    layout = (
        None
        if flattens(system, model)
        else hybrid_layout(model, scenario.kv_dtype, tp, system.block_size)
    )
    if layout is not None:
        return layout.block_size, layout.block_bytes, layout
    return system.block_size, kv_bytes_per_token(scenario, system) * system.block_size, None


def kv_capacity(scenario: Scenario, system: SystemConfig) -> Capacity:
    """GPU blocks by the rule above (or the system's explicit `num_kv_blocks`), CPU swap blocks
    from its swap space. Pipeline stages: the fewest of any stage's (below)."""
    if system.pipeline_parallel > 1:
        return _pipeline_capacity(scenario, system)
    model, tp = scenario.model, scenario.tensor_parallel
    block_size, block_bytes, layout = block_shape(scenario, system)
    per_token = block_bytes // block_size
    cpu_blocks = int(system.swap_space_gib * GIB) // block_bytes
    if system.num_kv_blocks is not None:
        return Capacity(
            system.num_kv_blocks, cpu_blocks, block_size, block_bytes, per_token, layout
        )
    reason = no_kv_memory_reason(scenario, system)
    if reason is not None:
        raise InputError(f"system {system.name!r}: {reason}")
    system = resolve_system(system, model, scenario.gpu, tp).system
    assert system.activation_reserve_gib is not None
    available = kv_budget_bytes(
        scenario.gpu,
        system.gpu_memory_utilization,
        weight_bytes_per_gpu(model, tp, scenario.data_parallel)
        + drafter_weight_bytes(system, model, tp),
        system.activation_reserve_gib * GIB,
    )
    return Capacity(
        int(available // block_bytes), cpu_blocks, block_size, block_bytes, per_token, layout
    )


# Pipeline parallelism: each stage holds only its own layers' KV. A stage's GPUs hold its layers'
# weights (core/pipeline_stages.py `stage_model`) and, for every token, its layers' KV only, so
# each stage gets its own block count by the rule above. The engine's one scheduler hands out
# block ids valid on every stage, so the replica gets the fewest of any stage: vLLM V1 merges the
# workers' KV-cache specs and sets every worker's block count to the smallest among them
# (v1/core/kv_cache_planning.py `get_kv_cache_configs`, step 5, v0.34.0). The block's bytes
# reported are the largest stage's (per GPU).


def _stage_runs(scenario: Scenario, system: SystemConfig) -> list[tuple[Scenario, SystemConfig]]:
    """Each stage as a scenario of its own model, with a system of one stage."""
    flat = replace(system, pipeline_parallel=1, pipeline_layer_partition=None)
    models = stage_models(scenario.model, system.pipeline_parallel, system.pipeline_layer_partition)
    return [(replace(scenario, model=model), flat) for model in models]


def _pipeline_capacity(scenario: Scenario, system: SystemConfig) -> Capacity:
    """The replica's capacity: the fewest GPU (and CPU) blocks of any stage."""
    stages = [kv_capacity(s, flat) for s, flat in _stage_runs(scenario, system)]
    widest = max(stages, key=lambda c: c.block_bytes)
    return replace(
        widest,
        num_gpu_blocks=min(c.num_gpu_blocks for c in stages),
        num_cpu_blocks=min(c.num_cpu_blocks for c in stages),
    )

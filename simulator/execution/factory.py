"""One place that builds a system's execution model from the scenario's [execution] section (or
the system's own `execution` kind) and the system's engine era.

The same idea in the policies layer: simulator/policies/factory.py builds the scheduler.
"""

from __future__ import annotations

from pagesim.simulator.core.catalog import ModelSpec
from pagesim.simulator.core.config import ExecutionKind, Scenario, SystemConfig
from pagesim.simulator.execution.model import ExecutionModel
from pagesim.simulator.execution.overhead import era_of, for_system
from pagesim.simulator.execution.roofline import RooflineModel
from pagesim.simulator.execution.speculative import speculative_model
from pagesim.simulator.execution.vllm_runtime import runtime_of
from pagesim.simulator.kv.block_budget import block_shape


def make_execution_model(scenario: Scenario, system: SystemConfig) -> ExecutionModel:
    s = scenario
    era = era_of(system.policy)
    config = for_system(s.execution, system)  # async scheduling as the system's release runs
    kind = system.execution or s.execution.kind
    # The capacity's block size: a hybrid model with state layers raises it as vLLM does
    # (kv/hybrid_layout.py: 544 tokens for Qwen3-Next), and the block term prices those blocks.
    block_size = block_shape(s, system)[0]
    runtime = runtime_of(s, system)  # CUDA graphs and vLLM's all-reduce (vllm_runtime.py)

    def roofline(model: ModelSpec | None = None) -> RooflineModel:
        return RooflineModel(
            model or s.model,
            s.gpu,
            config,
            s.kv_dtype,
            s.tensor_parallel,
            block_size,
            era,
            data_parallel=s.data_parallel,
            expert_parallel=s.expert_parallel,
            runtime=runtime,
        )

    model: ExecutionModel
    if system.pipeline_parallel > 1:  # one roofline per stage (scenario checks: roofline only)
        from pagesim.simulator.execution.pipeline_model import PipelineModel

        return PipelineModel.build(s, system, roofline)
    if kind is ExecutionKind.PROFILE:
        from pagesim.simulator.execution.profile import ProfileModel

        model = ProfileModel(
            s.model, s.gpu, config, s.kv_dtype, s.tensor_parallel, block_size, era, runtime
        )
    else:
        model = roofline()
    if system.speculative is not None:  # the draft and the verification's extra LM-head rows
        target = model if isinstance(model, RooflineModel) else roofline()
        return speculative_model(model, target, system.speculative, config)
    return model

"""One place that builds a system's execution model from the scenario's [execution] section."""

from __future__ import annotations

from pagesim.simulator.core.config import ExecutionKind, Scenario, SystemConfig
from pagesim.simulator.execution.model import ExecutionModel
from pagesim.simulator.execution.roofline import RooflineModel


def make_execution_model(scenario: Scenario, system: SystemConfig) -> ExecutionModel:
    # Both models take (model, gpu, config, kv_dtype, tensor_parallel, block_size).
    args = (
        scenario.model,
        scenario.gpu,
        scenario.execution,
        scenario.kv_dtype,
        scenario.tensor_parallel,
        system.block_size,
    )
    if scenario.execution.kind is ExecutionKind.PROFILE:
        from pagesim.simulator.execution.profile import ProfileModel

        return ProfileModel(*args)
    return RooflineModel(*args)

"""Prices one batch through a pipeline of stages: each stage's time, and its hand-offs.

Each stage is a model of its own (core/pipeline_stages.py `stage_model`: its layers, the
embedding on the first, the LM head on the last) priced by the roofline on the stage's
tensor-parallel group, so a stage's all-reduces are the TP group's as without stages. A stage
that does not hold the LM head is charged without it (`RooflineModel.lm_head_s`). Every stage
pays the host overhead of a step (each stage's worker prepares its own inputs in vLLM V1; the
engine core schedules once): an estimate, stated in the description. Swaps and copy-on-write
copies are charged to the first stage.

The row the recorder keeps for a batch is the mean over stages (`price`): its compute time the
stages' mean, its FLOPs and bytes the stages' mean, so that a row's MFU/MBU are per GPU and the
energy of a replica of P x t GPUs sums each stage's busy time once (metrics/energy.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pagesim.simulator.core.catalog import ModelSpec
from pagesim.simulator.core.config import Scenario, SystemConfig
from pagesim.simulator.core.pipeline_stages import stage_models
from pagesim.simulator.core.plan import StepCost, StepPlan, step_cost
from pagesim.simulator.execution.pipeline_link import StageLinks
from pagesim.simulator.execution.roofline import RooflineModel


class PipelineModel:
    """A plan's time on each stage and each hand-off (`stage_times`), and its recorder row."""

    name = "roofline (pipeline)"

    def __init__(self, stages: Sequence[RooflineModel], links: StageLinks) -> None:
        if len(links.crossing) != len(stages) - 1:
            raise ValueError("one hand-off per stage boundary")
        self.stages = tuple(stages)
        self.links = links

    @classmethod
    def build(
        cls,
        scenario: Scenario,
        system: SystemConfig,
        roofline: Callable[[ModelSpec], RooflineModel],
    ) -> PipelineModel:
        """The model of `system` on `scenario`: one roofline per stage model."""
        pp = system.pipeline_parallel
        models = stage_models(scenario.model, pp, system.pipeline_layer_partition)
        gpu = scenario.gpu
        links = StageLinks.of(
            gpu.name, pp, scenario.model.hidden_size, scenario.tensor_parallel, gpu.scale_up_gpus
        )
        return cls([roofline(m) for m in models], links)

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    def stage_costs(self, plan: StepPlan) -> tuple[tuple[float, ...], tuple[float, ...], StepCost]:
        """(seconds on each stage, seconds of each hand-off, the recorder's row) of `plan`."""
        costs = [stage.price(plan) for stage in self.stages]
        last = len(costs) - 1
        num_seqs = plan.num_seqs
        times = [
            cost.compute_s - (0.0 if i == last or not num_seqs else stage.lm_head_s(num_seqs))
            for i, (stage, cost) in enumerate(zip(self.stages, costs, strict=True))
        ]
        first = costs[0]
        times[0] += first.swap_s + first.copy_s
        num_stages = len(costs)
        row = step_cost(
            sum(times) / num_stages - first.swap_s / num_stages - first.copy_s / num_stages,
            first.swap_s / num_stages,
            first.copy_s / num_stages,
            sum(c.flops for c in costs) / num_stages,
            sum(c.bytes_moved for c in costs) / num_stages,
        )
        return tuple(times), self.links.transfer_s(plan.num_tokens), row

    def price(self, plan: StepPlan) -> StepCost:
        """The recorder's row of `plan` (the stages' mean; module docstring)."""
        return self.stage_costs(plan)[2]

    def describe(self) -> dict[str, object]:
        described = dict(self.stages[-1].describe())
        counts = [stage.model.num_layers for stage in self.stages]
        notes = list(described.get("warnings", []))  # type: ignore[call-overload]
        notes.append(
            "pipeline stages each pay a step's host overhead (each worker prepares its inputs): "
            "an estimate"
        )
        if not self.links.is_measured:
            notes.append(self.links.describe())
        described["warnings"] = notes
        described["pipeline"] = {
            "stages": self.num_stages,
            "layers_per_stage": counts,
            "handoffs": self.links.describe(),
        }
        return described

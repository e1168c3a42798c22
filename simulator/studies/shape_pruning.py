"""Pruning a fleet search's shapes before anything is simulated: a replica layout (a GPU at
tensor-parallel x pipeline-parallel x data-parallel degrees, experts split or not) that cannot run
the model is listed with the rule it breaks, and never simulated.

The rules, in the order they are checked (the first broken one is reported):

    dense model          data_parallel > 1 or expert_parallel on a model without experts
    experts do not split the layout's GPUs do not divide the routed experts (ExpertLayout)
    TP vs heads          tensor_parallel does not divide the attention heads
    TP across nodes      tensor_parallel above the GPU's scale-up domain (`scale_up_gpus`: 8 on
                         DGX/HGX and MI nodes, up to 72 on GB200 NVL72): the roofline prices
                         TP's all-reduce over that link; pipeline stages and DP ranks may span
                         nodes
    over max_gpus        one replica needs more GPUs than [capacity] max_gpus allows the fleet
    PP > layers          more stages than decoder layers (a stage would hold none)
    PP not modelled      stages the system cannot run (scenario/pipeline.py `pipeline_refusal`:
                         vllm-v1 and the roofline only; not with DP attention, ...)
    DP group not modelled  a DP group runs on the roofline, without sessions (cluster/dp_group.py)
    weights + KV do not fit  the weights per GPU leave no room for one KV block (the KV rule of
                         kv/block_budget.py, per stage for a pipeline; experts split over DP x TP)
    cannot run           anything else the replica refuses to build (fleet_fit.py)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from pagesim.simulator.core.catalog import GPUSpec
from pagesim.simulator.core.config import ExecutionKind, Scenario, SystemConfig
from pagesim.simulator.core.deployments import system_scenario
from pagesim.simulator.execution.moe_cost import ExpertLayout
from pagesim.simulator.scenario.hardware_fit import scale_up_problem
from pagesim.simulator.scenario.pipeline import pipeline_refusal
from pagesim.simulator.studies.fleet_fit import unfit_reason


@dataclass(frozen=True, slots=True)
class Layout:
    """How one replica spreads the model over GPUs (vLLM's --tensor-parallel-size,
    --pipeline-parallel-size, --data-parallel-size, --enable-expert-parallel)."""

    tensor_parallel: int
    pipeline_parallel: int = 1
    data_parallel: int = 1
    expert_parallel: bool = False

    @property
    def num_gpus(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel * self.data_parallel

    @property
    def text(self) -> str:
        """E.g. "TP8 x PP2", "TP1 x DP8 EP", "TP2 EP"."""
        parts = [f"TP{self.tensor_parallel}"]
        parts += [f"PP{self.pipeline_parallel}"] if self.pipeline_parallel > 1 else []
        parts += [f"DP{self.data_parallel}"] if self.data_parallel > 1 else []
        return " x ".join(parts) + (" EP" if self.expert_parallel else "")

    def apply(
        self, scenario: Scenario, system: SystemConfig, gpu: GPUSpec
    ) -> tuple[Scenario, SystemConfig]:
        """`scenario` and `system` with one replica laid out this way on `gpu` (a system's own
        stage split is kept when its stage count is searched unchanged)."""
        on = replace(
            scenario,
            gpu=gpu,
            tensor_parallel=self.tensor_parallel,
            data_parallel=self.data_parallel,
            expert_parallel=self.expert_parallel,
        )
        if self.pipeline_parallel != system.pipeline_parallel:
            system = replace(
                system, pipeline_parallel=self.pipeline_parallel, pipeline_layer_partition=None
            )
        return on, system


@dataclass(frozen=True, slots=True)
class Pruned:
    rule: str  # one of the rules above, as counted in the search's summary
    detail: str  # the whole reason, as the ranking's why_not gives it


def prune(
    scenario: Scenario,
    system: SystemConfig,
    layout: Layout,
    max_gpus: int | None = None,
    min_replicas: int = 1,
) -> Pruned | None:
    """The first rule above that `layout` breaks for `system` of `scenario` (already laid out:
    `Layout.apply`), or None when one replica can run; the smallest fleet searched is
    `min_replicas` replicas (one DP group)."""
    model, tp, pp, dp = (
        scenario.model,
        layout.tensor_parallel,
        layout.pipeline_parallel,
        layout.data_parallel,
    )
    if model.moe is None and (dp > 1 or layout.expert_parallel):
        what = f"data_parallel {dp}" if dp > 1 else "expert_parallel"
        return Pruned("dense model", f"{what}: {model.name} has no experts to split")
    found = ExpertLayout(tp, dp, layout.expert_parallel).problem(model)
    if found is not None:
        return Pruned("experts do not split", f"{found[0]}: {found[1]}")
    if model.num_heads % tp:
        return Pruned(
            "TP vs heads", f"TP{tp} does not divide {model.name}'s {model.num_heads} heads"
        )
    across = scale_up_problem(scenario.gpu, tp)  # the rule [model] tensor_parallel is read by
    if across is not None:
        return Pruned("TP across nodes", across)
    fewest = layout.num_gpus * (1 if dp > 1 else min_replicas)
    if max_gpus is not None and fewest > max_gpus:
        return Pruned(
            "over max_gpus",
            f"the smallest fleet of this shape needs {fewest} GPUs; max_gpus is {max_gpus}",
        )
    if pp > model.num_layers:
        return Pruned(
            "PP > layers", f"PP{pp} is more than {model.name}'s {model.num_layers} decoder layers"
        )
    refused = pipeline_refusal(system, scenario)
    if refused is not None:
        return Pruned("PP not modelled", f"{refused[0]}: {refused[1]}")
    if dp > 1 and (
        scenario.execution.kind is not ExecutionKind.ROOFLINE
        or scenario.workload.sessions is not None
    ):
        return Pruned(
            "DP group not modelled",
            "a DP group runs on the roofline, without [workload.sessions] (cluster/dp_group.py)",
        )
    unfit = unfit_reason(system_scenario(scenario, system), system)
    if unfit is None:
        return None
    fits = "no memory left for the KV cache" in unfit or "no KV block fits" in unfit
    return Pruned("weights + KV do not fit" if fits else "cannot run", unfit)


def pruning_line(rules: Sequence[str | None]) -> str | None:
    """How many of the shapes (each's broken rule, None: not pruned) were pruned and by which
    rules, in words (None: none were)."""
    counts = Counter(rule for rule in rules if rule is not None)
    if not counts:
        return None
    by_rule = ", ".join(f"{n} {rule}" for rule, n in counts.most_common())
    total = sum(counts.values())
    return f"pruned {total} of {len(rules)} shapes before simulating: {by_rule}"

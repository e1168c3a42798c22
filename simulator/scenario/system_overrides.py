"""A [[systems]] entry's own `tensor_parallel`, `weight_dtype` and `kv_dtype`: read like [model]'s
keys, and refused where they would be ambiguous.

They let one run compare deployments of one model, e.g. BF16 weights at TP 8 x PP 2 against FP8
at TP 8 (scenarios/llama_405b_pipeline.toml). core/deployments.py `system_scenario` applies them;
where they are refused:

    [cluster] pools     each pool has its own tensor_parallel (the dtypes apply on pools)
    [capacity]          the search chooses the degree ([capacity] tensor_parallel)
    data_parallel > 1 or expert_parallel
                        [model]'s degree lays out the experts and the DP group ([wide_ep])
"""

from __future__ import annotations

from pagesim.simulator.core.catalog import KVDtype
from pagesim.simulator.core.config import Scenario
from pagesim.simulator.core.model_spec import WeightDtype
from pagesim.simulator.scenario.table import Ctx, Table

# Each key's upper bound is [model]'s (scenario/load.py).
MAX_TENSOR_PARALLEL = 1024


def read_tensor_parallel(t: Table, key: str) -> int:
    tp: int = t.integer(key, hi=MAX_TENSOR_PARALLEL)
    return tp


def heads_refusal(scenario: Scenario, tp: int) -> str | None:
    """Why a system's tensor_parallel cannot split the model's heads (as [model]'s must)."""
    heads = scenario.model.num_heads
    if heads % tp == 0:
        return None
    valid = ", ".join(str(d) for d in range(1, heads + 1) if heads % d == 0)
    return f"{tp} does not divide {scenario.model.name}'s {heads} heads; valid: {valid}"


def read_weight_dtype(t: Table, key: str) -> WeightDtype:
    value: WeightDtype = t.choice(key, WeightDtype)
    return value


def read_kv_dtype(t: Table, key: str) -> KVDtype:
    value: KVDtype = t.choice(key, KVDtype)
    return value


def check_own_degree(
    ctx: Ctx, scenario: Scenario, where: dict[str, dict[str, str]], has_capacity: bool
) -> None:
    """Refuse a system's own tensor_parallel where another key already sets the degree;
    `where` maps each system's name to its keys' dotted paths (scenario/systems.py)."""
    for system in scenario.systems:
        if system.tensor_parallel is None:
            continue
        key = where[system.name]["tensor_parallel"]
        if scenario.cluster is not None:
            ctx.fail(
                key,
                "a system's own tensor_parallel is not read on [cluster] pools: each pool "
                "sets its degree (cluster.pools tensor_parallel); remove it here",
            )
        if has_capacity:
            ctx.fail(
                key,
                "a capacity search chooses the degree ([capacity] tensor_parallel); remove it here",
            )
        if scenario.data_parallel > 1 or scenario.expert_parallel:
            ctx.fail(
                key,
                "with data_parallel > 1 or expert_parallel, [model] tensor_parallel lays out "
                "the experts and the DP group; set it there and remove it here",
            )

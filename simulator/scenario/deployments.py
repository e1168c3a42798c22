"""Every kind of replica a run builds, checked as the run would build it (core/deployments.py):
each pool's GPU, tensor-parallel degree and system, not only [gpu] and [model]'s degree.

Per kind of replica (a system on a GPU at a degree, in a role): the system's knobs with the
workload, model and GPU (scenario/systems.py `check_system`); its execution model, built as the
run builds it (a profile must have been measured on that GPU, at that degree: the run's own
refusal, raised here first); in a prefill or decode pool, a paged policy. Per system's run: the
host memory its replicas' KV block pools take (cluster/host_memory.py). A message about a pool
whose GPU or degree is not [gpu]'s or [model]'s ends by naming the pool.
"""

from __future__ import annotations

from pagesim.simulator.cluster.disagg_checks import policy_reason
from pagesim.simulator.cluster.host_memory import fleet_blocks_reason
from pagesim.simulator.core.cluster import PoolRole
from pagesim.simulator.core.config import Scenario
from pagesim.simulator.core.defaults import resolve_system
from pagesim.simulator.core.deployments import Deployment, deployments
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.execution.factory import make_execution_model
from pagesim.simulator.scenario.systems import SystemPlace, check_system
from pagesim.simulator.scenario.table import Table


def on_which(d: Deployment, scenario: Scenario) -> str:
    """ " (on cluster pool ...)" for replicas off [gpu] or [model]'s degree, else ""."""
    if d.pool is None:
        return ""
    if (d.scenario.gpu, d.scenario.tensor_parallel) == (scenario.gpu, scenario.tensor_parallel):
        return ""
    return f" (on {d.where})"


def check_deployments(top: Table, scenario: Scenario, places: dict[str, SystemPlace]) -> None:
    """ScenarioError naming the key, the problem and (off [gpu]) the pool, for the first kind
    of replica the run could not build or run."""
    ctx = top.ctx
    every = deployments(scenario)
    seen = set()
    for d in every:
        kind = (d.system.name, d.scenario.gpu, d.scenario.tensor_parallel, d.role)
        if kind in seen:
            continue
        seen.add(kind)
        on = on_which(d, scenario)
        place = places[d.system.name]
        check_system(ctx, d.system, place, d.scenario, on)
        if d.role is not PoolRole.BOTH:
            reason = policy_reason(d.system)
            if reason is not None:
                # check_system refused stages off vllm-v1 first: a reason here with stages
                # is theirs
                field = "pipeline_parallel" if d.system.pipeline_parallel > 1 else "policy"
                key = place[1].get(field, f"{place[0]}.{field}")  # maybe [defaults]'s
                ctx.fail(key, f"{reason}, in {d.where}")
        resolved = resolve_system(
            d.system, d.scenario.model, d.scenario.gpu, d.scenario.tensor_parallel
        )
        try:
            make_execution_model(d.scenario, resolved.system)
        except InputError as exc:
            profile = scenario.execution.profile_path
            key = "execution.profile" if profile and str(exc).startswith(str(profile)) else ""
            ctx.fail(key, f"{exc}{on}")
    if scenario.cluster is None:
        return
    for system in scenario.systems:
        too_big = fleet_blocks_reason([d for d in every if d.runs is system])
        if too_big is not None:
            top.table("cluster").fail("pools", too_big)

"""What a run builds: for each system simulated, the replicas of each pool, each kind of replica
one `Deployment` (a system on a GPU at a tensor-parallel degree, in a role).

The fleet (cluster/fleet.py, cluster/disagg.py) builds its replicas from `pool_deployments`, and
`pagesim validate` and `pagesim scenarios show --resolved` check and show `deployments`: so the
checks see every pool's GPU, degree and system, as the run does, and nothing the run does not
build ([gpu] itself is not a replica when every pool names another GPU).

    no [cluster]           one replica of each system on [gpu] at [model] tensor_parallel (or
                           the system's own: `system_scenario`)
    [[cluster.pools]]      per system simulated, each pool: its `count` replicas of the pool's
                           `system` (or the one simulated) on the pool's GPU and degree; a system
                           in `colocated_systems` runs the same pools with role "both"

The same idea in the scenario layer: simulator/scenario/deployments.py checks them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pagesim.simulator.core.cluster import ClusterConfig, PoolConfig, PoolRole
from pagesim.simulator.core.config import Scenario, SystemConfig
from pagesim.simulator.core.errors import InputError, choices_text


@dataclass(frozen=True, slots=True)
class Deployment:
    """`count` alike replicas: `system` on `scenario`'s GPU and degree (the pool's), in `role`,
    built when system `runs` is simulated."""

    runs: SystemConfig  # the [[systems]] entry whose run builds these replicas
    system: SystemConfig  # what they run: the pool's `system`, or `runs`
    scenario: Scenario  # gpu and tensor_parallel are the pool's
    pool: PoolConfig | None = None  # None: the single replica of a scenario without [cluster]
    pool_index: int | None = None  # its [[cluster.pools]] index

    @property
    def count(self) -> int:
        return 1 if self.pool is None else self.pool.count

    @property
    def pool_name(self) -> str:
        return "replica" if self.pool is None else self.pool.name

    @property
    def role(self) -> PoolRole:
        return PoolRole.BOTH if self.pool is None else self.pool.role

    @property
    def where(self) -> str:
        """Which replicas, in words: "" for a scenario's one replica, else the pool's."""
        if self.pool is None:
            return ""
        role = "" if self.role is PoolRole.BOTH else f", {self.role.value}"
        return (
            f"cluster pool {self.pool.name!r}: {self.count} x {self.scenario.gpu.name} at "
            f"tensor_parallel {self.scenario.tensor_parallel}{role}"
        )


def system_scenario(scenario: Scenario, system: SystemConfig) -> Scenario:
    """`scenario` as `system` runs it: its own tensor_parallel, weight_dtype and kv_dtype in
    place of [model]'s where it sets them. The one place they apply: the run (engine.simulate,
    each pool here), the checks and `pagesim deploy` all read the scenario this returns, so the
    KV capacity, the step costs, the GPU count and the command line agree."""
    model = scenario.model
    if system.weight_dtype is not None and system.weight_dtype is not model.weight_dtype:
        model = replace(model, weight_dtype=system.weight_dtype)
    tp = system.tensor_parallel or scenario.tensor_parallel
    kv_dtype = system.kv_dtype or scenario.kv_dtype
    if (model, tp, kv_dtype) == (scenario.model, scenario.tensor_parallel, scenario.kv_dtype):
        return scenario
    return replace(scenario, model=model, tensor_parallel=tp, kv_dtype=kv_dtype)


def pool_deployments(
    scenario: Scenario, cluster: ClusterConfig, system: SystemConfig
) -> list[Deployment]:
    """Each pool of `cluster` as `system`'s run builds it (InputError for a pool that names no
    [[systems]] entry: a scenario file cannot, a scenario built in code can)."""
    by_name = {s.name: s for s in scenario.systems}
    out = []
    for i, pool in enumerate(cluster.pools):
        if pool.system is not None and pool.system not in by_name:
            raise InputError(
                f"cluster pool {pool.name!r}: system {pool.system!r} is not a [[systems]] name; "
                f"valid: {choices_text(by_name)}"
            )
        runs = system if pool.system is None else by_name[pool.system]
        # a pool's degree is its own (a system with its own tensor_parallel is refused on
        # pools: scenario/system_overrides.py); its weights and KV are the system's
        on_pool = replace(
            system_scenario(scenario, runs), gpu=pool.gpu, tensor_parallel=pool.tensor_parallel
        )
        out.append(Deployment(system, runs, on_pool, pool, i))
    return out


def deployments(scenario: Scenario) -> list[Deployment]:
    """Every kind of replica every system's run builds, in the file's order of systems, then
    pools."""
    out = []
    for system in scenario.systems:
        if scenario.cluster is None:
            out.append(Deployment(system, system, system_scenario(scenario, system)))
        else:
            out += pool_deployments(scenario, scenario.cluster.for_system(system.name), system)
    return out

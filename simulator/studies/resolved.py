"""What `pagesim validate` and `pagesim scenarios show --resolved` report: every kind of replica a
run builds (core/deployments.py), as the run builds it: each pool's GPU, degree, system, knobs
with their sources and KV capacity; per system's run its fleet (replicas, GPUs, blocks against
the simulator's limit, routers, the P/D link and what a P/D fleet does not serve); the execution
model and, for a profile, the device it was measured on.

Loading the scenario has already refused whatever a run would refuse (scenario/deployments.py):
what is here is read off a scenario that will run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pagesim.simulator.cluster.host_memory import replica_blocks
from pagesim.simulator.core.config import ExecutionKind, Scenario, SystemConfig
from pagesim.simulator.core.defaults import (
    HOST_OVERHEAD_KEY,
    era_notes,
    era_text,
    resolve_system,
    system_knobs,
)
from pagesim.simulator.core.deployments import Deployment, deployments
from pagesim.simulator.core.limits import MAX_FLEET_KV_BLOCKS
from pagesim.simulator.execution.overhead import era_of, for_system, host_overhead
from pagesim.simulator.execution.profile_file import load_profile
from pagesim.simulator.kv.block_budget import Capacity, kv_capacity
from pagesim.simulator.scenario.load import load_scenario, resolve_scenario

# What a disaggregated fleet serves (cluster/disagg_checks.py refuses the rest).
PD_TERMS = (
    "prefill/decode: single-sequence requests, no multi-turn sessions, paged policies, "
    "preemption by recompute; each decode pool holds one request of the model's max length"
)


@dataclass(frozen=True)
class CheckedReplicas:
    """Replicas of one kind: `system` (in the run of `runs`) and the KV capacity each gets."""

    runs: str
    system: SystemConfig
    where: str  # "" for a scenario's one replica, else the pool (core/deployments.py)
    capacity: Capacity

    @property
    def label(self) -> str:
        own = (
            self.runs
            if self.system.name == self.runs
            else f"{self.runs}, system {self.system.name}"
        )
        return own + (f" [{self.where}]" if self.where else "")


@dataclass(frozen=True)
class Fleet:
    """One system's fleet, in words a run's provenance would use."""

    runs: str
    num_replicas: int
    num_gpus: int
    num_kv_blocks: int  # GPU and CPU blocks of every replica: what the simulator builds
    routers: str
    link: str  # "" unless disaggregated

    @property
    def blocks_text(self) -> str:
        return (
            f"{self.num_kv_blocks:,} KV blocks in all (the simulator builds at most "
            f"{MAX_FLEET_KV_BLOCKS:,} in one run)"
        )


@dataclass(frozen=True)
class CheckedScenario:
    """A scenario that loads: its kinds of replicas, its fleets, how its steps are priced."""

    path: Path
    scenario: Scenario
    replicas: list[CheckedReplicas]
    fleets: list[Fleet]
    execution: str


def check_scenario(name: str | Path, overrides: Sequence[str] = ()) -> CheckedScenario:
    """Load and check a scenario without running it (InputError saying what is wrong)."""
    path = resolve_scenario(name)
    scenario = load_scenario(path, list(overrides))
    every = deployments(scenario)
    replicas = [
        CheckedReplicas(d.runs.name, d.system, d.where, kv_capacity(d.scenario, d.system))
        for d in _kinds(every)
    ]
    fleets = [_fleet(scenario, system, every) for system in scenario.systems]
    return CheckedScenario(
        path, scenario, replicas, [f for f in fleets if f is not None], _execution(scenario)
    )


def _kinds(every: Sequence[Deployment]) -> list[Deployment]:
    """One deployment per (system simulated, pool): the pools a run builds, each once."""
    return list({(d.runs.name, d.pool_index): d for d in every}.values())


def _fleet(scenario: Scenario, system: SystemConfig, every: list[Deployment]) -> Fleet | None:
    cluster = scenario.cluster
    if cluster is None:
        return None
    pools = [d for d in every if d.runs is system]
    fleet = cluster.for_system(system.name)
    if fleet.is_disaggregated:
        prefill = (fleet.prefill_router or fleet.router).kind.value
        decode = (fleet.decode_router or fleet.router).kind.value
        routers = f"prefill router {prefill}, decode router {decode}"
        link = fleet.link
        assert link is not None, "a disaggregated fleet has a link (scenario/disagg.py)"
        name = link.preset or "custom"
        link_text = (
            f"link {name}: {link.bandwidth_bytes_s / 1e9:g} GB/s per GPU port, "
            f"{link.latency_s * 1e6:g} us latency{', layer-wise' if link.layerwise else ''}; "
            f"{PD_TERMS}"
        )
    else:
        routers, link_text = f"router {fleet.router_for(system.name).kind.value}", ""
    return Fleet(
        system.name,
        sum(d.count for d in pools),
        sum(d.count * d.scenario.tensor_parallel for d in pools),
        sum(d.count * replica_blocks(d) for d in pools),
        routers,
        link_text,
    )


def _execution(scenario: Scenario) -> str:
    """How steps are priced: the roofline, or a profile and the device it was measured on."""
    path = scenario.execution.profile_path
    uses = scenario.execution.kind is ExecutionKind.PROFILE or any(
        s.execution is ExecutionKind.PROFILE for s in scenario.systems
    )
    if path is None or not uses:
        return "roofline (datasheet peaks x fitted factors)"
    provenance = load_profile(path).get("provenance", {})
    device = provenance.get("device") if isinstance(provenance, dict) else None
    return f"profile {path.name} (measured on {device})"


@dataclass(frozen=True)
class ResolvedKnob:
    name: str
    value: object
    source: str


@dataclass(frozen=True)
class ResolvedSystem:
    """Replicas of one kind as a run starts them: every knob in force, where each came from,
    and the KV capacity each gets."""

    name: str
    policy: str
    era: str
    knobs: list[ResolvedKnob]
    capacity: Capacity
    notes: list[str]  # what today's vLLM no longer has: historical, or a pagesim extension
    host_overhead: ResolvedKnob  # an era default priced by the execution model (overhead.py)
    where: str = ""  # "" for a scenario's one replica, else the pool (and the system it runs)


def resolve_scenario_systems(
    name: str | Path, overrides: Sequence[str] = ()
) -> tuple[CheckedScenario, list[ResolvedSystem]]:
    """`pagesim scenarios show --resolved`: each kind of replica's knobs after the era defaults
    (per pool: a pool's GPU sets some, vLLM V1's larger defaults for instance). A knob's source
    is its era rule (core.defaults) when the scenario left it unset, "scenario" when the
    scenario (or --set) gave a value other than pagesim's default, "pagesim default"
    otherwise."""
    checked = check_scenario(name, overrides)
    scenario = checked.scenario
    out = []
    for d in _kinds(deployments(scenario)):
        system, on = d.system, d.scenario
        resolved = resolve_system(system, on.model, on.gpu, on.tensor_parallel)
        knobs = []
        for knob, value in system_knobs(resolved.system).items():
            if knob in resolved.sources:
                source = resolved.sources[knob]
            elif getattr(system, knob) != getattr(SystemConfig(system.name, system.policy), knob):
                source = "scenario"
            else:
                source = "pagesim default"
            knobs.append(ResolvedKnob(knob, value, source))
        knobs += _deployment_knobs(system, d)
        where = d.where
        if d.system is not d.runs:
            where += f", in the run of {d.runs.name!r}"
        if scenario.cluster is not None and d.runs.name in scenario.cluster.colocated_systems:
            where += " (colocated_systems: the P/D pools' GPUs, each doing both phases)"
        out.append(
            ResolvedSystem(
                system.name,
                system.policy.value,
                era_text(system),
                knobs,
                kv_capacity(on, system),
                era_notes(resolved.system, scenario.workload.sampling),
                _host_knob(on, system),
                where,
            )
        )
    return checked, out


def _host_knob(scenario: Scenario, system: SystemConfig) -> ResolvedKnob:
    """The host overhead per step: an era default too, but the execution model's rule
    (execution/overhead.py), so it is listed beside core.defaults' knobs under the key a run's
    provenance uses. A profile measured by pagesim prices its own empty step instead."""
    host = host_overhead(for_system(scenario.execution, system), era_of(system.policy))
    return ResolvedKnob(HOST_OVERHEAD_KEY, host.text(), host.source)


def _deployment_knobs(system: SystemConfig, d: Deployment) -> list[ResolvedKnob]:
    """The degree and dtypes a system left to [model] (its own are among its knobs), as they
    run: a pool's degree is the pool's (core/deployments.py `system_scenario`)."""
    on = d.scenario
    found = {
        "tensor_parallel": (on.tensor_parallel, "[model]" if d.pool is None else "cluster pool"),
        "weight_dtype": (on.model.weight_dtype.value, "[model]"),
        "kv_dtype": (on.kv_dtype.value, "[model]"),
    }
    return [
        ResolvedKnob(knob, value, source)
        for knob, (value, source) in found.items()
        if getattr(system, knob) is None or (knob == "tensor_parallel" and d.pool is not None)
    ]

"""The command lines of a configuration: `vllm serve` per kind of replica, and the benchmark.

A single-replica scenario gets one `vllm serve`. A fleet gets one per pool (every replica of a
pool runs the same command, on its own GPUs); the router in front of them is not part of vLLM
and is listed. A disaggregated fleet's prefill and decode pools also get vLLM's NIXL connector
(--kv-transfer-config, kv_role kv_both, as vLLM's disaggregated-serving example runs both
sides: examples/online_serving/disaggregated_serving, tests/v1/kv_connector/nixl_integration)
and the benchmark is pointed at the proxy that pairs them. Static batching and Orca have no vLLM
command: their entry says so.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, replace

from pagesim.simulator.core.cluster import PoolRole
from pagesim.simulator.core.config import Scenario, SystemConfig
from pagesim.simulator.core.defaults import resolve_system
from pagesim.simulator.core.deployments import system_scenario
from pagesim.simulator.deploy.bench_args import Traffic, bench_args, traffic
from pagesim.simulator.deploy.eras import Era, era_flags, era_of, is_number, vllm_version
from pagesim.simulator.deploy.serve_args import serve_args

NIXL = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"}, separators=(",", ":"))


@dataclass(frozen=True)
class ServeLine:
    """One `vllm serve` command: the pool it is for (None: the single replica) and its argv
    after `vllm`."""

    pool: str | None
    replicas: int
    argv: tuple[str, ...]


@dataclass(frozen=True)
class Deployment:
    """Everything a user needs to run one configuration on vLLM and replay its traffic."""

    system: str
    era: Era | None  # None: vLLM has no such engine
    serve: tuple[ServeLine, ...]
    bench: tuple[str, ...]  # the benchmark's argv, its tool first
    unflagged: tuple[str, ...]  # knobs simulated that no flag sets
    notes: tuple[str, ...]

    @property
    def release(self) -> str:
        return f"vLLM v{self.era.value}" if self.era is not None else "no vLLM equivalent"

    def text(self) -> str:
        """The commands as a shell reader copies them, then the lists, as comment lines."""
        lines = [f"# {self.system}: {self.release}"]
        for line in self.serve:
            if line.pool is not None:
                lines.append(f"# pool {line.pool}: {line.replicas} replica(s), each:")
            lines.append(shell_text(("vllm", *line.argv)))
        if self.bench:
            lines.append(shell_text(self.bench))
        lines += [f"# no flag: {item}" for item in self.unflagged]
        lines += [f"# note: {item}" for item in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        return {
            "system": self.system,
            "release": self.release,
            "serve": [
                {"pool": s.pool, "replicas": s.replicas, "argv": ["vllm", *s.argv]}
                for s in self.serve
            ],
            "bench": list(self.bench),
            "unflagged": list(self.unflagged),
            "notes": list(self.notes),
        }


def shell_text(argv: tuple[str, ...] | list[str]) -> str:
    """argv as one shell command: the words before the first flag on the first line, then a
    flag and its values per continued line."""
    words = [shlex.quote(word) for word in argv]
    first = next((i for i, word in enumerate(words) if word.startswith("-")), len(words))
    parts = [" ".join(words[:first])]
    for word in words[first:]:
        if word.startswith("-") and not is_number(word):
            parts.append(word)
        else:
            parts[-1] += f" {word}"
    return " \\\n    ".join(parts)


def deployment(
    scenario: Scenario,
    system: SystemConfig,
    seen: Traffic | None = None,
    v1_era: Era | None = None,
) -> Deployment:
    """The command lines of `system` of `scenario` (its knobs resolved as a run resolves them);
    `v1_era` writes a vllm-v1 system's for that release instead of its own."""
    era = era_of(system)
    if v1_era is not None and era is not None and era.is_v1:
        era = v1_era  # the system as that release runs it: its defaults, its flags
        system = replace(system, vllm_version=vllm_version(v1_era))
    if era is None:
        return Deployment(
            system.name,
            None,
            (),
            (),
            (),
            (f"{system.policy.value}: a baseline of the vLLM paper; vLLM has no such engine",),
        )
    seen = seen or traffic(scenario)
    cluster = scenario.cluster.for_system(system.name) if scenario.cluster else None
    lines, unflagged, notes = [], [], []
    pools = cluster.pools if cluster is not None else ()
    for pool in pools or (None,):
        own = _pool_system(scenario, system, pool.system if pool is not None else None)
        on = system_scenario(scenario, own)  # its own degree and dtypes, as the run's
        gpu = pool.gpu if pool is not None else on.gpu
        tp = pool.tensor_parallel if pool is not None else on.tensor_parallel
        resolved = resolve_system(own, on.model, gpu, tp).system
        args = serve_args(replace(on, gpu=gpu, tensor_parallel=tp), resolved, era, tp)
        if pool is not None and pool.role is not PoolRole.BOTH:
            if era.is_v1:
                args.add("--kv-transfer-config", NIXL)
            else:
                args.unflagged.append(
                    "prefill/decode pools: v0.6.4 has no KV connector (--kv-transfer-config "
                    "arrived with v0.6.5's experimental PyNccl connector)"
                )
        name = None if pool is None else f"{pool.name} ({pool.role.value}, {gpu.name} TP{tp})"
        count = pool.count if pool is not None else 1
        lines.append(ServeLine(name, count, ("serve", *args.argv)))
        unflagged += args.unflagged
        notes += args.notes
    bench = bench_args(scenario, era, seen)
    if cluster is not None:
        router = cluster.router_for(system.name).kind.value
        unflagged.append(
            f"router {router} across {cluster.num_replicas} replicas: vLLM serves one replica "
            "per command; put a router (e.g. llm-d, a proxy) in front and point the benchmark "
            "at it with --base-url"
        )
        if cluster.is_disaggregated and system.name not in cluster.colocated_systems:
            notes.append(
                "prefill/decode: run vLLM's disaggregated-serving proxy "
                "(tests/v1/kv_connector/nixl_integration/toy_proxy_server.py) in front of the "
                "pools and benchmark the proxy"
            )
    return Deployment(
        system.name,
        era,
        tuple(lines),
        tuple(bench.argv),
        tuple(dict.fromkeys([*unflagged, *bench.unflagged])),
        tuple(dict.fromkeys(notes)),
    )


def _pool_system(scenario: Scenario, system: SystemConfig, name: str | None) -> SystemConfig:
    """The system a pool runs: its own [[systems]] entry when it names one, else `system`."""
    if name is None:
        return system
    return next((s for s in scenario.systems if s.name == name), system)


def deployments(scenario: Scenario, v1_era: Era | None = None) -> list[Deployment]:
    """Every system of a scenario (the traffic drawn once)."""
    seen = traffic(scenario)
    return [deployment(scenario, system, seen, v1_era) for system in scenario.systems]


def flags_of(deployment: Deployment) -> list[tuple[str, tuple[str, ...], frozenset[str]]]:
    """(what, argv, the release's known flags) of each command: for checking them."""
    if deployment.era is None:
        return []
    known = era_flags(deployment.era)
    found: list[tuple[str, tuple[str, ...], frozenset[str]]] = [
        ("serve", line.argv[1:], known.serve) for line in deployment.serve
    ]
    tool_words = len(known.bench_tool.split())
    found.append(("bench", deployment.bench[tool_words:], known.bench))
    return found

"""The scenarios `pagesim bench sim` times: built in code from its options (the benchmark must not
depend on files a user may have edited), or a scenario file named on its command line (a path,
or a benchmark shipped in scenarios/benchmarks/).

Every revision with `pagesim bench sim` has `sharegpt_scenario` and `trace_replay_scenario` with
these signatures: `--against` builds another revision's scenario with them (simulator.studies.
timing), so keep them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from pagesim.simulator.core.catalog import get_gpu, get_model
from pagesim.simulator.core.cluster import ClusterConfig, PoolConfig, RouterConfig, RouterKind
from pagesim.simulator.core.config import (
    ArrivalKind,
    ArrivalProcess,
    LengthDist,
    LengthKind,
    Policy,
    Scenario,
    SystemConfig,
    WorkloadConfig,
)
from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.scenario.files import BUILTIN_DIR, resolve_scenario
from pagesim.simulator.scenario.load import load_scenario
from pagesim.simulator.scenario.table import display, is_file
from pagesim.simulator.studies.timing import BenchSpec

# Benchmarks shipped with pagesim (package data): scenario files that time the simulator on a
# published comparison, each folder with its trace and a README giving the provenance.
BENCHMARK_DIR = BUILTIN_DIR / "benchmarks"


def _policy(policy: str) -> Policy:
    try:
        return Policy(policy)
    except ValueError:
        valid = choices_text(p.value for p in Policy)
        raise InputError(f"--policy: unknown policy {policy!r}; valid: {valid}") from None


def sharegpt_scenario(num_requests: int, rate_per_s: float, policy: str) -> Scenario:
    """`num_requests` ShareGPT-like requests (lognormal lengths with the vLLM paper's means, CV 1
    assumed) arriving Poisson at `rate_per_s` on Llama-2-7B / A100-80GB with `policy`."""
    if num_requests <= 0 or not rate_per_s > 0:
        raise InputError(
            f"--synthetic and --rate must be positive, got {num_requests} and {rate_per_s}"
        )
    workload = WorkloadConfig(
        arrival=ArrivalProcess(ArrivalKind.POISSON, rate_per_s=rate_per_s),
        prompt=LengthDist(LengthKind.LOGNORMAL, mean=161.31, cv=1.0),
        output=LengthDist(LengthKind.LOGNORMAL, mean=337.99, cv=1.0),
        num_requests=num_requests,
    )
    return Scenario(
        name="bench-sharegpt",
        model=get_model("llama-2-7b"),
        gpu=get_gpu("a100-80gb"),
        workload=workload,
        systems=(SystemConfig(name=policy, policy=_policy(policy)),),
    )


def trace_replay_scenario(trace: str, num_requests: int | None, policy: str) -> Scenario:
    """Replay `trace` (timestamps and token counts) on Llama-2-7B / A100-80GB with `policy`."""
    chosen = _policy(policy)
    if num_requests is not None and num_requests <= 0:
        raise InputError(f"--requests must be positive, got {num_requests}")
    workload = WorkloadConfig(
        arrival=ArrivalProcess(ArrivalKind.TRACE),
        prompt=LengthDist(LengthKind.TRACE),
        output=LengthDist(LengthKind.TRACE),
        num_requests=num_requests,
        trace_name=trace,
    )
    return Scenario(
        name=f"bench-{trace}",
        model=get_model("llama-2-7b"),
        gpu=get_gpu("a100-80gb"),
        workload=workload,
        systems=(SystemConfig(name=policy, policy=chosen),),
    )


def fleet_scenario(
    scenario: Scenario, replicas: int, router: str, model: str | None, tensor_parallel: int
) -> Scenario:
    """`scenario` on `replicas` replicas of `model` (default: its own) at `tensor_parallel`
    behind `router`, all on its GPU."""
    if replicas < 1 or tensor_parallel < 1:
        raise InputError(
            f"--replicas and --tensor-parallel must be >= 1, got {replicas} and {tensor_parallel}"
        )
    try:
        kind = RouterKind(router)
    except ValueError:
        valid = choices_text(k.value for k in RouterKind)
        raise InputError(f"--router: unknown router {router!r}; valid: {valid}") from None
    spec = get_model(model) if model is not None else scenario.model
    if spec.num_heads % tensor_parallel:
        raise InputError(
            f"--tensor-parallel: {tensor_parallel} does not divide {spec.name}'s "
            f"{spec.num_heads} heads"
        )
    pool = PoolConfig("bench", replicas, scenario.gpu, tensor_parallel)
    return replace(
        scenario,
        name=f"{scenario.name}-x{replicas}",
        model=spec,
        tensor_parallel=tensor_parallel,
        cluster=ClusterConfig((pool,), RouterConfig(kind)),
    )


def benchmark_names() -> list[str]:
    """The shipped benchmarks (`folder/name`: scenarios/benchmarks/<folder>/<name>.toml)."""
    found = BENCHMARK_DIR.glob("*/*.toml") if BENCHMARK_DIR.is_dir() else ()
    return sorted(f"{p.parent.name}/{p.stem}" for p in found)


def benchmark_path(name_or_path: str) -> Path:
    """A scenario file to time: an existing path, a shipped benchmark's name
    (`vidur_case_c/vllm_v0`) or a built-in scenario's."""
    if is_file(Path(name_or_path)):
        return Path(name_or_path)
    if name_or_path.removesuffix(".toml") in benchmark_names():
        return BENCHMARK_DIR / f"{name_or_path.removesuffix('.toml')}.toml"
    try:
        return resolve_scenario(name_or_path)
    except InputError:
        raise InputError(
            f"{name_or_path!r}: no such scenario file, benchmark or built-in scenario; "
            f"benchmarks: {choices_text(benchmark_names())}; built-ins: pagesim scenarios list"
        ) from None


def file_spec(name_or_path: str, overrides: Sequence[str], system: str | None) -> BenchSpec:
    """The benchmark of one system of a scenario file (with `--set` overrides): read here, so
    that a bad file, override or system name is said before anything is timed."""
    path = benchmark_path(name_or_path)
    names = [s.name for s in load_scenario(path, overrides).systems]
    if system is None and len(names) > 1:
        raise InputError(
            f"{display(path)} has {len(names)} systems: time one with --system "
            f"({choices_text(names)})"
        )
    if system is not None and system not in names:
        raise InputError(
            f"--system: {display(path)} has no system {system!r}; valid: {choices_text(names)}"
        )
    return BenchSpec(scenario_file=str(path), overrides=tuple(overrides), system=system or names[0])

"""Small scenarios built in code for the simulator tests."""

from __future__ import annotations

from dataclasses import replace

from pagesim.simulator.core.catalog import get_gpu, get_model
from pagesim.simulator.core.config import (
    ArrivalKind,
    ArrivalProcess,
    ExplicitRequest,
    LengthDist,
    LengthKind,
    Policy,
    PrefixGroup,
    Scenario,
    SystemConfig,
    WorkloadConfig,
)
from pagesim.simulator.core.request import SamplingKind


def explicit_workload(
    requests: list[tuple[int, int, float]],
    *,
    sampling: SamplingKind = SamplingKind.SINGLE,
    num_seqs: int = 1,
) -> WorkloadConfig:
    """(prompt_len, output_len, arrival_s) triples."""
    return WorkloadConfig(
        arrival=ArrivalProcess(ArrivalKind.BURST),
        prompt=LengthDist(LengthKind.FIXED, value=1),
        output=LengthDist(LengthKind.FIXED, value=1),
        explicit=tuple(ExplicitRequest(p, o, a) for p, o, a in requests),
        sampling=sampling,
        num_seqs=num_seqs,
    )


def poisson_workload(
    num_requests: int,
    rate_per_s: float,
    prompt_mean: float = 200,
    output_mean: float = 150,
    *,
    prefix_groups: tuple[PrefixGroup, ...] = (),
    sampling: SamplingKind = SamplingKind.SINGLE,
    num_seqs: int = 1,
) -> WorkloadConfig:
    return WorkloadConfig(
        arrival=ArrivalProcess(ArrivalKind.POISSON, rate_per_s=rate_per_s),
        prompt=LengthDist(LengthKind.LOGNORMAL, mean=prompt_mean, cv=1.0),
        output=LengthDist(LengthKind.LOGNORMAL, mean=output_mean, cv=1.0),
        num_requests=num_requests,
        prefix_groups=prefix_groups,
        sampling=sampling,
        num_seqs=num_seqs,
    )


def scenario(
    workload: WorkloadConfig,
    *systems: SystemConfig,
    model: str = "llama-2-7b",
    gpu: str = "a100-80gb",
    seed: int = 0,
) -> Scenario:
    return Scenario(
        name="test",
        model=get_model(model),
        gpu=get_gpu(gpu),
        workload=workload,
        systems=systems or (SystemConfig("v1", Policy.VLLM_V1),),
        seed=seed,
    )


def system(policy: Policy, name: str | None = None, **knobs: object) -> SystemConfig:
    return replace(SystemConfig(name or policy.value, policy), **knobs)  # type: ignore[arg-type]

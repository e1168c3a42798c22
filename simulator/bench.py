"""Scenarios the benchmark commands replay (built in code: the benchmark must not depend on files
a user may have edited)."""

from __future__ import annotations

from simulator.catalog import get_gpu, get_model
from simulator.config import (
    ArrivalKind,
    ArrivalProcess,
    LengthDist,
    LengthKind,
    Policy,
    Scenario,
    SystemConfig,
    WorkloadConfig,
)
from simulator.errors import InputError, choices_text


def trace_replay_scenario(trace: str, num_requests: int | None, policy: str) -> Scenario:
    """Replay `trace` (timestamps and token counts) on Llama-2-7B / A100-80GB with `policy`."""
    try:
        chosen = Policy(policy)
    except ValueError:
        valid = choices_text(p.value for p in Policy)
        raise InputError(f"--policy: unknown policy {policy!r}; valid: {valid}") from None
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

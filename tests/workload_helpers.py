"""Workloads for the request generator's tests (tests/simulator/workload/)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from pagesim.simulator.core.config import (
    ArrivalKind,
    ArrivalProcess,
    LengthDist,
    LengthKind,
    WorkloadConfig,
)
from pagesim.simulator.core.request import Request
from pagesim.simulator.workload.stream import WorkloadStats, iter_requests

FIXED_10 = LengthDist(LengthKind.FIXED, value=10)
TRACE_LEN = LengthDist(LengthKind.TRACE)
BIG = 10**9  # a max_seq_len that caps nothing


def generate_requests(
    workload: WorkloadConfig,
    max_seq_len: int,
    rng: np.random.Generator,
    stats: WorkloadStats | None = None,
) -> list[Request]:
    """Every request of `workload`, taken from the lazy stream at once."""
    return list(iter_requests(workload, max_seq_len, rng, stats))


def synthetic(**changes: object) -> WorkloadConfig:
    """100 Poisson arrivals at 4 per second of 10-token prompts and outputs, with `changes`."""
    base = WorkloadConfig(
        arrival=ArrivalProcess(ArrivalKind.POISSON, rate_per_s=4.0),
        prompt=FIXED_10,
        output=FIXED_10,
        num_requests=100,
    )
    return replace(base, **changes)


def generate(workload: WorkloadConfig, max_seq_len: int = BIG, seed: int = 0) -> list[Request]:
    """Every request of `workload`, drawn with `seed`."""
    return generate_requests(workload, max_seq_len, np.random.default_rng(seed))

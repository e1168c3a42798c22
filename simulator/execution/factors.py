"""The roofline's factors and interconnect for one scenario: the GPU preset's (core/hardware.py),
with any value the scenario's [execution] sets in their place, checked."""

from __future__ import annotations

import math
from dataclasses import fields, replace

from pagesim.simulator.core.config import ExecutionConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.hardware import Interconnect, RooflineFactors

# [execution] keys that replace a factor of the GPU preset.
OVERRIDES = ("gemm_efficiency", "attention_bw_efficiency", "weight_bw_efficiency")
_SHARES = (
    "gemm_efficiency",
    "weight_bw_efficiency",
    "small_ops_bw_efficiency",
    "attention_bw_efficiency",
    "attention_flops_efficiency",
    "attention_causal_efficiency",
)


def resolve_factors(base: RooflineFactors, config: ExecutionConfig) -> RooflineFactors:
    given = {k: getattr(config, k) for k in OVERRIDES if getattr(config, k) is not None}
    factors = replace(base, **given)
    if given:
        factors = replace(factors, source=f"{base.source}; set in the scenario: {', '.join(given)}")
    for name in _SHARES:
        value = getattr(factors, name)
        if not 0 < value <= 1:
            where = "execution." if name in given else "the GPU preset's factor "
            raise InputError(
                f"roofline execution model: {where}{name} must be in (0, 1] (a share of the "
                f"datasheet peak), got {value!r}"
            )
    for f in fields(factors):
        value = getattr(factors, f.name)
        if isinstance(value, float) and not (math.isfinite(value) and value >= 0):
            raise InputError(f"roofline execution model: factor {f.name} must be >= 0, got {value}")
    if factors.gemm_overlap > 1:
        raise InputError(
            f"roofline execution model: gemm_overlap must be <= 1, got {factors.gemm_overlap}"
        )
    return factors


def resolve_link(base: Interconnect, config: ExecutionConfig, tensor_parallel: int) -> Interconnect:
    link = base = base.at(tensor_parallel)
    if config.allreduce_bw_gbps is not None:
        link = replace(link, allreduce_bw_bps=config.allreduce_bw_gbps * 1e9)
    if config.allreduce_latency_us is not None:
        link = replace(link, allreduce_latency_s=config.allreduce_latency_us * 1e-6)
    if link is not base:  # the scenario's formula replaces the measured medians too
        link = replace(
            link,
            name=f"{base.name}, set in the scenario",
            source="[execution] allreduce_*",
            small_s=(),
        )
    if tensor_parallel > 1 and not link.allreduce_bw_bps > 0:
        raise InputError(
            "roofline execution model: execution.allreduce_bw_gbps must be > 0, "
            f"got {link.allreduce_bw_bps / 1e9!r}"
        )
    if not link.allreduce_latency_s >= 0:
        raise InputError(
            "roofline execution model: execution.allreduce_latency_us must be >= 0, "
            f"got {link.allreduce_latency_s * 1e6!r}"
        )
    return link

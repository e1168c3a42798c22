"""The roofline's factors and interconnect for one scenario: the GPU preset's (core/presets/),
with any value the scenario's [execution] sets in their place, checked."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import fields, replace

from pagesim.simulator.core.config import ExecutionConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.hardware import Interconnect, RooflineFactors

# [execution] keys that replace a factor of the GPU preset.
OVERRIDES = ("gemm_efficiency", "attention_bw_efficiency", "weight_bw_efficiency")
# [execution] keys that replace the interconnect's all-reduce figures.
LINK_OVERRIDES = ("allreduce_latency_us", "allreduce_bw_gbps")


def set_in_scenario(config: ExecutionConfig, keys: Iterable[str]) -> list[str]:
    """Those of `keys` (ExecutionConfig fields) the scenario sets, in the order given: their
    figures are the user's, not fitted, extrapolated or estimated (reports say so)."""
    return [key for key in keys if getattr(config, key) is not None]


_SHARES = (
    "gemm_efficiency",
    "weight_bw_efficiency",
    "small_ops_bw_efficiency",
    "attention_bw_efficiency",
    "attention_flops_efficiency",
    "attention_causal_efficiency",
)


def resolve_factors(base: RooflineFactors, config: ExecutionConfig) -> RooflineFactors:
    given = {k: getattr(config, k) for k in set_in_scenario(config, OVERRIDES)}
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
        given = set_in_scenario(config, LINK_OVERRIDES)
        other = "bandwidth" if given == ["allreduce_latency_us"] else "latency"
        rest = "" if len(given) == len(LINK_OVERRIDES) else f"; {other}: {base.source}"
        link = replace(
            link,
            name=f"{base.name}, set in the scenario",
            source=f"set in the scenario: {', '.join(given)}{rest}",
            small_s=(),
            custom=None,  # the scenario's formula prices every call (execution/allreduce.py)
        )
    stage_us = config.custom_allreduce_stage_us
    if stage_us is not None and link.custom is not None:
        custom = replace(
            link.custom,
            stage_s=stage_us * 1e-6,
            source=f"stage latency set in the scenario; {link.custom.source}",
        )
        link = replace(link, custom=custom)
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

"""[wide_ep]: a DP attention + expert-parallel group's settings (core/wide_ep.py), checked
against the [model] layout they serve."""

from __future__ import annotations

from pagesim.simulator.core.catalog import ModelSpec
from pagesim.simulator.core.wide_ep import (
    DEFAULT_ALL2ALL_BACKEND,
    DEFAULT_GPUS_PER_NODE,
    DEFAULT_SCALEOUT_GBPS,
    All2AllBackend,
    WideEPConfig,
)
from pagesim.simulator.scenario.table import Table


def read_wide_ep(
    t: Table, model: ModelSpec, tensor_parallel: int, data_parallel: int, expert_parallel: bool
) -> WideEPConfig:
    if t.data and not (data_parallel > 1 and expert_parallel):
        first = next(iter(t.data))
        t.fail(first, "only used with [model] data_parallel > 1 and expert_parallel = true")
    eplb = t.flag("eplb", False)
    gpus_per_node = t.integer("gpus_per_node", DEFAULT_GPUS_PER_NODE, hi=72)
    if data_parallel > 1 and expert_parallel and tensor_parallel > gpus_per_node:
        t.fail(
            "gpus_per_node",
            f"{gpus_per_node} is fewer than one DP rank's tensor_parallel ({tensor_parallel}) "
            "GPUs; valid: at least tensor_parallel",
        )
    redundant = t.integer("redundant_experts", None, lo=0, hi=4096)
    if redundant is not None:
        if not eplb:
            # vLLM refuses it too (vllm/config/parallel.py, v0.34: EPLB not enabled)
            t.fail("redundant_experts", "needs eplb = true (redundant experts are EPLB's)")
        experts, n = (model.moe.num_experts if model.moe else 0), tensor_parallel * data_parallel
        if (experts + redundant) % n:
            first = (n - experts % n) % n
            t.fail(
                "redundant_experts",
                f"{experts} experts + {redundant} do not divide over the {n} GPUs of the EP "
                f"group; valid: {first}, {first + n}, {first + 2 * n}, ...",
            )
    return WideEPConfig(
        all2all_backend=t.choice("all2all_backend", All2AllBackend, DEFAULT_ALL2ALL_BACKEND),
        eplb=eplb,
        redundant_experts=redundant,
        gpus_per_node=gpus_per_node,
        scaleout_gbps=t.number("scaleout_gbps", DEFAULT_SCALEOUT_GBPS, hi=1e5, lo_open=True),
    )

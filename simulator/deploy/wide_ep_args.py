"""The `vllm serve` arguments of a DP attention + wide-EP group ([wide_ep], core/wide_ep.py):
the all-to-all backend, EPLB and its redundant experts, and the per-node split of a group
larger than one node, each as the release spells it (vllm_flags.json lists every flag).

    all-to-all backend   v0.33.0 on: --all2all-backend (vllm/config/parallel.py
                         ParallelConfig.all2all_backend); v0.11.0: the environment variable
                         VLLM_ALL2ALL_BACKEND (vllm/envs.py), so a note says to set it
    EPLB                 --enable-eplb; redundant experts in --eplb-config as JSON
                         {"num_redundant_experts": N} (EPLBConfig.num_redundant_experts; v0.11.0's
                         --num-redundant-experts is deprecated there and gone from v0.33.0)
    several nodes        --data-parallel-size-local (DP ranks per node), one command per node:
                         the first with --data-parallel-address, the others --headless with
                         --data-parallel-start-rank (vLLM's
                         docs/serving/data_parallel_deployment.md)
"""

from __future__ import annotations

import json

from pagesim.simulator.core.config import Scenario
from pagesim.simulator.deploy.argv import Argv
from pagesim.simulator.deploy.eras import Era

ALL2ALL_FLAG_SINCE = (0, 33, 0)


def wide_ep_args(out: Argv, scenario: Scenario, era: Era, tensor_parallel: int) -> None:
    """Add a wide-EP group's flags and notes to `out` (nothing without one)."""
    if scenario.data_parallel <= 1 or not scenario.expert_parallel:
        return
    wide = scenario.wide_ep
    backend = wide.all2all_backend.value
    if era.has(ALL2ALL_FLAG_SINCE):
        out.add("--all2all-backend", backend)
    else:
        out.notes.append(
            f"run with VLLM_ALL2ALL_BACKEND={backend} in the environment (v{era.value} reads the "
            "all-to-all backend from it, vllm/envs.py; --all2all-backend arrived later)"
        )
    if wide.eplb:
        out.add("--enable-eplb")
        if wide.redundant_experts:
            out.add("--eplb-config", json.dumps({"num_redundant_experts": wide.redundant_experts}))
    ranks_per_node = max(1, wide.gpus_per_node // tensor_parallel)
    if scenario.data_parallel <= ranks_per_node:
        return
    nodes = -(-scenario.data_parallel // ranks_per_node)
    out.add("--data-parallel-size-local", ranks_per_node)
    others = "node 1 adds" if nodes == 2 else f"nodes k = 1..{nodes - 1} add"
    start = f"{ranks_per_node}" if nodes == 2 else f"k x {ranks_per_node}"
    out.notes.append(
        f"{scenario.data_parallel} DP ranks at {ranks_per_node} per node: {nodes} nodes, each "
        "running this command: node 0 adds --data-parallel-address <node 0's IP> "
        f"--data-parallel-rpc-port <port>; {others} --headless --data-parallel-start-rank "
        f"{start} and the same address and port (vLLM's "
        "docs/serving/data_parallel_deployment.md)"
    )

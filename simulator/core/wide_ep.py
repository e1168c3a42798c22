"""[wide_ep]: how a DP attention + expert-parallel group runs (vLLM `--data-parallel-size d
--enable-expert-parallel` with d > 1): its all-to-all kernels, expert load balancing, and the
nodes its GPUs sit in. The mechanism is simulator/cluster/dp_group.py; the costs
execution/all_to_all.py and execution/expert_load.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class All2AllBackend(Enum):
    """vLLM's `--all2all-backend` values modelled (execution/all_to_all.py)."""

    ALLGATHER_REDUCESCATTER = "allgather_reducescatter"
    DEEPEP_LOW_LATENCY = "deepep_low_latency"
    DEEPEP_HIGH_THROUGHPUT = "deepep_high_throughput"


# vLLM's default in v0.11 (vllm/envs.py VLLM_ALL2ALL_BACKEND) and in v0.33 and v0.34
# (vllm/config/parallel.py ParallelConfig.all2all_backend).
DEFAULT_ALL2ALL_BACKEND = All2AllBackend.ALLGATHER_REDUCESCATTER
# A ConnectX-7 400 Gb/s NIC per GPU (NVIDIA's datasheet): 50 GB/s between nodes, the scale-out
# DeepEP's published runs use.
DEFAULT_SCALEOUT_GBPS = 50.0
DEFAULT_GPUS_PER_NODE = 8  # an HGX H100 / H200 board


@dataclass(frozen=True, slots=True)
class WideEPConfig:
    all2all_backend: All2AllBackend = DEFAULT_ALL2ALL_BACKEND
    eplb: bool = False  # vLLM --enable-eplb
    redundant_experts: int | None = None  # EPLB's num_redundant_experts; None: vLLM's default
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    scaleout_gbps: float = DEFAULT_SCALEOUT_GBPS  # GB/s per GPU between nodes

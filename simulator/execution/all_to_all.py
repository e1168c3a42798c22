"""Expert-parallel dispatch and combine across DP ranks: bytes per step and seconds, by backend.

Under DP attention + expert parallelism (vLLM `--data-parallel-size d --enable-expert-parallel`)
every MoE layer sends each token's hidden state to the GPUs holding its top-k experts
(dispatch) and brings the weighted outputs back (combine). vLLM picks the kernels with
`--all2all-backend` (v0.33, v0.34: vllm/config/parallel.py ParallelConfig.all2all_backend) or the
`VLLM_ALL2ALL_BACKEND` environment variable (v0.11: vllm/envs.py); in all three versions the
default is `allgather_reducescatter`. The three modelled here, for n = d x t GPUs in the EP
group, g GPUs per node, hidden size h, top-k routing, T_r tokens on rank r:

- `allgather_reducescatter` (vllm/distributed/device_communicators/all2all.py
  AgRsAll2AllManager): all-gather every rank's hidden states (each rank padded to the group's
  largest batch, as vLLM's gpu_model_runner.get_dp_padding pads), run the local experts, and
  reduce-scatter. Per MoE layer, each way, NCCL's bus-bandwidth convention:
  latency + n max_r(T_r) h 2 B (n - 1) / n / bus bandwidth. The bus bandwidth is the GPU's
  all-reduce link (core/hardware.py) within a node and the scale-out NIC beyond one.
- `deepep_low_latency` (DeepEP's low-latency kernels, as DeepSeek runs decode): each token is
  sent once per selected expert, FP8 with one 4-byte scale per 128 channels on the way out,
  BF16 on the way back:

      dispatch bytes per token = k (h + 4 h / 128)        combine bytes per token = k 2 h

  timed at the logical bandwidth DeepEP publishes for its low-latency kernels (deepseek-ai/DeepEP
  README, V1 "Low-latency kernels with pure RDMA": H800 + ConnectX-7 400 Gb/s, 128 tokens per
  rank, hidden 7168, top-8, FP8 dispatch / BF16 combine): dispatch 98, 63, 48, 43, 39, 39 GB/s and
  combine 127, 74, 53, 46, 39, 40 GB/s at EP 8, 16, 32, 64, 128, 256 (interpolated in log EP,
  held flat outside). Linear in the tokens: an estimate away from the measured 128 per rank.
- `deepep_high_throughput` (DeepEP's normal kernels): a token crosses to each other node that
  holds one of its experts once (then NVLink within it); timed at DeepEP's bottleneck bandwidth
  (same README, "Normal kernels": intranode 153 / 158 GB/s NVLink at EP 8, internode 43, 58, 51
  GB/s RDMA dispatch and 43, 57, 50 GB/s combine at EP 16, 32, 64). H800 figures: an H200's
  NVLink is faster (an estimate, conservative within a node).

The layer waits for its slowest GPU: the busiest sender (the largest batch) or the hottest
receiver (`hot_share` x the mean batch: expert_load.py). Both DeepEP modes skip the padding.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from pagesim.simulator.core.hardware import Interconnect
from pagesim.simulator.core.wide_ep import All2AllBackend
from pagesim.simulator.execution.roofline_terms import ACTIVATION_BYTES

FP8_SCALE_CHANNELS = 128  # one float32 scale per 128 channels (DeepEP's FP8 dispatch layout)
FP8_SCALE_BYTES = 4
GB = 1e9

# (EP size, logical GB/s): deepseek-ai/DeepEP README (V1), low-latency kernels, H800 + CX7
LOW_LATENCY_DISPATCH_GBPS = (
    (8, 98.0),
    (16, 63.0),
    (32, 48.0),
    (64, 43.0),
    (128, 39.0),
    (256, 39.0),
)
LOW_LATENCY_COMBINE_GBPS = (
    (8, 127.0),
    (16, 74.0),
    (32, 53.0),
    (64, 46.0),
    (128, 39.0),
    (256, 40.0),
)
# (EP size, bottleneck GB/s): the same README, normal kernels; EP 8 is within a node (NVLink)
NORMAL_DISPATCH_GBPS = ((8, 153.0), (16, 43.0), (32, 58.0), (64, 51.0))
NORMAL_COMBINE_GBPS = ((8, 158.0), (16, 43.0), (32, 57.0), (64, 50.0))


def dispatch_bytes_per_token(hidden_size: int, experts_per_token: int) -> float:
    """DeepEP's FP8 dispatch: k copies of h bytes and their scales (module docstring)."""
    scales = hidden_size / FP8_SCALE_CHANNELS * FP8_SCALE_BYTES
    return experts_per_token * (hidden_size + scales)


def combine_bytes_per_token(hidden_size: int, experts_per_token: int) -> float:
    """DeepEP's BF16 combine: k copies of h 16-bit values."""
    return experts_per_token * hidden_size * ACTIVATION_BYTES


def by_ep_size(table: tuple[tuple[int, float], ...], ep_size: int) -> float:
    """A published figure at `ep_size`: interpolated in log size, flat outside the table."""
    if ep_size <= table[0][0]:
        return table[0][1]
    for (lo, lo_v), (hi, hi_v) in itertools.pairwise(table):
        if ep_size <= hi:
            w = math.log(ep_size / lo) / math.log(hi / lo)
            return lo_v + w * (hi_v - lo_v)
    return table[-1][1]


def nodes_touched(num_experts: int, experts_per_token: int, num_nodes: int) -> float:
    """Expected distinct nodes among a token's k distinct experts, E / N experts per node."""
    E, k = num_experts, experts_per_token
    per_node = E // num_nodes
    miss = math.comb(E - per_node, k) / math.comb(E, k)
    return num_nodes * (1 - miss)


@dataclass(frozen=True, slots=True)
class AllToAll:
    """Prices one step's dispatch + combine over all MoE layers (module docstring)."""

    backend: All2AllBackend
    ep_size: int  # GPUs in the EP group (d x t)
    gpus_per_node: int
    hidden_size: int
    num_experts: int
    experts_per_token: int
    num_moe_layers: int
    link: Interconnect  # within a node (the GPU preset's all-reduce figures)
    scaleout_bps: float  # per GPU, between nodes (a ConnectX-7 400 Gb/s NIC: 50 GB/s)

    @property
    def num_nodes(self) -> int:
        return math.ceil(self.ep_size / self.gpus_per_node)

    def step_bytes(self, tokens: list[int], tensor_parallel: int = 1) -> float:
        """Bytes the busiest GPU sends in one step, dispatch + combine, all MoE layers."""
        return self._per_layer(tokens, tensor_parallel)[0] * self.num_moe_layers

    def step_s(self, tokens: list[int], hot_share: float = 1.0, tensor_parallel: int = 1) -> float:
        """Seconds of dispatch + combine in one step whose ranks run `tokens` (each rank's real
        tokens); `hot_share`: the hottest GPU's expert load over the mean (>= 1)."""
        if not any(tokens):
            return 0.0
        return self._per_layer(tokens, tensor_parallel, hot_share)[1] * self.num_moe_layers

    def _per_layer(
        self, tokens: list[int], tensor_parallel: int, hot_share: float = 1.0
    ) -> tuple[float, float]:
        n, h, k = self.ep_size, self.hidden_size, self.experts_per_token
        if self.backend is All2AllBackend.ALLGATHER_REDUCESCATTER:
            at = self.link.at(n)
            bw = at.allreduce_bw_bps
            if n > self.gpus_per_node:
                bw = min(bw, self.scaleout_bps)
            per_way = n * max(tokens) * h * ACTIVATION_BYTES * (n - 1) / n
            return 2 * per_way, 2 * (at.allreduce_latency_s + per_way / bw)
        # DeepEP: tokens per GPU (a rank's TP GPUs share its batch: an estimate for t > 1)
        per_gpu = [t / tensor_parallel for t in tokens]
        busiest = max(max(per_gpu), hot_share * sum(per_gpu) / len(per_gpu))
        out, back = dispatch_bytes_per_token(h, k), combine_bytes_per_token(h, k)
        if self.backend is All2AllBackend.DEEPEP_LOW_LATENCY:
            d_bw = by_ep_size(LOW_LATENCY_DISPATCH_GBPS, n) * GB
            c_bw = by_ep_size(LOW_LATENCY_COMBINE_GBPS, n) * GB
            return busiest * (out + back), busiest * (out / d_bw + back / c_bw)
        # high throughput: to each other node once (NVLink within one node)
        nodes = self.num_nodes
        if nodes > 1:
            share = nodes_touched(self.num_experts, k, nodes) * (nodes - 1) / nodes
            d_bw = by_ep_size(NORMAL_DISPATCH_GBPS[1:], n) * GB
            c_bw = by_ep_size(NORMAL_COMBINE_GBPS[1:], n) * GB
        else:
            share = nodes_touched(self.num_experts, k, n) * (n - 1) / n
            d_bw, c_bw = NORMAL_DISPATCH_GBPS[0][1] * GB, NORMAL_COMBINE_GBPS[0][1] * GB
        out_b, back_b = busiest * share * out / k, busiest * share * back / k
        return out_b + back_b, out_b / d_bw + back_b / c_bw

"""What a step's mixture-of-experts layers read and send: the experts a batch touches, and the
expert-parallel dispatch and combine.

Routing. Each token picks `k` of `E` routed experts. Expert i is among one token's k with
probability q_i; tokens route independently, so a batch of T tokens touches expert i with
probability 1 - (1 - q_i)^T and, in expectation,

    touched(T) = sum_i 1 - (1 - q_i)^T           uniform (q_i = k / E): E (1 - (1 - k / E)^T)

experts of each MoE layer (shared experts are always read). touched(1) = k exactly, whatever the
skew, and touched(T) -> E as T grows.

Skew (`routing_skew`, s >= 0): expert popularity follows a Zipf law, q_i = min(1, c i^-s) for the
expert of popularity rank i = 1..E, with c chosen so that sum_i q_i = k (the hottest experts are
capped at one selection per token, the rest share what is left). s = 0 is uniform routing, the
default. Real routers are not uniform: DeepSeek-V3 adds an auxiliary-loss-free bias to balance
them in training (DeepSeek-V3 technical report, arXiv 2412.19437, section 2.1.2), and at
inference deploys redundant copies of the hot experts because load still differs between
experts (its section 3.4 and the deepseek-ai/EPLB repository, "the load of different experts may
vary depending on the current workload"). No exponent is measured here: s is a what-if knob.

Expert parallelism (vLLM `--data-parallel-size d --enable-expert-parallel`, t GPUs of tensor
parallelism per DP rank): attention runs per DP rank (replicated weights, each rank its own
batch), the routed experts are split over the d t GPUs. The simulated engine is one DP rank and
the other d - 1 are assumed equally loaded, so a MoE layer sees d T tokens. Each GPU holds E /
(d t) experts and, in expectation, touched(d T) / (d t) of them are read (exact for uniform
routing; under skew it is the mean over GPUs, as EPLB's balanced placement aims for), and it
computes (d T k) / (d t) = T k / t tokens' expert FLOPs: the same as tensor parallelism.
Without EP, every GPU holds 1 / t of every expert and reads 1 / t of each touched one.

Dispatch and combine (d > 1): vLLM's default all2all backend `allgather_reducescatter`
(vllm/envs.py VLLM_ALL2ALL_BACKEND; vllm/distributed/device_communicators/all2all.py
AgRsAll2AllManager) all-gathers every DP rank's hidden states over the DP group before the experts
and reduce-scatters the outputs after them. Per MoE layer, each way, with NCCL's bus-bandwidth
convention (time = latency + (n - 1) / n x total bytes / bus bandwidth, n = d):

    bytes per GPU = d T x hidden x 2 B x (d - 1) / d

priced on the GPU preset's link (core/presets/interconnects.toml, its all-reduce figures: an
estimate for all-gather and reduce-scatter, which NCCL runs as half an all-reduce's ring each).

The routed experts' GEMMs (vLLM's fused-MoE kernel: a few tokens per expert at decode, so it
streams each touched expert's weights) read them at `FUSED_MOE_BW_EFFICIENCY` of the GPU's
datasheet bandwidth, a property of the kernel rather than of the GPU: **fitted** to vLLM's CI
runs of Mixtral-8x7B at TP 2, batch 8 (about 2 tokens per expert and step) on A100 and H100
(calibration/published_fit.py, builds 9523 and 9555), one figure for both GPUs. vLLM v0.6.4 runs
the Triton kernel (vllm/model_executor/layers/fused_moe/fused_moe.py, tuned configs per GPU and
expert shape); so does v0.11 for 16-bit experts. The dense GEMMs keep the GPU's own fitted
weight-streaming share (core/presets/roofline_factors.toml, from Vidur's measurements, which
have no MoE).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pagesim.simulator.core.catalog import ModelSpec
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.hardware import Interconnect
from pagesim.simulator.execution.roofline_terms import ACTIVATION_BYTES

COLLECTIVES_PER_MOE_LAYER = 2  # dispatch (all-gather) and combine (reduce-scatter)
FUSED_MOE_BW_EFFICIENCY = 0.850  # fitted (module docstring): share of datasheet bandwidth


def selection_probabilities(num_experts: int, experts_per_token: int, skew: float) -> list[float]:
    """q_i, the chance expert i (popularity rank i) is among one token's k (module docstring)."""
    E, k = num_experts, experts_per_token
    if skew == 0:
        return [k / E] * E
    weights = [(i + 1) ** -skew for i in range(E)]
    capped = 0  # the hottest experts, chosen by every token
    rest = sum(weights)
    scale = k / rest
    while capped < k and scale * weights[capped] > 1:
        capped += 1
        # Summed afresh, not by subtraction: at a steep skew the hottest weight is 1 and the
        # others fall below its rounding, so `rest - 1` would be 0 (and the scale infinite).
        rest = math.fsum(weights[capped:])
        scale = (k - capped) / rest if rest > 0 else 0.0
    return [1.0] * capped + [scale * w for w in weights[capped:]]


@dataclass(frozen=True, slots=True)
class ExpertLayout:
    """How a model's experts are spread (vLLM's --tensor-parallel-size, --data-parallel-size,
    --enable-expert-parallel)."""

    tensor_parallel: int = 1
    data_parallel: int = 1
    expert_parallel: bool = False

    @property
    def expert_shards(self) -> int:
        """GPUs each routed expert layer is split over."""
        return self.tensor_parallel * self.data_parallel

    def problem(self, model: ModelSpec) -> tuple[str, str] | None:
        """(key, what is wrong) for a layout vLLM would refuse or `model` cannot have."""
        if self.data_parallel < 1:
            return "data_parallel", f"must be >= 1, got {self.data_parallel}"
        if self.data_parallel > 1 and not self.expert_parallel:
            return "data_parallel", (
                f"{self.data_parallel} without expert_parallel = true: data_parallel here means "
                "DP attention with expert-parallel MoE; independent replicas are [cluster] pools"
            )
        if not self.expert_parallel:
            return None
        if model.moe is None:
            return "expert_parallel", f"{model.name} has no experts (not a mixture of experts)"
        if model.moe.num_experts % self.expert_shards:
            experts, t = model.moe.num_experts, self.tensor_parallel
            valid = [str(d) for d in range(1, experts + 1) if experts % (t * d) == 0]
            return "expert_parallel", (
                f"{self.expert_shards} GPUs (tensor_parallel x data_parallel) do not divide "
                f"{model.name}'s {experts} routed experts; valid data_parallel with "
                f"tensor_parallel {t}: {', '.join(valid) or 'none'}"
            )
        return None

    def check(self, model: ModelSpec) -> None:
        found = self.problem(model)
        if found is not None:
            raise InputError(f"model.{found[0]}: {found[1]}")


class ExpertTraffic:
    """Per step: the routed experts' weight bytes one GPU reads, and the dispatch/combine time."""

    def __init__(
        self,
        model: ModelSpec,
        layout: ExpertLayout,
        expert_bytes: float,
        link: Interconnect,
        skew: float = 0.0,
    ) -> None:
        if not skew >= 0:
            raise InputError(f"execution.routing_skew must be >= 0 (a Zipf exponent), got {skew}")
        moe = model.moe
        assert moe is not None
        self.num_experts = moe.num_experts
        self.experts_per_token = moe.experts_per_token
        self.num_moe_layers = model.num_layers - model.num_dense_mlp_layers
        self.skew = skew
        self.layout = layout
        self.expert_bytes = expert_bytes  # one routed expert's weights, all of it
        self._probs = selection_probabilities(moe.num_experts, moe.experts_per_token, skew)
        self._token_factor = layout.data_parallel if layout.expert_parallel else 1
        self._bytes_per_touched = self.num_moe_layers * expert_bytes / layout.expert_shards
        self._touched: dict[int, float] = {}
        # What the priced steps read, for the run's summary (`note_step`, `summary`).
        self.num_steps = 0
        self.touched_sum = 0.0
        self.bytes_sum = 0.0
        d = self._token_factor
        if d > 1:
            at = link.at(d)
            ring = (d - 1) / d
            calls = self.num_moe_layers * COLLECTIVES_PER_MOE_LAYER
            self.dispatch_fixed_s = calls * at.allreduce_latency_s
            self.dispatch_s_per_token = (
                calls * ring * d * model.hidden_size * ACTIVATION_BYTES / at.allreduce_bw_bps
            )
        else:
            self.dispatch_fixed_s = 0.0
            self.dispatch_s_per_token = 0.0

    def touched(self, num_tokens: int) -> float:
        """Expected distinct routed experts of one MoE layer read by a step whose MoE layers see
        `num_tokens` tokens (all DP ranks together)."""
        value = self._touched.get(num_tokens)
        if value is None:
            if self.skew == 0:
                E, k = self.num_experts, self.experts_per_token
                value = E * (1 - (1 - k / E) ** num_tokens)
            else:
                value = sum(1 - (1 - q) ** num_tokens for q in self._probs)
            self._touched[num_tokens] = value
        return value

    def experts_touched_per_layer(self, num_tokens: int) -> float:
        """For a step of `num_tokens` tokens on the simulated rank."""
        return self.touched(self._token_factor * num_tokens) if num_tokens else 0.0

    def weight_bytes(self, num_tokens: int) -> float:
        """Routed-expert weight bytes one GPU reads in a step of `num_tokens` tokens, all MoE
        layers."""
        return self.experts_touched_per_layer(num_tokens) * self._bytes_per_touched

    def dispatch_s(self, num_tokens: int) -> float:
        """Dispatch + combine seconds of a step of `num_tokens` tokens (0 without DP > 1)."""
        if not num_tokens:
            return 0.0
        return self.dispatch_fixed_s + num_tokens * self.dispatch_s_per_token

    def note_step(self, num_tokens: int) -> float:
        """`weight_bytes(num_tokens)`, tallied as one priced step of the run."""
        touched = self.experts_touched_per_layer(num_tokens)
        self.num_steps += 1
        self.touched_sum += touched
        weight_bytes = touched * self._bytes_per_touched
        self.bytes_sum += weight_bytes
        return weight_bytes

    def summary(self) -> dict[str, float | None]:
        """Means over the priced steps: routed experts read per MoE layer (of all E; with
        expert parallelism, over the whole group) and their weight bytes per GPU per step."""
        n = self.num_steps
        return {
            "moe_experts_touched_per_layer": self.touched_sum / n if n else None,
            "moe_expert_bytes_per_step": self.bytes_sum / n if n else None,
        }

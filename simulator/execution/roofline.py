"""Roofline execution model: what one `StepPlan` costs, from datasheet ceilings and model shapes.

Every figure is **per GPU** under tensor parallelism t (each GPU runs the same step on its shard at
the same time), so MFU = flops / (peak × duration) and MBU = bytes_moved / (bandwidth × duration)
are per-GPU utilizations. Every efficiency factor is a named field of `ExecutionConfig`; none is
hidden in this file.

Cost of one step that computes T tokens for S sequences (L layers, t-way tensor parallelism)::

    linear   = max(T·F_lin / (peak·gemm_eff),   (W_lin + T·A_lin) / (bw·weight_bw_eff))
    lm_head  = max(S·F_lm  / (peak·gemm_eff),   (W_lm  + S·A_lm)  / (bw·weight_bw_eff))
    attn     = Σ decode seqs  c·kv / (bw·attention_bw_eff)
             + Σ prefill seqs max(pairs·F_pair / (peak·gemm_eff), c·kv / (bw·attention_bw_eff))
    kv_write = T·kv / (bw·attention_bw_eff)
    allreduce= T·2L·(2(t−1)/t)·hidden·2 / allreduce_bw          (t > 1 only)
    compute_s = linear + lm_head + attn + kv_write + allreduce + step_overhead_s
    swap_s   = (blocks in + blocks out)·block_bytes / host_link
    copy_s   = copies·block_bytes·2 / (bw·attention_bw_eff)

where kv = `ModelSpec.kv_bytes_per_token(dtype, t)` (all layers, one GPU), c a sequence's KV length
after the step, n its new tokens and pairs = n(c−n) + n(n+1)/2 the causal (query, key) pairs.

Assumptions (approximations a reader of a report must know):

- Weights are 16-bit (2 bytes/param), split evenly over t GPUs (`params_per_layer / t`; GQA K/V
  heads replicated when kv_heads < t are not added back). Activations are 16-bit whatever the KV
  dtype.
- Every linear layer streams its whole weight shard once per step, and each (fused) GEMM — QKV,
  output projection, MLP gate+up (or up), MLP down — reads its input and writes its output once.
  Norms, rotary embedding, residual adds and the activation function are not counted.
- Linear layers are one roofline per layer: the slower of compute and memory, never their sum.
  All layers are identical, so L × per-layer max = max of the L-layer totals.
- The LM head is vocab-parallel under t and runs for every sequence in the plan (a prefill chunk
  that does not finish its prompt samples nothing in reality: slightly over-counted). The
  embedding lookup and the logits gather are neglected.
- Decode attention is memory-bound: it reads the sequence's c tokens of K and V in every layer once;
  its FLOPs (4·heads/t·head_dim per pair per layer) count for MFU but not for time. Reading Q and
  writing the attention output are neglected (per new token, as many bytes as one token of KV for
  MHA: small beside c tokens of context). A decode of n > 1 tokens (speculative) counts its causal
  pairs for FLOPs and is still timed by its KV read.
- Prefill attention is compute-bound on causal pairs at GEMM efficiency, but never faster than
  reading its KV context once. Sequences are priced one after another and summed (no overlap).
- KV-cache traffic (attention reads, writes of new tokens, copy-on-write copies) runs at
  bandwidth × attention_bw_efficiency.
- Tensor-parallel all-reduce: 2 per layer (after attention and after the MLP), ring algorithm,
  bandwidth term only (no per-call latency), never overlapped with compute, and not counted in
  `bytes_moved` (it crosses NVLink; HBM traffic of the reduction is neglected).
- The steps' parts never overlap: compute, swap and copy times add up (`StepCost.duration_s`).
- Swaps cross the host link one block after another (in and out share the link); they are not
  counted in `bytes_moved`, which holds on-GPU HBM traffic only.
"""

from __future__ import annotations

from itertools import compress
from operator import itemgetter

from pagesim.simulator.core.catalog import GPUSpec, KVDtype, ModelSpec
from pagesim.simulator.core.config import ExecutionConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.plan import SeqWork, StepCost, StepPlan, step_cost_of
from pagesim.simulator.execution.model import TransferPricer

ACTIVATION_BYTES = 2  # fp16/bf16 activations
WEIGHT_BYTES = 2  # fp16/bf16 weights

_IS_PREFILL = itemgetter(4)  # SeqWork.is_prefill


def _require_positive(name: str, value: float) -> None:
    if not value > 0:
        raise InputError(f"roofline execution model: {name} must be > 0, got {value!r}")


def _require_share(name: str, value: float) -> None:
    if not 0 < value <= 1:
        raise InputError(
            f"roofline execution model: execution.{name} must be in (0, 1] "
            f"(a share of the datasheet peak), got {value!r}"
        )


class RooflineModel:
    """Analytic `ExecutionModel`: prices a `StepPlan` from datasheet peaks × named efficiencies."""

    name = "roofline"

    def __init__(
        self,
        model: ModelSpec,
        gpu: GPUSpec,
        config: ExecutionConfig,
        kv_dtype: KVDtype = KVDtype.FP16,
        tensor_parallel: int = 1,
        block_size: int = 16,
    ) -> None:
        for share in ("gemm_efficiency", "attention_bw_efficiency", "weight_bw_efficiency"):
            _require_share(share, getattr(config, share))
        if config.step_overhead_s < 0:
            raise InputError(
                "roofline execution model: execution.step_overhead_s must be >= 0, "
                f"got {config.step_overhead_s!r}"
            )
        _require_positive("tensor_parallel", tensor_parallel)
        _require_positive("block_size (tokens)", block_size)
        if tensor_parallel > 1:
            _require_positive("execution.allreduce_bw_gbps", config.allreduce_bw_gbps)
        for field in ("mem_bandwidth_bps", "fp16_flops", "host_link_bps"):
            _require_positive(f"GPU {gpu.name!r} {field}", getattr(gpu, field))

        self.model = model
        self.gpu = gpu
        self.config = config
        self.kv_dtype = kv_dtype
        self.tensor_parallel = tensor_parallel
        self.block_size = block_size

        t = tensor_parallel
        num_layers = model.num_layers
        hidden = model.hidden_size
        q_out = model.num_heads * model.head_dim
        kv_out = model.num_kv_heads * model.head_dim
        ffn_per_gpu = model.intermediate_size / t
        up_matrices = 2 if model.is_gated_mlp else 1

        gemm_flops_per_s = gpu.fp16_flops * config.gemm_efficiency
        weight_bytes_per_s = gpu.mem_bandwidth_bps * config.weight_bw_efficiency
        kv_bytes_per_s = gpu.mem_bandwidth_bps * config.attention_bw_efficiency

        # Linear layers of all L layers, per GPU. Activation elements per token per layer:
        # each fused GEMM reads its input once and writes its output once.
        act_elems_per_token_layer = (
            (hidden + (q_out + 2 * kv_out) / t)  # QKV (column-parallel)
            + (q_out / t + hidden)  # output projection (row-parallel)
            + (hidden + up_matrices * ffn_per_gpu)  # MLP gate+up, or up (column-parallel)
            + (ffn_per_gpu + hidden)  # MLP down (row-parallel)
        )
        self.linear_flops_per_token = num_layers * 2 * model.params_per_layer / t
        self.linear_weight_bytes = num_layers * model.params_per_layer * WEIGHT_BYTES / t
        self.linear_act_bytes_per_token = num_layers * act_elems_per_token_layer * ACTIVATION_BYTES
        # LM head (vocab-parallel), per sequence that samples.
        self.lm_head_flops_per_seq = 2 * model.vocab_size * hidden / t
        self.lm_head_weight_bytes = model.vocab_size * hidden * WEIGHT_BYTES / t
        self.lm_head_act_bytes_per_seq = (hidden + model.vocab_size / t) * ACTIVATION_BYTES
        # Attention: 2 FLOPs per multiply-add, QK^T and PV each head_dim long, per (query, key).
        self.attention_flops_per_pair = 4 * (model.num_heads / t) * model.head_dim * num_layers
        self.kv_bytes_per_token = model.kv_bytes_per_token(kv_dtype, t)
        self.block_bytes = block_size * self.kv_bytes_per_token
        # Ring all-reduce moves 2(t−1)/t of the buffer per GPU; 2 per layer; activations 16-bit.
        allreduce_bytes_per_token = (
            2 * num_layers * 2 * (t - 1) / t * hidden * ACTIVATION_BYTES if t > 1 else 0.0
        )
        self.allreduce_bytes_per_token = allreduce_bytes_per_token

        # Seconds per unit, so `price` does only multiply-adds.
        self._linear_s_per_token = self.linear_flops_per_token / gemm_flops_per_s
        self._linear_weight_s = self.linear_weight_bytes / weight_bytes_per_s
        self._linear_act_s_per_token = self.linear_act_bytes_per_token / weight_bytes_per_s
        self._lm_head_s_per_seq = self.lm_head_flops_per_seq / gemm_flops_per_s
        self._lm_head_weight_s = self.lm_head_weight_bytes / weight_bytes_per_s
        self._lm_head_act_s_per_seq = self.lm_head_act_bytes_per_seq / weight_bytes_per_s
        self._attention_s_per_pair = self.attention_flops_per_pair / gemm_flops_per_s
        self._kv_s_per_token = self.kv_bytes_per_token / kv_bytes_per_s
        self._allreduce_s_per_token = (
            allreduce_bytes_per_token / (config.allreduce_bw_gbps * 1e9) if t > 1 else 0.0
        )
        self._weight_bytes = self.linear_weight_bytes + self.lm_head_weight_bytes
        self._transfers = TransferPricer(
            self.block_bytes,
            gpu.host_link_bps,
            kv_bytes_per_s,
            num_layers=model.num_layers,
            copy_latency_s=config.swap_copy_latency_s,
        )
        self._overhead_s = config.step_overhead_s

    def price(self, plan: StepPlan) -> StepCost:
        """Seconds, FLOPs and HBM bytes of one step (see the module docstring for the model)."""
        num_prefill_seqs = plan.num_prefill_seqs
        num_seqs = num_prefill_seqs + plan.num_decode_seqs
        swap_s, copy_s, copy_bytes = self._transfers.price(plan)
        if not num_seqs:
            return StepCost(0.0, swap_s, copy_s, 0.0, copy_bytes)

        # Sums over all sequences come from the plan (a grouped plan has them in closed form);
        # the Python loop runs only over prefills, which every plan lists one by one.
        kv_s_per_token = self._kv_s_per_token
        num_context = plan.num_context_tokens  # KV tokens read by attention, all sequences
        num_prefill_context = 0
        num_prefill_pairs = 0
        prefill_attention_s = 0.0
        if num_prefill_seqs:
            listed = plan.listed_work
            s_per_pair = self._attention_s_per_pair
            for _, _, num_new, context, _ in compress(listed, map(_IS_PREFILL, listed)):
                # pairs = n(c − n) + n(n + 1)/2 = n·c − n(n − 1)/2
                pairs = num_new * context - (num_new * (num_new - 1) >> 1)
                num_prefill_pairs += pairs
                num_prefill_context += context
                flop_s = pairs * s_per_pair
                read_s = context * kv_s_per_token
                prefill_attention_s += flop_s if flop_s > read_s else read_s
        num_decode_context = num_context - num_prefill_context
        if plan.num_decode_tokens == plan.num_decode_seqs:
            num_decode_pairs = num_decode_context  # one new token attends its c keys
        else:  # decodes of several tokens (speculative): count their pairs like a prefill's
            num_decode_pairs = sum(
                n * c - (n * (n - 1) >> 1) for _, _, n, c, is_prefill in plan.work if not is_prefill
            )
        num_pairs = num_prefill_pairs + num_decode_pairs

        num_tokens = plan.num_prefill_tokens + plan.num_decode_tokens
        linear_flop_s = num_tokens * self._linear_s_per_token
        linear_byte_s = self._linear_weight_s + num_tokens * self._linear_act_s_per_token
        lm_flop_s = num_seqs * self._lm_head_s_per_seq
        lm_byte_s = self._lm_head_weight_s + num_seqs * self._lm_head_act_s_per_seq
        compute_s = (
            (linear_flop_s if linear_flop_s > linear_byte_s else linear_byte_s)
            + (lm_flop_s if lm_flop_s > lm_byte_s else lm_byte_s)
            + num_decode_context * kv_s_per_token
            + prefill_attention_s
            + num_tokens * kv_s_per_token  # KV writes of the new tokens
            + num_tokens * self._allreduce_s_per_token
            + self._overhead_s
        )
        flops = (
            num_tokens * self.linear_flops_per_token
            + num_seqs * self.lm_head_flops_per_seq
            + num_pairs * self.attention_flops_per_pair
        )
        bytes_moved = (
            self._weight_bytes
            + num_tokens * self.linear_act_bytes_per_token
            + num_seqs * self.lm_head_act_bytes_per_seq
            + (num_context + num_tokens) * self.kv_bytes_per_token  # KV reads + writes
            + copy_bytes
        )
        return step_cost_of((compute_s, swap_s, copy_s, flops, bytes_moved))

    def prefill_time_s(self, prompt_len: int, num_cached: int = 0) -> float:
        """compute_s of one prefill of `prompt_len` tokens, `num_cached` of them already in KV."""
        work = SeqWork(0, 0, prompt_len - num_cached, prompt_len, True)
        return self.price(StepPlan.build((work,))).compute_s

    def decode_time_s(self, batch: int, context: int) -> float:
        """compute_s of one decode step of `batch` sequences, each `context` KV tokens long."""
        work = tuple(SeqWork(i, i, 1, context, False) for i in range(batch))
        return self.price(StepPlan.build(work)).compute_s

    @property
    def weight_bytes_per_step(self) -> float:
        """Weight bytes one GPU streams every step: linear layers and LM head."""
        return self._weight_bytes

    def describe(self) -> dict[str, object]:
        """Provenance for reports: the shapes, peaks and efficiency factors this model uses."""
        config = self.config
        return {
            "kind": self.name,
            "model": self.model.name,
            "gpu": self.gpu.name,
            "tensor_parallel": self.tensor_parallel,
            "kv_dtype": self.kv_dtype.value,
            "block_size": self.block_size,
            "peak_flops": self.gpu.fp16_flops,
            "mem_bandwidth_bps": self.gpu.mem_bandwidth_bps,
            "host_link_bps": self.gpu.host_link_bps,
            "allreduce_bw_bps": config.allreduce_bw_gbps * 1e9,
            "gemm_efficiency": config.gemm_efficiency,
            "attention_bw_efficiency": config.attention_bw_efficiency,
            "weight_bw_efficiency": config.weight_bw_efficiency,
            "step_overhead_s": config.step_overhead_s,
            "weight_bytes_per_step": self._weight_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "block_bytes": self.block_bytes,
            "figures": "per GPU; datasheet peaks x named efficiencies",
        }

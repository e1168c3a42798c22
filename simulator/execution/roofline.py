"""Roofline execution model: what one `StepPlan` costs, from datasheet ceilings, model shapes and
the GPU preset's factors (fitted to public measurements where they exist: core/hardware.py).

Every figure is **per GPU** under tensor parallelism t (each GPU runs the same step on its shard at
the same time), so MFU = flops / (peak × duration) and MBU = bytes_moved / (bandwidth × duration)
are per-GPU utilizations.

Cost of one step that computes T tokens for S sequences (D decoding, the rest prefilling), L layers
(the per-layer terms and their shapes are in roofline_terms.py):

    gpu_s  = L · linear(T) + lm_head(S) + L · small_ops(T)       (linear: GEMM by GEMM, gemm.py)
           + [D > 0] L · (attention_layer_s + D · attention_seq_s) + KV read / (bw · attn_eff)
             + block term (below)
           + [prefills] L · attention_prefill_layer_s
             + Σ max(L · (n · token_s + cached pairs · P / (peak · eff) + causal pairs · P /
                     (peak · causal_eff)),  c · kv / (bw · attn_eff))
           + T · kv / (bw · attn_eff)                                  (KV writes)
           + [t > 1] L · 2 · (latency + 2(t−1)/t · T · hidden · 2 B / bus bw)
             (messages up to 4 MiB on a measured link: its measured medians, interpolated)
    compute_s = gpu_s + host_s,  or max(gpu_s, host_s) under V1 async scheduling
                host_s = fixed + per_seq · S      (overhead.py: by engine era)
    swap_s = (blocks in + blocks out) · block_bytes / host_link
    copy_s = copies · block_bytes · 2 / (bw · attn_eff)

The block term (decode only) prices what the paged kernel (kernels/paged_attention.cu) does per
KV block beyond reading its KV: each CTA — one per KV head (per tile of at most 8 of its query
heads) per sequence — reads the block's table entry (4 B, exact) and starts a new contiguous run
in K and in V; we price that run's start as one 32-byte DRAM sector each (an **estimate**, not
measured: pagesim's kernel has not been timed across block sizes yet). Blocks read =
ceil(c / B) per sequence; in O(1) as Σc / B + D · (B − 1) / (2B) (the last block's expected part,
c mod B uniform). The kernel never reads a partial block's empty slots (it clamps to the last
token), so the partial last block costs a lookup, not bytes.

Assumptions a reader of a report must know:

- Weights are 16-bit, split evenly over t GPUs; activations 16-bit whatever the KV dtype.
- The LM head is vocab-parallel and runs for every sequence in the plan; the embedding lookup
  and logits gather are neglected.
- Decode attention reads each sequence's c tokens of KV once per layer; its FLOPs count for MFU,
  not for time. A speculative decode of n > 1 tokens counts its causal pairs for FLOPs and is
  timed by its KV read.
- Prefill attention is FlashAttention-like: pairs over cached context in whole tiles, the causal
  triangle of the new tokens at its own (lower, measured) efficiency, never faster than reading
  its KV once; sequences priced one after another.
- The all-reduce is not overlapped with compute and not counted in `bytes_moved` (it crosses
  NVLink or PCIe, not HBM).
- Compute, swap and copy times add up (`StepCost.duration_s`); swaps queue on the host link.
"""

from __future__ import annotations

from itertools import compress
from operator import itemgetter

from pagesim.simulator.core.catalog import GPUSpec, KVDtype, ModelSpec
from pagesim.simulator.core.config import ExecutionConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.plan import SeqWork, StepCost, StepPlan, step_cost_of
from pagesim.simulator.execution.factors import resolve_factors, resolve_link
from pagesim.simulator.execution.gemm import LinearCost
from pagesim.simulator.execution.model import TransferPricer
from pagesim.simulator.execution.overhead import EngineEra, host_overhead
from pagesim.simulator.execution.roofline_terms import (
    ACTIVATION_BYTES,
    ALLREDUCES_PER_LAYER,
    GEMMS_PER_LAYER,
    WEIGHT_BYTES,
    LayerShapes,
    allreduce_call_s,
)

_IS_PREFILL = itemgetter(4)  # SeqWork.is_prefill
BLOCK_TABLE_ENTRY_BYTES = 4  # one int32 per block per CTA (kernels/paged_attention.cu)
BLOCK_RUN_START_BYTES = 2 * 32  # estimate: one 32-byte sector each in K and in V per block
KERNEL_HEADS_PER_CTA = 8  # the kernel's tile of query heads sharing one KV head


def _require_positive(name: str, value: float) -> None:
    if not value > 0:
        raise InputError(f"roofline execution model: {name} must be > 0, got {value!r}")


class RooflineModel:
    """Analytic `ExecutionModel`: prices a `StepPlan` from datasheet peaks × fitted factors."""

    name = "roofline"

    def __init__(
        self,
        model: ModelSpec,
        gpu: GPUSpec,
        config: ExecutionConfig,
        kv_dtype: KVDtype = KVDtype.FP16,
        tensor_parallel: int = 1,
        block_size: int = 16,
        era: EngineEra = EngineEra.V0,
    ) -> None:
        _require_positive("tensor_parallel", tensor_parallel)
        _require_positive("block_size (tokens)", block_size)
        for field in ("mem_bandwidth_bps", "fp16_flops", "host_link_bps"):
            _require_positive(f"GPU {gpu.name!r} {field}", getattr(gpu, field))
        self.factors = f = resolve_factors(gpu.factors, config)
        self.link = resolve_link(gpu.interconnect, config, tensor_parallel)
        self.host = host_overhead(config, era)
        self.model = model
        self.gpu = gpu
        self.config = config
        self.kv_dtype = kv_dtype
        self.tensor_parallel = t = tensor_parallel
        self.block_size = block_size

        L = model.num_layers
        shapes = LayerShapes.of(model, t)
        peak, bw = gpu.fp16_flops, gpu.mem_bandwidth_bps
        self.shapes = shapes
        # Analytic counts (all layers, one GPU): MFU and MBU, and the profile model, use them.
        self.linear_flops_per_token = L * shapes.gemm_flops_per_token
        self.linear_weight_bytes = L * shapes.gemm_weight_bytes
        self.linear_act_bytes_per_token = L * shapes.gemm_act_bytes_per_token
        self.lm_head_flops_per_seq = 2 * model.vocab_size * model.hidden_size / t
        self.lm_head_weight_bytes = model.vocab_size * model.hidden_size * WEIGHT_BYTES / t
        self.lm_head_act_bytes_per_seq = (model.hidden_size + model.vocab_size / t) * (
            ACTIVATION_BYTES
        )
        self.attention_flops_per_pair = L * shapes.attention_flops_per_pair
        self.kv_bytes_per_token = model.kv_bytes_per_token(kv_dtype, t)
        self.block_bytes = block_size * self.kv_bytes_per_token
        ring = 2 * (t - 1) / t
        self.allreduce_bytes_per_token = (
            L * ALLREDUCES_PER_LAYER * ring * shapes.allreduce_bytes_per_token
        )

        # Seconds per unit, so that `price` does only multiply-adds (and cached look-ups: the
        # linear layers, LM head and all-reduce, which are not linear in the count).
        kv_bps = bw * f.attention_bw_efficiency
        self._linear = LinearCost(model, t, peak, bw, f)
        self._allreduce_message_per_token = shapes.allreduce_bytes_per_token
        self._allreduce: dict[int, float] = {}
        self._kv_s_per_token = self.kv_bytes_per_token / kv_bps
        self._cached_pair_s = self.attention_flops_per_pair / (peak * f.attention_flops_efficiency)
        self._causal_pair_s = self.attention_flops_per_pair / (peak * f.attention_causal_efficiency)
        self._prefill_token_s = L * f.attention_token_s * model.num_heads / t
        self._prefill_call_s = L * f.attention_prefill_layer_s
        self._attention_call_s = L * f.attention_layer_s
        self._attention_seq_s = L * f.attention_seq_s
        self._allreduce_calls = L * ALLREDUCES_PER_LAYER if t > 1 else 0
        # Fixed per step with work: GEMM launches (the layers' and the LM head's), the small ops'
        # fixed cost.
        self._fixed_s = (L * GEMMS_PER_LAYER + 1) * f.gemm_launch_s + L * f.small_ops_layer_s
        # Per token: small ops' bytes, the KV write.
        self._per_token_s = (
            L * shapes.small_ops_bytes_per_token / (bw * f.small_ops_bw_efficiency)
            + self._kv_s_per_token
        )
        # The block term: per decode context token and per decoding sequence (module docstring).
        group = max(1, model.num_heads // model.num_kv_heads)
        ctas = model.kv_heads_per_gpu(t) * -(-group // KERNEL_HEADS_PER_CTA)
        block_bytes_overhead = L * ctas * (BLOCK_TABLE_ENTRY_BYTES + BLOCK_RUN_START_BYTES)
        self.block_overhead_bytes_per_block = block_bytes_overhead
        self.block_s_per_context = block_bytes_overhead / block_size / kv_bps
        self.block_s_per_seq = block_bytes_overhead * (block_size - 1) / (2 * block_size) / kv_bps
        self._host_fixed = self.host.fixed_s
        self._host_per_seq = self.host.per_seq_s
        self._host_overlapped = self.host.is_overlapped
        self._weight_bytes = self.linear_weight_bytes + self.lm_head_weight_bytes
        self._transfers = TransferPricer(
            self.block_bytes,
            gpu.host_link_bps,
            kv_bps,
            num_layers=model.num_layers,
            copy_latency_s=config.swap_copy_latency_s,
        )

    def price(self, plan: StepPlan) -> StepCost:
        """Seconds, FLOPs and HBM bytes of one step (see the module docstring for the model)."""
        num_prefill_seqs = plan.num_prefill_seqs
        num_decode_seqs = plan.num_decode_seqs
        num_seqs = num_prefill_seqs + num_decode_seqs
        swap_s, copy_s, copy_bytes = self._transfers.price(plan)
        if not num_seqs:
            return StepCost(0.0, swap_s, copy_s, 0.0, copy_bytes)

        # Sums over all sequences come from the plan (a grouped plan has them in closed form);
        # the Python loop runs only over prefills, which every plan lists one by one.
        kv_s_per_token = self._kv_s_per_token
        num_context = plan.num_context_tokens  # KV tokens read by attention, all sequences
        num_prefill_context = 0
        num_prefill_pairs = 0
        attention_s = 0.0
        if num_prefill_seqs:
            listed = plan.listed_work
            cached_s, causal_s, token_s = (
                self._cached_pair_s,
                self._causal_pair_s,
                self._prefill_token_s,
            )
            for _, _, num_new, context, _ in compress(listed, map(_IS_PREFILL, listed)):
                cached = num_new * (context - num_new)  # pairs over cached context
                causal = (num_new * (num_new + 1)) >> 1  # the new tokens' causal triangle
                num_prefill_pairs += cached + causal
                num_prefill_context += context
                flop_s = cached * cached_s + causal * causal_s + num_new * token_s
                read_s = context * kv_s_per_token
                attention_s += flop_s if flop_s > read_s else read_s
            attention_s += self._prefill_call_s
        num_decode_context = num_context - num_prefill_context
        if num_decode_seqs:
            attention_s += (
                self._attention_call_s
                + num_decode_seqs * (self._attention_seq_s + self.block_s_per_seq)
                + num_decode_context * (kv_s_per_token + self.block_s_per_context)
            )
        if plan.num_decode_tokens == num_decode_seqs:
            num_decode_pairs = num_decode_context  # one new token attends its c keys
        else:  # decodes of several tokens (speculative): count their pairs like a prefill's
            num_decode_pairs = sum(
                n * c - (n * (n - 1) >> 1) for _, _, n, c, is_prefill in plan.work if not is_prefill
            )
        num_pairs = num_prefill_pairs + num_decode_pairs

        num_tokens = plan.num_prefill_tokens + plan.num_decode_tokens
        # Linear layers and LM head GEMM by GEMM (execution/gemm.py), the all-reduce per call.
        gpu_s = (
            self._linear.layers_s(num_tokens)
            + self._linear.lm_head_s(num_seqs)
            + self.allreduce_step_s(num_tokens)
            + attention_s
            + self._fixed_s
            + num_tokens * self._per_token_s
        )
        host_s = self._host_fixed + num_seqs * self._host_per_seq
        if self._host_overlapped:
            compute_s = gpu_s if gpu_s > host_s else host_s
        else:
            compute_s = gpu_s + host_s
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

    def breakdown(self, plan: StepPlan) -> dict[str, float]:
        """compute_s of `plan` term by term (the error table and tests use it; `price` adds the
        same terms inline, and a test checks that the two agree)."""
        work = plan.work
        num_seqs = len(work)
        if not num_seqs:
            return {}
        num_tokens = plan.num_prefill_tokens + plan.num_decode_tokens
        f, L = self.factors, self.model.num_layers
        prefills = [(n, c) for _, _, n, c, is_prefill in work if is_prefill]
        decode_context = sum(c for _, _, _, c, is_prefill in work if not is_prefill)
        num_decode = num_seqs - len(prefills)
        prefill_s = sum(
            max(
                n * (c - n) * self._cached_pair_s
                + n * (n + 1) // 2 * self._causal_pair_s
                + n * self._prefill_token_s,
                c * self._kv_s_per_token,
            )
            for n, c in prefills
        )
        parts = {
            "linear": self._linear.layers_s(num_tokens) + L * GEMMS_PER_LAYER * f.gemm_launch_s,
            "lm_head": self._linear.lm_head_s(num_seqs) + f.gemm_launch_s,
            "small_ops": L * f.small_ops_layer_s
            + num_tokens
            * L
            * self.shapes.small_ops_bytes_per_token
            / (self.gpu.mem_bandwidth_bps * f.small_ops_bw_efficiency),
            "decode_attention": (
                self._attention_call_s
                + num_decode * (self._attention_seq_s + self.block_s_per_seq)
                + decode_context * (self._kv_s_per_token + self.block_s_per_context)
                if num_decode
                else 0.0
            ),
            "prefill_attention": prefill_s + self._prefill_call_s if prefills else 0.0,
            "kv_write": num_tokens * self._kv_s_per_token,
            "all_reduce": self.allreduce_step_s(num_tokens),
        }
        gpu_s = sum(parts.values())
        host_s = self._host_fixed + num_seqs * self._host_per_seq
        parts["host"] = max(0.0, host_s - gpu_s) if self._host_overlapped else host_s
        return parts

    def allreduce_step_s(self, num_tokens: int) -> float:
        """The step's all-reduces: two calls per layer of the step's hidden states
        (roofline_terms.allreduce_call_s; 0 without tensor parallelism)."""
        if not self._allreduce_calls:
            return 0.0
        found = self._allreduce.get(num_tokens)
        if found is None:
            message = num_tokens * self._allreduce_message_per_token
            call_s = allreduce_call_s(message, self.tensor_parallel, self.link)
            found = self._allreduce[num_tokens] = self._allreduce_calls * float(call_s)
        return found

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
        """Provenance for reports: the shapes, peaks and factors this model uses, and where each
        came from."""
        f = self.factors
        notes = []
        if not f.is_fitted:
            notes.append(f"{self.gpu.name}: {f.source}")
        if self.tensor_parallel > 1 and not self.link.is_fitted:
            notes.append(f"all-reduce over {self.link.name}: {self.link.source}")
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
            "gemm_efficiency": f.gemm_efficiency,
            "gemm_overlap": f.gemm_overlap,
            "gemm_launch_s": f.gemm_launch_s,
            "gemm_tile": f"{f.gemm_tile_m} x {f.gemm_tile_n} over {f.gemm_num_sms} SMs"
            if f.gemm_num_sms
            else "none (smooth)",
            "weight_bw_efficiency": f.weight_bw_efficiency,
            "small_ops_layer_s": f.small_ops_layer_s,
            "small_ops_bw_efficiency": f.small_ops_bw_efficiency,
            "attention_bw_efficiency": f.attention_bw_efficiency,
            "attention_flops_efficiency": f.attention_flops_efficiency,
            "attention_causal_efficiency": f.attention_causal_efficiency,
            "attention_token_s": f.attention_token_s,
            "attention_prefill_layer_s": f.attention_prefill_layer_s,
            "attention_layer_s": f.attention_layer_s,
            "attention_seq_s": f.attention_seq_s,
            "factors_source": f.source,
            "factors_extrapolated": not f.is_fitted,
            "interconnect": self.link.name,
            "allreduce_latency_s": self.link.allreduce_latency_s,
            "allreduce_bw_bps": self.link.allreduce_bw_bps,
            "interconnect_source": self.link.source,
            **self.host.describe(),
            "block_overhead_bytes_per_block": self.block_overhead_bytes_per_block,
            "weight_bytes_per_step": self._weight_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "block_bytes": self.block_bytes,
            "sources": self.term_sources(),
            "notes": notes,
            "warnings": [],
            "figures": "per GPU; datasheet peaks x the GPU's factors",
        }

    def term_sources(self) -> dict[str, str]:
        """Where each term of a step's cost comes from (the report shows it)."""
        f = self.factors
        fitted = "fitted" if f.is_fitted else "extrapolated"
        link = "fitted" if self.link.is_fitted else "estimate"
        return {
            "linear": f"roofline ({fitted} factors)",
            "small_ops": f"roofline ({fitted} factors)",
            "lm_head": f"roofline ({fitted} factors)",
            "decode_attention": "roofline (factors fitted to A100 attention; block term estimated)",
            "prefill_attention": "roofline (factors fitted to A100 attention)",
            "all_reduce": (
                f"roofline ({link}: {self.link.name}"
                + ("; measured medians up to 4 MiB" if self.link.small_s else "")
                + ")"
            )
            if self.tensor_parallel > 1
            else "none (tensor_parallel 1)",
            "host_overhead": self.host.source,
        }

"""Roofline execution model: what one `StepPlan` costs, from datasheet ceilings, model shapes and
the GPU preset's factors (fitted to public measurements where they exist: core/presets/).

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
             (messages up to 4 MiB on a measured link: its measured medians, interpolated;
             they fall with size where NCCL's measured regimes do, so this term alone may
             shrink as the step grows; as vLLM runs the step, its custom kernel where it runs:
             allreduce.py)
    compute_s = serial host + max(gpu_s, overlapped host)   (overhead.py: by engine era)

As vLLM runs the step (a `VllmRuntime`, vllm_runtime.py), a step replaying a CUDA graph is priced
at its padded size T' (cuda_graphs.py) in the linear layers, small operators, KV writes and
all-reduces; attention and the LM head at its real sequences.
    swap_s = (blocks in + blocks out) · block_bytes / host_link
    copy_s = copies · block_bytes · 2 / (bw · attn_eff)

The block term (decode only) prices what the paged kernel does per KV block beyond reading its
KV: bytes per block (roofline_terms.block_overhead_bytes; the 64 B of a run's start an
**estimate**) × blocks read, ceil(c / B) per sequence, in O(1) as Σc / B + D · (B − 1) / (2B) (the
last block's expected part, c mod B uniform).

Assumptions a reader of a report must know:

- Weights are split evenly over t GPUs; activations 16-bit whatever the KV dtype. Linear
  weights are streamed in the model's weight dtype and their GEMMs run at that dtype's peak on
  the GPU (precision.py); a dense 16-bit model takes exactly the 16-bit path above.
- A mixture of experts streams, per MoE layer, the experts its step's tokens are expected to
  touch (moe_cost.py: E (1 - (1 - k/E)^T) under uniform routing), at the fused-MoE kernel's
  share of the bandwidth (moe_cost.FUSED_MOE_BW_EFFICIENCY), besides the always-read weights;
  under DP attention + expert parallelism it adds dispatch and combine, priced as
  `moe_dispatch` in `breakdown`.
- MLA (roofline_terms.MLAShapes): decode in the absorbed form, bound by the slower of its latent
  read and its FLOPs (`_decode_extra_s`, 0 for any other attention); prefill in the
  non-absorbed form, with the cached context's up-projection.
- The LM head is vocab-parallel and runs for every sequence in the plan; the embedding lookup
  and logits gather are neglected.
- Sliding-window layers read at most their window (plus the step's new tokens) and their
  prefill pairs are bounded by it; state layers read no KV but read and write their fixed
  state once per sequence (layer_kinds.py; `state_layers` in `breakdown`).
- Decode attention reads each sequence's c tokens of KV once per full-attention layer; its
  FLOPs count for MFU, not for time. A speculative decode of n > 1 tokens counts its causal
  pairs for FLOPs and is timed by its KV read.
- Prefill attention is FlashAttention-like: pairs over cached context in whole tiles, the causal
  triangle of the new tokens at its own (lower, measured) efficiency, never faster than reading
  its KV once; sequences priced one after another.
- The all-reduce is not overlapped with compute and not counted in `bytes_moved` (it crosses
  NVLink or PCIe, not HBM).
- Compute, swap and copy times add up (`StepCost.duration_s`); swaps queue on the host link.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import compress
from operator import itemgetter
from weakref import WeakValueDictionary

from pagesim.simulator.core.catalog import GPUSpec, KVDtype, ModelSpec
from pagesim.simulator.core.config import ExecutionConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.plan import SeqWork, StepCost, StepPlan, step_cost, step_cost_of
from pagesim.simulator.execution.allreduce import Route, StepAllReduce
from pagesim.simulator.execution.factors import resolve_factors, resolve_link
from pagesim.simulator.execution.gemm import LinearCost, is_dense
from pagesim.simulator.execution.layer_kinds import KindsCost
from pagesim.simulator.execution.model import NO_TRANSFER, TransferPricer
from pagesim.simulator.execution.moe_cost import (
    FUSED_MOE_BW_EFFICIENCY,
    ExpertLayout,
    ExpertTraffic,
)
from pagesim.simulator.execution.overhead import EngineEra, host_overhead
from pagesim.simulator.execution.precision import linear_split
from pagesim.simulator.execution.roofline_report import RooflineReport
from pagesim.simulator.execution.roofline_terms import (
    ACTIVATION_BYTES,
    ALLREDUCES_PER_LAYER,
    GEMMS_PER_LAYER,
    WEIGHT_BYTES,
    LayerShapes,
    MLAShapes,
    block_overhead_bytes,
)
from pagesim.simulator.execution.vllm_runtime import VllmRuntime

_IS_PREFILL = itemgetter(4)  # SeqWork.is_prefill
_MAX_SHAPES = 1 << 16  # step shapes `price` keeps the terms of (a few MB at most)


class _Caches:
    """What `RooflineModel`s built from equal arguments share: their prices are the same
    functions of a step's shape, cached once (`_SHARED`)."""

    __slots__ = (
        "__weakref__",
        "linear",
        "shape_priced",
        "shape_s",
        "tokens_allreduce_s",
        "tokens_linear_s",
        "tokens_priced",
    )

    def __init__(self, linear: LinearCost) -> None:
        self.linear = linear
        # `RooflineModel.price`'s shape caches: ints and floats only (module docstring of
        # simulator/core/collector.py: the cyclic collector does not track them, so a run
        # leaves no more for it to visit however many shapes it prices).
        self.shape_priced: dict[int, int] = {}
        self.shape_s: dict[int, float] = {}
        # The same shape terms that depend on a step's tokens alone (`_shape_terms_of`).
        self.tokens_priced: dict[int, int] = {}
        self.tokens_linear_s: dict[int, float] = {}
        self.tokens_allreduce_s: dict[int, float] = {}


# The constructor's arguments -> their models' caches, while one of those models lives.
_SHARED: WeakValueDictionary[tuple[object, ...], _Caches] = WeakValueDictionary()


def _require_positive(name: str, value: float) -> None:
    if not value > 0:
        raise InputError(f"roofline execution model: {name} must be > 0, got {value!r}")


class RooflineModel(RooflineReport):
    """Analytic `ExecutionModel`: prices a `StepPlan` from datasheet peaks × fitted factors
    (`breakdown`, `describe`, `term_sources`: roofline_report.RooflineReport)."""

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
        *,
        data_parallel: int = 1,
        expert_parallel: bool = False,
        runtime: VllmRuntime | None = None,
    ) -> None:
        _require_positive("tensor_parallel", tensor_parallel)
        self.layout = ExpertLayout(tensor_parallel, data_parallel, expert_parallel)
        self.layout.check(model)
        _require_positive("block_size (tokens)", block_size)
        for field in ("mem_bandwidth_bps", "fp16_flops", "host_link_bps"):
            _require_positive(f"GPU {gpu.name!r} {field}", getattr(gpu, field))
        self.factors = f = resolve_factors(gpu.factors, config)
        self.link = resolve_link(gpu.interconnect, config, tensor_parallel)
        self.host = host_overhead(config, era)
        # How vLLM runs the step (vllm_runtime.py): CUDA graphs and its all-reduce; None prices
        # the operators as measured one by one (eager, NCCL), as the fit to Vidur's data does.
        self.runtime = runtime
        self._graphs = runtime.graphs if runtime is not None else None
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
        # Weight dtypes, routed experts, MLA (precision.py, moe_cost.py, MLAShapes): a dense
        # 16-bit model with no MLA keeps the expressions above and below exactly.
        self.split = split = linear_split(model, gpu, t)
        # Plain: the four dense GEMMs of gemm.LinearCost in 16 bits (tiled); the others take one
        # lumped GEMM in their dtypes below.
        self.is_plain = is_dense(model) and model.weight_dtype.is_16_bit
        if not self.is_plain:
            self.linear_flops_per_token = split.flops_per_token
            self.linear_weight_bytes = split.fixed_weight_bytes
        self.experts = (
            ExpertTraffic(
                model, self.layout, split.expert_bytes, gpu.interconnect, config.routing_skew
            )
            if model.moe is not None
            else None
        )
        self.decode_flops_per_pair = self.attention_flops_per_pair
        self.upproject_flops_per_cached_token = 0.0
        if model.mla is not None:
            mla = MLAShapes.of(model, t)
            self.attention_flops_per_pair = L * mla.prefill_flops_per_pair
            self.decode_flops_per_pair = L * mla.decode_flops_per_pair
            self.upproject_flops_per_cached_token = L * mla.upproject_flops_per_cached_token
        self.kv_bytes_per_token = model.kv_bytes_per_token(kv_dtype, t)
        self.block_bytes = block_size * self.kv_bytes_per_token

        # Seconds per unit, so that `price` does only multiply-adds (and cached look-ups: a dense
        # 16-bit model's linear layers GEMM by GEMM (gemm.py), the LM head and the all-reduce,
        # which are not linear in the count).
        gemm_flops_s = peak * f.gemm_efficiency
        weight_bps = bw * f.weight_bw_efficiency
        self._weight_bps = weight_bps
        # Routed experts stream at the fused-MoE kernel's own share (moe_cost.py).
        moe_share = config.fused_moe_bw_efficiency
        self._expert_bps = bw * (FUSED_MOE_BW_EFFICIENCY if moe_share is None else moe_share)
        kv_bps = bw * f.attention_bw_efficiency
        self._overlap = f.gemm_overlap
        # Priced the same way by every model built from equal arguments (a fleet's replicas):
        # the linear layers' and the step shapes' caches are theirs together (`_Caches`).
        key = (model, gpu, config, kv_dtype, t, block_size, era, data_parallel, expert_parallel)
        caches = _SHARED.get((*key, runtime))
        if caches is None:
            caches = _SHARED[(*key, runtime)] = _Caches(LinearCost(model, t, peak, bw, f))
        self._caches = caches
        self._linear = caches.linear
        # Other weight dtypes and routed experts: one lumped GEMM in the model's dtypes, whose
        # expert bytes depend on the step (precision.py, moe_cost.py); not tiled.
        self._linear_c = (
            self.linear_flops_per_token / gemm_flops_s
            if self.is_plain
            else split.compute_s_per_token(f.gemm_efficiency)
        )
        self._linear_m0 = self.linear_weight_bytes / weight_bps
        self._linear_m1 = self.linear_act_bytes_per_token / weight_bps
        self._kv_s_per_token = self.kv_bytes_per_token / kv_bps
        self._cached_pair_s = self.attention_flops_per_pair / (peak * f.attention_flops_efficiency)
        self._causal_pair_s = self.attention_flops_per_pair / (peak * f.attention_causal_efficiency)
        self._prefill_token_s = L * f.attention_token_s * model.num_heads / t
        self._prefill_call_s = L * f.attention_prefill_layer_s
        self._attention_call_s = L * f.attention_layer_s
        self._attention_seq_s = L * f.attention_seq_s
        # MLA: the absorbed decode's FLOPs per context token may outlast its latent read (many
        # query heads per GPU); priced as the excess over the read (0 for every other model).
        # Cached context up-projected in a prefill (non-absorbed form), at the 16-bit GEMM peak.
        self._decode_flop_s = self.decode_flops_per_pair / (peak * f.attention_flops_efficiency)
        self._upproject_s = self.upproject_flops_per_cached_token / gemm_flops_s
        # The step's all-reduces, each the kernel vLLM runs (allreduce.py; NCCL's without a
        # runtime).
        self._allreduce = StepAllReduce(
            L * ALLREDUCES_PER_LAYER if t > 1 else 0,
            shapes.allreduce_bytes_per_token,
            t,
            self.link,
            runtime.era if runtime is not None else None,
            gpu.name,
            bw,
        )
        # Fixed per step with work: GEMM launches (the layers' and the LM head's), the small ops'
        # fixed cost.
        self._fixed_s = (L * GEMMS_PER_LAYER + 1) * f.gemm_launch_s + L * f.small_ops_layer_s
        # A step's shape (tokens, sequences, decode only; one int: `price`'s key) -> its tokens
        # computed and its linear + LM head + all-reduce seconds: the terms of its shape alone,
        # for `price` without experts; a run comes back to the same shapes (~80-90% of its steps
        # on the Azure trace and Vidur's case C). Ints and floats only, which the cyclic
        # collector does not track (tuples it would, the collector paused: tests/simulator/
        # test_collector.py): a run's result holds no more for it to visit.
        self._shape_priced = caches.shape_priced
        self._shape_s = caches.shape_s
        self._caches = caches
        # Per token: small ops' bytes, the KV write.
        self._per_token_s = (
            L * shapes.small_ops_bytes_per_token / (bw * f.small_ops_bw_efficiency)
            + self._kv_s_per_token
        )
        # The block term: per decode context token and per decoding sequence (module docstring).
        block_bytes_overhead = L * block_overhead_bytes(model, t)
        self.block_overhead_bytes_per_block = block_bytes_overhead
        self.block_s_per_context = block_bytes_overhead / block_size / kv_bps
        self.block_s_per_seq = block_bytes_overhead * (block_size - 1) / (2 * block_size) / kv_bps
        # Sliding-window and state layers (layer_kinds.py); None when every layer is full.
        self.kinds = KindsCost.of(
            model,
            model.kv_bytes_per_token_per_layer(kv_dtype, t),
            model.state_bytes_per_seq(kv_dtype, t),
            tensor_parallel=t,
            kv_bps=kv_bps,
            attention_flops_s=peak * f.attention_flops_efficiency,
            attention_causal_flops_s=peak * f.attention_causal_efficiency,
            flops_per_pair=shapes.attention_flops_per_pair,
            block_overhead_bytes_per_layer=block_bytes_overhead / L,
            block_size=block_size,
            fixed_s=(
                self._prefill_token_s,
                self._prefill_call_s,
                self._attention_call_s,
                self._attention_seq_s,
            ),
        )
        if self.kinds is not None and model.mla is not None:
            raise InputError(
                f"roofline execution model: {model.name!r} mixes MLA with sliding-window or "
                "state layers, which is not modelled; give every layer full attention"
            )
        self._decode_extra_s = max(
            0.0, self._decode_flop_s - (self._kv_s_per_token + self.block_s_per_context)
        )
        # The host's serial and overlapped parts (overhead.py): compute = serial + max(gpu,
        # overlapped).
        (
            self._host_serial_s,
            self._host_serial_per_seq_s,
            self._host_overlapped_s,
            self._host_overlapped_per_seq_s,
        ) = self.host.parts()
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
        swap_s, copy_s, copy_bytes = (
            self._transfers.price(plan) if plan.moves_blocks else NO_TRANSFER
        )
        if not num_seqs:
            return step_cost(0.0, swap_s, copy_s, 0.0, copy_bytes)

        # Sums over all sequences come from the plan (a grouped plan has them in closed form);
        # the Python loop runs only over prefills, which every plan lists one by one.
        kinds = self.kinds
        if kinds is None:
            kv_s_per_token = self._kv_s_per_token
            num_context = plan.num_context_tokens  # KV tokens read by attention, all sequences
            num_prefill_context = 0
            num_prefill_pairs = 0
            attention_s = 0.0
            if num_prefill_seqs:
                listed: Iterable[SeqWork] = plan.listed_work
                cached_s, causal_s, token_s = (
                    self._cached_pair_s,
                    self._causal_pair_s,
                    self._prefill_token_s,
                )
                upproject_s = self._upproject_s
                # Every listed entry a prefill (a grouped plan's usual listing: the prompt
                # chunks beside the members), walked as it is: no iterators made for the filter.
                if num_prefill_seqs != len(plan.listed_work):
                    listed = compress(listed, map(_IS_PREFILL, listed))
                for _, _, num_new, context, _ in listed:
                    cached = num_new * (context - num_new)  # pairs over cached context
                    causal = (num_new * (num_new + 1)) >> 1  # the new tokens' causal triangle
                    num_prefill_pairs += cached + causal
                    num_prefill_context += context
                    flop_s = cached * cached_s + causal * causal_s + num_new * token_s
                    if upproject_s:
                        flop_s += (context - num_new) * upproject_s
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
                if self._decode_extra_s:
                    attention_s += num_decode_context * self._decode_extra_s
            if plan.num_decode_tokens == num_decode_seqs:
                num_decode_pairs = num_decode_context  # one new token attends its c keys
            else:  # decodes of several tokens (speculative): count their pairs like a prefill's
                num_decode_pairs = sum(
                    n * c - (n * (n - 1) >> 1)
                    for _, _, n, c, is_prefill in plan.work
                    if not is_prefill
                )
            num_pairs = num_prefill_pairs + num_decode_pairs

            pair_flops = self.attention_flops_per_pair
            kv_bytes = (num_context + plan.num_tokens) * self.kv_bytes_per_token  # reads + writes
        else:  # sliding-window and state layers (layer_kinds.py)
            attention_s, num_pairs, kv_bytes = kinds.step(plan)
            pair_flops = kinds.flops_per_pair
            num_decode_pairs = num_prefill_context = 0  # MLA terms: never hybrid (__init__)

        num_tokens = plan.num_prefill_tokens + plan.num_decode_tokens
        # A step replaying a CUDA graph computes its padded size (cuda_graphs.py): the linear
        # layers, small operators, KV writes and all-reduces priced there; attention and the
        # LM head (outside the graph, on the real sequences) as they are.
        # Linear layers: a dense 16-bit model's GEMM by GEMM (execution/gemm.py); other
        # models' lumped, max(c, m) + overlap · min(c, m) as roofline_terms.overlapped, with
        # the routed experts the step touches. LM head GEMM by GEMM, all-reduce per call.
        # Summed in this order (the shape's terms first, as cached: the same float).
        experts = self.experts
        expert_bytes = 0.0
        if experts is None:
            key = (num_tokens << 32) | (num_seqs << 1) | (not num_prefill_seqs)
            shape_s = self._shape_s.get(key)
            if shape_s is None:
                shape_s = self._shape_terms_of(key, num_tokens, num_seqs, not num_prefill_seqs)
            priced = self._shape_priced[key]
        else:  # never plain: a mixture of experts is not a dense model
            priced, is_graphed = self.graph_shape(num_tokens, num_seqs, not num_prefill_seqs)
            # Experts the real tokens touch: a padding row routes alike every time (its hidden
            # state is no token's), so it adds none to count.
            expert_bytes = experts.note_step(num_tokens)
            linear_s = self.linear_layers_s(priced, expert_bytes / self._expert_bps)
            linear_s += experts.dispatch_s(priced)
            shape_s = (
                linear_s
                + self._linear.lm_head_s(num_seqs)
                + self.allreduce_step_s(priced, is_graphed)
            )
        gpu_s = shape_s + attention_s + self._fixed_s + priced * self._per_token_s
        overlapped_s = self._host_overlapped_s + num_seqs * self._host_overlapped_per_seq_s
        compute_s = (gpu_s if gpu_s > overlapped_s else overlapped_s) + (
            self._host_serial_s + num_seqs * self._host_serial_per_seq_s
        )
        flops = (
            num_tokens * self.linear_flops_per_token
            + num_seqs * self.lm_head_flops_per_seq
            + num_pairs * pair_flops
        )
        if self.model.mla is not None:
            flops += num_decode_pairs * (self.decode_flops_per_pair - self.attention_flops_per_pair)
            flops += (num_prefill_context - plan.num_prefill_tokens) * (
                self.upproject_flops_per_cached_token
            )
        bytes_moved = (
            self._weight_bytes
            + expert_bytes
            + num_tokens * self.linear_act_bytes_per_token
            + num_seqs * self.lm_head_act_bytes_per_seq
            + kv_bytes
            + copy_bytes
        )
        duration_s = compute_s + swap_s + copy_s  # as core/plan.py step_cost sums it
        return step_cost_of((compute_s, swap_s, copy_s, flops, bytes_moved, duration_s))

    def _shape_terms_of(
        self, key: int, num_tokens: int, num_seqs: int, is_decode_only: bool
    ) -> float:
        """`price`'s terms of a step's shape alone (no experts), kept under `key` for the next
        step of that shape; the cache is emptied when full, so a long run's memory stays flat."""
        # A step's tokens alone give its computed tokens, linear layers and all-reduces where
        # it runs eagerly or replays a graph sized by tokens (V1's; cuda_graphs.py): a new
        # shape is mostly a known token count beside a new number of sequences.
        caches, graphs = self._caches, self._graphs
        by_tokens = graphs is None or graphs.by_tokens or not is_decode_only
        linear_s = caches.tokens_linear_s.get(num_tokens) if by_tokens else None
        if linear_s is None:
            priced, is_graphed = self.graph_shape(num_tokens, num_seqs, is_decode_only)
            linear_s = self.linear_layers_s(priced)
            allreduce_s = self.allreduce_step_s(priced, is_graphed)
            if by_tokens:
                caches.tokens_priced[num_tokens] = priced
                caches.tokens_linear_s[num_tokens] = linear_s
                caches.tokens_allreduce_s[num_tokens] = allreduce_s
        else:
            priced = caches.tokens_priced[num_tokens]
            allreduce_s = caches.tokens_allreduce_s[num_tokens]
        shape_s = linear_s + self._linear.lm_head_s(num_seqs) + allreduce_s
        if len(self._shape_s) >= _MAX_SHAPES:
            self._shape_s.clear()
            self._shape_priced.clear()
            caches.tokens_priced.clear()
            caches.tokens_linear_s.clear()
            caches.tokens_allreduce_s.clear()
        self._shape_priced[key] = priced
        self._shape_s[key] = shape_s
        return shape_s

    def lm_head_s(self, num_seqs: int) -> float:
        """The LM head's share of a step of `num_seqs` sequences (a pipeline stage without the
        head takes it off: execution/pipeline_model.py)."""
        return self._linear.lm_head_s(num_seqs)

    def linear_layers_s(self, num_tokens: int, expert_weight_s: float = 0.0) -> float:
        """The linear layers' time for `num_tokens` tokens: a dense 16-bit model's GEMM by GEMM
        (execution/gemm.py), other models' lumped, max(c, m) + overlap · min(c, m) as
        roofline_terms.overlapped, the routed experts' weight reads (`expert_weight_s`) in m."""
        if self.is_plain:
            return self._linear.layers_s(num_tokens)
        c = num_tokens * self._linear_c
        m = self._linear_m0 + num_tokens * self._linear_m1 + expert_weight_s
        return (m if c < m else c) + self._overlap * (c if c < m else m)

    @property
    def prices_statelessly(self) -> bool:
        """Whether pure decode steps may be priced ahead (fastpath/decode_costs.py,
        fastpath/pure_runs.py): `price` only reads the plan (a mixture of experts' pricing counts
        the experts each step touches) and has no per-layer kinds (which that module omits)."""
        return self.experts is None and self.kinds is None

    def graph_shape(self, num_tokens: int, num_seqs: int, is_decode_only: bool) -> tuple[int, bool]:
        """(tokens the step computes, whether it replays a CUDA graph): cuda_graphs.py."""
        graphs = self._graphs
        if graphs is None:
            return num_tokens, False
        return graphs.shape(num_tokens, num_seqs, is_decode_only)

    def allreduce_route(self, num_tokens: int) -> Route:
        """The kernel vLLM runs for a step of `num_tokens` tokens (allreduce.py); NCCL without
        a runtime."""
        return self._allreduce.route_of(num_tokens)

    def allreduce_step_s(self, num_tokens: int, is_graphed: bool = False) -> float:
        """The step's all-reduces: two calls per layer of the step's hidden states, each the
        kernel vLLM runs (allreduce.py; without a runtime, NCCL's: roofline_terms.
        allreduce_call_s); 0 without tensor parallelism."""
        return self._allreduce.step_s(num_tokens, is_graphed)

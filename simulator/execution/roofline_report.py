"""The roofline's step cost term by term, and its provenance for reports: what
`RooflineModel.price` adds inline (roofline.py), written out so that tests and the error table can
check each term, and a report can say where each figure came from. A mixin: `RooflineModel`
inherits it and sets every attribute declared here."""

from __future__ import annotations

from pagesim.simulator.core.catalog import GPUSpec, KVDtype, ModelSpec
from pagesim.simulator.core.config import ExecutionConfig
from pagesim.simulator.core.hardware import Interconnect, RooflineFactors
from pagesim.simulator.core.plan import SeqWork, StepCost, StepPlan
from pagesim.simulator.execution.factors import LINK_OVERRIDES, OVERRIDES, set_in_scenario
from pagesim.simulator.execution.gemm import LinearCost
from pagesim.simulator.execution.layer_kinds import KindsCost
from pagesim.simulator.execution.moe_cost import ExpertTraffic
from pagesim.simulator.execution.overhead import HostOverhead
from pagesim.simulator.execution.precision import LinearSplit
from pagesim.simulator.execution.roofline_terms import (
    GEMMS_PER_LAYER,
    LayerShapes,
)
from pagesim.simulator.execution.vllm_runtime import VllmRuntime


class RooflineReport:
    """`breakdown`, `describe` and `term_sources` of a `RooflineModel`, and its probes (one
    prefill's or one decode step's time, the weight bytes a step streams)."""

    name: str
    model: ModelSpec
    gpu: GPUSpec
    kv_dtype: KVDtype
    tensor_parallel: int
    block_size: int
    config: ExecutionConfig
    factors: RooflineFactors
    link: Interconnect
    host: HostOverhead
    runtime: VllmRuntime | None
    shapes: LayerShapes
    split: LinearSplit
    experts: ExpertTraffic | None
    kinds: KindsCost | None
    kv_bytes_per_token: int
    block_bytes: int
    block_overhead_bytes_per_block: float
    block_s_per_context: float
    block_s_per_seq: float
    _overlap: float
    _linear_c: float
    _linear_m0: float
    _linear_m1: float
    is_plain: bool
    _linear: LinearCost
    _weight_bps: float
    _expert_bps: float
    _kv_s_per_token: float
    _cached_pair_s: float
    _causal_pair_s: float
    _prefill_token_s: float
    _prefill_call_s: float
    _upproject_s: float
    _attention_call_s: float
    _attention_seq_s: float
    _decode_extra_s: float
    _host_serial_s: float
    _host_serial_per_seq_s: float
    _host_overlapped_s: float
    _host_overlapped_per_seq_s: float

    _weight_bytes: float

    def price(self, plan: StepPlan) -> StepCost:
        raise NotImplementedError

    def allreduce_step_s(self, num_tokens: int, is_graphed: bool = False) -> float:
        raise NotImplementedError

    def graph_shape(self, num_tokens: int, num_seqs: int, is_decode_only: bool) -> tuple[int, bool]:
        raise NotImplementedError

    @property
    def weight_bytes_per_step(self) -> float:
        """Weight bytes one GPU streams every step: linear layers and LM head (for a mixture of
        experts, all but the routed experts, whose bytes depend on the step: moe_cost.py)."""
        return self._weight_bytes

    def prefill_time_s(self, prompt_len: int, num_cached: int = 0) -> float:
        """compute_s of one prefill of `prompt_len` tokens, `num_cached` of them already in KV."""
        work = SeqWork(0, 0, prompt_len - num_cached, prompt_len, True)
        return self.price(StepPlan.build((work,))).compute_s

    def decode_time_s(self, batch: int, context: int) -> float:
        """compute_s of one decode step of `batch` sequences, each `context` KV tokens long."""
        work = tuple(SeqWork(i, i, 1, context, False) for i in range(batch))
        return self.price(StepPlan.build(work)).compute_s

    def breakdown(self, plan: StepPlan) -> dict[str, float]:
        """compute_s of `plan` term by term (a test checks that they add up to `price`)."""
        r = self
        work = plan.work
        num_seqs = len(work)
        if not num_seqs:
            return {}
        num_tokens = plan.num_prefill_tokens + plan.num_decode_tokens
        f, L = r.factors, r.model.num_layers
        overlap = r._overlap

        def gemm(c: float, m: float) -> float:
            return max(c, m) + overlap * min(c, m)

        prefills = [(n, c) for _, _, n, c, is_prefill in work if is_prefill]
        decode_context = sum(c for _, _, _, c, is_prefill in work if not is_prefill)
        num_decode = num_seqs - len(prefills)
        prefill_s = sum(
            max(
                n * (c - n) * r._cached_pair_s
                + n * (n + 1) // 2 * r._causal_pair_s
                + n * r._prefill_token_s
                + (c - n) * r._upproject_s,
                c * r._kv_s_per_token,
            )
            for n, c in prefills
        )
        # A CUDA graph's padded size (RooflineModel.graph_shape), as `price` counts it; the
        # experts the real tokens touch.
        expert_bytes = r.experts.weight_bytes(num_tokens) if r.experts is not None else 0.0
        num_tokens, is_graphed = r.graph_shape(num_tokens, num_seqs, not prefills)
        linear_s = (
            r._linear.layers_s(num_tokens)
            if r.is_plain
            else gemm(
                num_tokens * r._linear_c,
                r._linear_m0 + num_tokens * r._linear_m1 + expert_bytes / r._expert_bps,
            )
        )
        parts = {
            "linear": linear_s + L * GEMMS_PER_LAYER * f.gemm_launch_s,
            "moe_dispatch": r.experts.dispatch_s(num_tokens) if r.experts is not None else 0.0,
            "lm_head": r._linear.lm_head_s(num_seqs) + f.gemm_launch_s,
            "small_ops": L * f.small_ops_layer_s
            + num_tokens
            * L
            * r.shapes.small_ops_bytes_per_token
            / (r.gpu.mem_bandwidth_bps * f.small_ops_bw_efficiency),
            "decode_attention": (
                r._attention_call_s
                + num_decode * (r._attention_seq_s + r.block_s_per_seq)
                + decode_context * (r._kv_s_per_token + r.block_s_per_context + r._decode_extra_s)
                if num_decode
                else 0.0
            ),
            "prefill_attention": prefill_s + r._prefill_call_s if prefills else 0.0,
            "kv_write": num_tokens * r._kv_s_per_token,
            "all_reduce": r.allreduce_step_s(num_tokens, is_graphed),
        }
        if r.kinds is not None:  # sliding-window and state layers (layer_kinds.py)
            decode_s, window_prefill_s, _, _, _ = r.kinds.attention(plan)
            parts["decode_attention"] = decode_s
            parts["prefill_attention"] = window_prefill_s
            parts["state_layers"] = r.kinds.state_s(num_seqs, num_tokens)
        gpu_s = sum(parts.values())
        overlapped_s = r._host_overlapped_s + num_seqs * r._host_overlapped_per_seq_s
        serial_s = r._host_serial_s + num_seqs * r._host_serial_per_seq_s
        parts["host"] = max(0.0, overlapped_s - gpu_s) + serial_s
        return parts

    def describe(self) -> dict[str, object]:
        """Provenance for reports: the shapes, peaks and factors this model uses, and where each
        came from."""
        r = self
        f = r.factors
        notes = []
        if not f.is_fitted:
            notes.append(f"{r.gpu.name}: {f.source}")
        link_keys = set_in_scenario(r.config, LINK_OVERRIDES)
        if r.tensor_parallel > 1 and not r.link.is_fitted and len(link_keys) < len(LINK_OVERRIDES):
            # (a preset estimate still in use; not when the scenario set both figures)
            notes.append(f"all-reduce over {r.gpu.interconnect.name}: {r.link.source}")
        split = r.split
        for peak in (split.fixed_peak, split.expert_peak):
            line = f"linear layers {peak.mode}: {peak.note}"
            if peak.mode != "W16A16" and line not in notes:
                notes.append(line)
        moe: dict[str, object] = {}
        if r.experts is not None:
            e = r.experts
            moe = {
                "routing_skew": e.skew,
                "data_parallel": e.layout.data_parallel,
                "expert_parallel": e.layout.expert_parallel,
                "expert_shards": e.layout.expert_shards,
                "expert_bytes": e.expert_bytes,
                "summary": e.summary(),  # the engine adds these to a run's summary
                "summary_steps": e.num_steps,  # the priced steps they are means over
            }
            if e.layout.data_parallel > 1:
                notes.append(
                    "expert parallelism: the run is one DP rank; the other ranks are assumed "
                    "equally loaded; dispatch/combine priced on the all-reduce link (an estimate)"
                )
        return {
            "kind": r.name,
            "model": r.model.name,
            "gpu": r.gpu.name,
            "tensor_parallel": r.tensor_parallel,
            "kv_dtype": r.kv_dtype.value,
            "weight_dtype": r.model.weight_dtype.value,
            "gemm_mode": split.expert_peak.mode if r.experts is not None else split.fixed_peak.mode,
            "gemm_peak_flops": split.fixed_peak.flops,
            "expert_gemm_peak_flops": split.expert_peak.flops,
            **moe,
            "block_size": r.block_size,
            "peak_flops": r.gpu.fp16_flops,
            "mem_bandwidth_bps": r.gpu.mem_bandwidth_bps,
            "host_link_bps": r.gpu.host_link_bps,
            "gemm_efficiency": f.gemm_efficiency,
            "gemm_overlap": f.gemm_overlap,
            "gemm_launch_s": f.gemm_launch_s,
            # gemm.LinearCost tiles the linear layers of a dense 16-bit model and every LM head.
            "gemm_tile": (
                f"{f.gemm_tile_m} x {f.gemm_tile_n} over {f.gemm_num_sms} SMs"
                + ("" if r.is_plain else " (LM head only; the linear layers one lumped GEMM)")
            )
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
            "interconnect": r.link.name,
            "allreduce_latency_s": r.link.allreduce_latency_s,
            "allreduce_bw_bps": r.link.allreduce_bw_bps,
            "interconnect_source": r.link.source,
            # [execution] factors and link figures the scenario set (the rest: the GPU preset's)
            "set_in_scenario": set_in_scenario(r.config, (*OVERRIDES, *LINK_OVERRIDES)),
            **r.host.describe(),
            **(r.runtime.describe() if r.runtime is not None else {}),
            "block_overhead_bytes_per_block": r.block_overhead_bytes_per_block,
            "weight_bytes_per_step": r.weight_bytes_per_step,
            "kv_bytes_per_token": r.kv_bytes_per_token,
            "block_bytes": r.block_bytes,
            "sources": r.term_sources(),
            "notes": notes,
            "warnings": [],
            "figures": "per GPU; datasheet peaks x the GPU's factors",
        }

    def term_sources(self) -> dict[str, str]:
        """Where each term of a step's cost comes from (the report shows it). A factor or link
        figure the scenario's [execution] sets is named "set in the scenario" in the terms it
        enters; the term's other figures keep their label (fitted, extrapolated, estimate)."""
        r = self
        fitted = "fitted" if r.factors.is_fitted else "extrapolated"
        gemm_keys = set_in_scenario(r.config, ("gemm_efficiency", "weight_bw_efficiency"))
        attention_keys = set_in_scenario(r.config, ("attention_bw_efficiency",))
        attention = "factors fitted to A100 attention"
        sources = {
            "linear": _roofline(gemm_keys, f"{fitted} factors"),
            "small_ops": f"roofline ({fitted} factors)",
            "lm_head": _roofline(gemm_keys, f"{fitted} factors"),
            "decode_attention": _roofline(attention_keys, f"{attention}; block term estimated"),
            "prefill_attention": _roofline(attention_keys, attention),
            "all_reduce": self._all_reduce_source(),
            "host_overhead": r.host.source,
        }
        if r.experts is not None:
            sources["linear"] += "; routed experts: expected experts touched (moe_cost.py)"
            sources["moe_dispatch"] = (
                "roofline (estimate: all-gather + reduce-scatter on the all-reduce link"
                + (
                    # moe_cost.ExpertTraffic takes the GPU preset's link, not resolve_link's
                    "; the preset's figures, not the scenario's allreduce_*"
                    if set_in_scenario(r.config, LINK_OVERRIDES)
                    else ""
                )
                + ")"
                if r.experts.layout.data_parallel > 1
                else "none (data_parallel 1)"
            )
        if r.kinds is not None:
            if r.kinds.num_sliding:
                window = f"; sliding layers read at most their window of {r.kinds.window} tokens"
                sources["decode_attention"] += window
                sources["prefill_attention"] += window
            sources["state_layers"] = (
                "roofline (estimate: state read + written once per sequence, gated delta rule "
                "FLOPs; layer_kinds.py)"
                if r.kinds.num_state
                else "none (no state layers)"
            )
        if r.model.mla is not None:
            sources["decode_attention"] += "; MLA absorbed form"
            sources["prefill_attention"] += "; MLA non-absorbed form"
        return sources

    def _all_reduce_source(self) -> str:
        r = self
        if r.tensor_parallel == 1:
            return "none (tensor_parallel 1)"
        given = set_in_scenario(r.config, LINK_OVERRIDES)
        base = r.gpu.interconnect
        label = "fitted" if base.is_fitted else "estimate"
        if len(given) == len(LINK_OVERRIDES):
            return f"roofline (set in the scenario: {', '.join(given)})"
        if given:  # the other figure is still the preset link's
            other = "bandwidth" if given[0] == "allreduce_latency_us" else "latency"
            return f"roofline (set in the scenario: {given[0]}; {other} {label}: {base.name})"
        medians = (
            "; measured medians up to 4 MiB, falling with size where NCCL's measured regimes do"
            if r.link.small_s
            else ""
        )
        nccl = f"roofline ({label}: {r.link.name}{medians})"
        custom = r.link.custom
        if r.runtime is None or custom is None:
            return nccl
        return f"vLLM's custom all-reduce where it runs ({custom.source}); NCCL otherwise: {nccl}"


def _roofline(given: list[str], rest: str) -> str:
    """`roofline (<rest>)`, or with the keys the scenario set named first."""
    if not given:
        return f"roofline ({rest})"
    return f"roofline (set in the scenario: {', '.join(given)}; other {rest})"

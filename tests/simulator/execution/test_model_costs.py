"""Step costs of 2026 models (issue 17): weight dtypes, routed experts, expert parallelism, MLA.

Numbers are worked out by hand here from the catalog's config.json figures."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.simulator.core.catalog import KVDtype, ModelSpec, get_gpu, get_model
from pagesim.simulator.core.config import ExecutionConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.model_spec import WeightDtype
from pagesim.simulator.core.plan import SeqWork, StepPlan
from pagesim.simulator.core.preset_files import shipped_presets
from pagesim.simulator.execution.moe_cost import ExpertLayout, selection_probabilities
from pagesim.simulator.execution.precision import gemm_peak
from pagesim.simulator.execution.profile_file import check_profile
from pagesim.simulator.execution.roofline import RooflineModel
from pagesim.simulator.kv.block_budget import weight_bytes_per_gpu

H200 = get_gpu("h200-sxm")
CONFIG = ExecutionConfig()
GIB = 1024**3
DGX_H100 = shipped_presets().interconnects["dgx-h100"]


def decode_plan(batch: int, context: int) -> StepPlan:
    return StepPlan.build(tuple(SeqWork(i, i, 1, context, False) for i in range(batch)))


# -- weight dtypes ----------------------------------------------------------------------------


def test_gemm_peak_per_dtype_follows_the_datasheets() -> None:
    # H200 (Hopper): FP8 and INT8 at 1,979 dense against 989 for BF16 (datasheet, sparsity / 2).
    assert gemm_peak(H200, WeightDtype.BF16).flops == 989e12
    assert gemm_peak(H200, WeightDtype.FP8).flops == pytest.approx(1979e12, rel=1e-12)
    assert gemm_peak(H200, WeightDtype.FP8).mode == "W8A8 fp8"
    # A100 (Ampere) has no FP8 tensor cores: vLLM runs FP8 weight-only via FP8 Marlin.
    a100 = get_gpu("a100-80gb")
    assert gemm_peak(a100, WeightDtype.FP8).flops == 312e12
    assert gemm_peak(a100, WeightDtype.FP8).mode == "W8A16 (fp8 Marlin)"
    assert gemm_peak(a100, WeightDtype.INT8).flops == pytest.approx(624e12, rel=1e-12)
    # Ada: L40S FP8 733 against 362.05; RTX 4090 FP8 (FP32 accumulate) 330.3 against 165.2;
    # each scaled to the preset's 16-bit figure (362 and 165 TFLOP/s).
    l40s = gemm_peak(get_gpu("l40s"), WeightDtype.FP8).flops
    assert l40s == pytest.approx(362e12 * 733 / 362.05, rel=1e-12)
    rtx = gemm_peak(get_gpu("rtx-4090"), WeightDtype.FP8).flops
    assert rtx == pytest.approx(165e12 * 330.3 / 165.2, rel=1e-12)
    # Hopper has no FP4 tensor cores: 4-bit weights run 16-bit GEMMs.
    for dtype in (WeightDtype.INT4, WeightDtype.MXFP4, WeightDtype.NVFP4):
        assert gemm_peak(H200, dtype).flops == 989e12
        assert gemm_peak(H200, dtype).mode == "W4A16"
    # A replaced 16-bit figure keeps the datasheet ratio; a custom GPU has only its 16-bit one.
    fast = replace(H200, fp16_flops=500e12)
    assert gemm_peak(fast, WeightDtype.FP8).flops == pytest.approx(500e12 * 1979 / 989, rel=1e-12)
    custom = replace(H200, name="my-gpu")
    assert gemm_peak(custom, WeightDtype.FP8).flops == 989e12


def test_fp4_weights_run_w4a4_where_the_tensor_cores_take_the_format() -> None:
    """vLLM v0.34.0: NVFP4 and MXFP4 W4A4 on Blackwell (B200: FP4 9,000 dense against BF16
    2,250, NVIDIA HGX table); MI355X (CDNA 4) runs MXFP4 W4A4 (AITER) but NVFP4 only emulated
    (W4A16 here); MI300X has no FP4: W4A16. Routed experts in MXFP4: Blackwell's FlashInfer
    TRTLLM MXFP4 x MXFP8 (W4A8, the FP8 peak), ROCm's AITER W4A16 first."""
    b200, mi355x, mi300x = get_gpu("b200"), get_gpu("mi355x"), get_gpu("mi300x")
    for dtype in (WeightDtype.NVFP4, WeightDtype.MXFP4):
        peak = gemm_peak(b200, dtype)
        assert peak.flops == pytest.approx(2250e12 * 9000 / 2250, rel=1e-12)
        assert peak.mode == f"W4A4 {dtype.value}"
    assert gemm_peak(b200, WeightDtype.INT4).mode == "W4A16"  # AWQ/GPTQ: Marlin everywhere
    assert gemm_peak(b200, WeightDtype.NVFP4, routed_experts=True).mode == "W4A4 nvfp4"
    experts = gemm_peak(b200, WeightDtype.MXFP4, routed_experts=True)
    assert (experts.mode, experts.flops) == ("W4A8 mxfp4 x mxfp8", pytest.approx(4500e12))
    assert gemm_peak(mi355x, WeightDtype.MXFP4).flops == pytest.approx(10066.3e12, rel=1e-12)
    assert gemm_peak(mi355x, WeightDtype.NVFP4).mode == "W4A16"
    assert gemm_peak(mi355x, WeightDtype.MXFP4, routed_experts=True).mode == "W4A16"
    assert gemm_peak(mi300x, WeightDtype.MXFP4).flops == 1307.4e12
    # B300 gives no verified dense INT8 figure: INT8 weights at the 16-bit peak, said so.
    b300_int8 = gemm_peak(get_gpu("b300"), WeightDtype.INT8)
    assert (b300_int8.flops, b300_int8.mode) == (2250e12, "W8A8 int8, at the 16-bit peak")


def test_fp8_streams_half_the_layer_weights_and_16_bit_prices_as_before() -> None:
    llama = get_model("llama-3.1-70b")
    bf16 = RooflineModel(llama, H200, CONFIG, tensor_parallel=2)
    fp8 = RooflineModel(
        replace(llama, weight_dtype=WeightDtype.FP8), H200, CONFIG, tensor_parallel=2
    )
    fp16 = RooflineModel(
        replace(llama, weight_dtype=WeightDtype.FP16), H200, CONFIG, tensor_parallel=2
    )
    # Layers: 80 x (attention 8192 x (8192 + 2 x 1024) + 8192 x 8192, MLP 3 x 8192 x 28672)
    # parameters, split over 2 GPUs; 2 B each in BF16, 1 B in FP8. The LM head stays 16-bit.
    layer = 8192 * (8192 + 2 * 1024) + 8192 * 8192 + 3 * 8192 * 28672
    assert bf16.linear_weight_bytes == 80 * layer * 2 / 2
    assert fp8.linear_weight_bytes == 80 * layer * 1 / 2
    assert fp8.lm_head_weight_bytes == bf16.lm_head_weight_bytes == 128256 * 8192 * 2 / 2
    assert fp8.linear_flops_per_token == bf16.linear_flops_per_token == 2 * 80 * layer / 2
    for plan in (decode_plan(1, 1000), decode_plan(64, 2000)):
        assert fp16.price(plan) == bf16.price(plan)  # fp16 and bf16: one 16-bit price
        # Memory-bound decode: FP8 saves the layers' half-weights' streaming time.
        assert fp8.price(plan).compute_s < bf16.price(plan).compute_s
        saved = bf16.price(plan).bytes_moved - fp8.price(plan).bytes_moved
        assert saved == 80 * layer * (2 - 1) / 2  # one byte less per weight, over 2 GPUs
    # Compute-bound prefill: FP8's GEMMs at twice the peak.
    prefill = StepPlan.build((SeqWork(0, 0, 8192, 8192, True),))
    assert fp8.breakdown(prefill)["linear"] < 0.6 * bf16.breakdown(prefill)["linear"]


# -- routed experts ---------------------------------------------------------------------------


def test_one_token_reads_exactly_its_k_experts_and_many_read_all() -> None:
    qwen = get_model("qwen3-30b-a3b")  # 48 MoE layers, 128 experts, 8 per token, moe 768
    roof = RooflineModel(qwen, H200, CONFIG)
    experts = roof.experts
    assert experts is not None
    expert = 3 * 2048 * 768 * 2  # gate, up, down of hidden 2048 x 768, BF16
    assert experts.expert_bytes == expert
    assert experts.touched(1) == 8  # 128 (1 - (1 - 8/128)) = 8 exactly
    assert experts.weight_bytes(1) == 48 * 8 * expert
    # Two tokens: 128 (1 - (15/16)^2) = 128 - 112.5 = 15.5 experts.
    assert experts.touched(2) == 15.5
    assert experts.touched(100_000) == 128
    assert experts.weight_bytes(100_000) == 48 * 128 * expert
    # The step's bytes: fixed weights, the touched experts, activations, KV.
    one = roof.price(decode_plan(1, 100))
    assert one.bytes_moved == pytest.approx(
        roof.weight_bytes_per_step
        + 48 * 8 * expert
        + roof.linear_act_bytes_per_token
        + roof.lm_head_act_bytes_per_seq
        + 101 * roof.kv_bytes_per_token,
        rel=1e-12,
    )


def test_shared_experts_and_dense_layers_are_always_read() -> None:
    ds = get_model("deepseek-v3")  # 3 dense layers, 58 MoE layers of 256 experts, 1 shared
    roof = RooflineModel(ds, H200, CONFIG, tensor_parallel=8)
    experts = roof.experts
    assert experts is not None
    assert experts.num_moe_layers == 58
    expert = 3 * 7168 * 2048  # FP8: one byte per weight
    assert experts.expert_bytes == expert
    assert experts.weight_bytes(1) == 58 * 8 * expert / 8  # 8 experts per token, TP 8
    # The shared expert (same shape) and the router are in the fixed weights, every step.
    split = roof.split
    shared = 58 * 3 * 7168 * 2048
    assert split.fixed_weight_bytes > shared / 8


@given(
    num_experts=st.integers(1, 300),
    k=st.integers(1, 16),
    skew=st.floats(0, 3),
    tokens=st.integers(1, 5000),
)
def test_touched_experts_are_bounded_and_skew_never_adds(
    num_experts: int, k: int, skew: float, tokens: int
) -> None:
    k = min(k, num_experts)
    probs = selection_probabilities(num_experts, k, skew)
    assert all(0 <= q <= 1 for q in probs)
    assert sum(probs) == pytest.approx(k, rel=1e-9)
    touched = sum(1 - (1 - q) ** tokens for q in probs)
    uniform = num_experts * (1 - (1 - k / num_experts) ** tokens)
    assert k - 1e-9 <= touched <= min(num_experts, tokens * k) + 1e-9
    assert touched <= uniform + 1e-9  # uniform routing reads the most experts
    more = sum(1 - (1 - q) ** (tokens + 1) for q in probs)
    assert more >= touched - 1e-12


def test_skewed_routing_reads_fewer_experts_but_one_token_still_reads_k() -> None:
    qwen = get_model("qwen3-30b-a3b")
    skewed = RooflineModel(qwen, H200, replace(CONFIG, routing_skew=1.0)).experts
    uniform = RooflineModel(qwen, H200, CONFIG).experts
    assert skewed is not None and uniform is not None
    assert skewed.touched(1) == pytest.approx(8, rel=1e-12)
    assert skewed.touched(64) < uniform.touched(64)
    with pytest.raises(InputError, match="routing_skew"):
        RooflineModel(qwen, H200, replace(CONFIG, routing_skew=-1.0))


@pytest.mark.parametrize("skew", [40.0, 60.0, 100.0])
def test_the_steepest_skews_still_price(skew: float) -> None:
    # At a skew this steep the hottest expert's weight is 1 and the others fall below its
    # rounding: a remainder found by subtraction would be 0 (a division by zero once, inside
    # the scenario's accepted range up to 100). The 7 hottest experts are then chosen by every
    # token and the 8th choice falls mostly on the 8th expert, a little on the 9th and 10th.
    qwen = get_model("qwen3-30b-a3b")
    experts = RooflineModel(qwen, H200, replace(CONFIG, routing_skew=skew)).experts
    assert experts is not None
    assert experts.touched(1) == pytest.approx(8, rel=1e-9)
    assert 8 < experts.touched(4096) < 11


# -- expert parallelism -----------------------------------------------------------------------


def test_dp_attention_with_expert_parallel_moe() -> None:
    ds = get_model("deepseek-v3")
    roof = RooflineModel(ds, H200, CONFIG, data_parallel=8, expert_parallel=True)
    experts = roof.experts
    assert experts is not None
    # One token on this rank meets 8 (one per rank) at the MoE layers: 256 experts over 8 GPUs.
    expert = 3 * 7168 * 2048
    touched = 256 * (1 - (1 - 8 / 256) ** 8)
    assert experts.weight_bytes(1) == pytest.approx(58 * touched * expert / 8, rel=1e-12)
    # Dispatch (all-gather) and combine (reduce-scatter) of 8 ranks' tokens, per MoE layer:
    # 8 T x 7168 x 2 B x 7/8 each way on DGX H100's 8-GPU figures.
    link = DGX_H100.at(8)
    per_call = 8 * 7168 * 2 * 7 / 8 / link.allreduce_bw_bps
    expected = 58 * 2 * (link.allreduce_latency_s + 10 * per_call)
    assert experts.dispatch_s(10) == pytest.approx(expected, rel=1e-12)
    assert roof.breakdown(decode_plan(10, 100))["moe_dispatch"] == pytest.approx(expected)
    # Attention is per rank (TP 1): the rank holds everything but 7/8 of the routed experts.
    routed = 58 * 256 * expert
    per_gpu = weight_bytes_per_gpu(ds, 1, 8)
    assert per_gpu == int((ds.weight_bytes(2, 1) - routed) + routed / 8)


def test_layouts_vllm_would_refuse() -> None:
    qwen, llama = get_model("qwen3-30b-a3b"), get_model("llama-3.1-8b")
    assert ExpertLayout(1, 3, True).problem(qwen) == (
        "expert_parallel",
        "3 GPUs (tensor_parallel x data_parallel) do not divide qwen3-30b-a3b's 128 routed "
        "experts; valid data_parallel with tensor_parallel 1: 1, 2, 4, 8, 16, 32, 64, 128",
    )
    assert ExpertLayout(1, 2, False).problem(qwen) is not None
    assert ExpertLayout(1, 1, True).problem(llama) == (
        "expert_parallel",
        "llama-3.1-8b has no experts (not a mixture of experts)",
    )
    assert ExpertLayout(2, 4, True).problem(qwen) is None


# -- MLA --------------------------------------------------------------------------------------


def test_mla_decode_reads_the_latent_once_and_its_flops_can_bind() -> None:
    ds = get_model("deepseek-v3")
    # The latent: 61 layers x (512 + 64) x 2 B, the same on every TP rank.
    for tp in (1, 8):
        roof = RooflineModel(ds, H200, CONFIG, tensor_parallel=tp)
        assert roof.kv_bytes_per_token == 61 * 576 * 2
        # Absorbed: per pair and head 2 (512 + 64) for QK^T and 2 x 512 for PV.
        assert roof.decode_flops_per_pair == 61 * 2 * (2 * 512 + 64) * 128 / tp
        # Non-absorbed prefill: 2 (192 + 128) per pair and head.
        assert roof.attention_flops_per_pair == 61 * 2 * (192 + 128) * 128 / tp
    f = RooflineModel(ds, H200, CONFIG).factors
    one_gpu = RooflineModel(ds, H200, CONFIG)  # 128 heads on one GPU: compute-bound
    flop_s = 61 * 2 * 1088 * 128 / (989e12 * f.attention_flops_efficiency)
    read_s = 61 * 576 * 2 / (4800e9 * f.attention_bw_efficiency)
    assert flop_s > read_s + one_gpu.block_s_per_context
    plan = decode_plan(4, 1000)
    attention = one_gpu.breakdown(plan)["decode_attention"]
    fixed = one_gpu._attention_call_s + 4 * (one_gpu._attention_seq_s + one_gpu.block_s_per_seq)
    assert attention == pytest.approx(fixed + 4000 * flop_s, rel=1e-12)
    tp8 = RooflineModel(ds, H200, CONFIG, tensor_parallel=8)  # 16 heads per GPU: the read binds
    assert tp8._decode_extra_s == 0.0


def test_mla_prefill_up_projects_its_cached_context() -> None:
    ds = get_model("deepseek-v3")
    roof = RooflineModel(ds, H200, CONFIG, tensor_parallel=8)
    assert roof.upproject_flops_per_cached_token == 61 * 2 * 512 * 16 * (128 + 128)
    fresh = roof.price(StepPlan.build((SeqWork(0, 0, 512, 512, True),)))
    cached = roof.price(StepPlan.build((SeqWork(0, 0, 512, 1536, True),)))
    pairs = 512 * 1024
    extra = pairs * roof.attention_flops_per_pair + 1024 * roof.upproject_flops_per_cached_token
    assert cached.flops - fresh.flops == pytest.approx(extra, rel=1e-12)


# -- the measured-profile path ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "what"),
    [
        (get_model("deepseek-v3"), "routed experts and MLA attention and fp8 weights"),
        (replace(get_model("llama-3.1-8b"), weight_dtype=WeightDtype.FP8), "fp8 weights"),
        (get_model("gemma-3-27b"), "sliding-window or state layers"),
    ],
)
def test_a_profile_refuses_what_it_did_not_measure(model: ModelSpec, what: str) -> None:
    with pytest.raises(InputError) as info:
        check_profile(Path("p.json"), model, 1, KVDtype.FP16)
    assert f"has {what}: use execution.kind" in str(info.value)


def test_sixteen_bit_describes_its_gemm_mode() -> None:
    roof = RooflineModel(get_model("llama-3.1-8b"), get_gpu("a100-80gb"), CONFIG)
    assert roof.describe()["gemm_mode"] == "W16A16"
    fp8 = replace(get_model("llama-3.1-8b"), weight_dtype=WeightDtype.FP8)
    text = RooflineModel(fp8, get_gpu("a100-80gb"), CONFIG).describe()
    assert text["gemm_mode"] == "W8A16 (fp8 Marlin)"
    notes = text["notes"]
    assert isinstance(notes, list)
    assert any("FP8 Marlin" in str(n) for n in notes)


# -- price and breakdown agree for the new kinds ------------------------------------------------

NEW_KINDS = [
    RooflineModel(get_model("deepseek-v3"), H200, CONFIG, tensor_parallel=8),
    RooflineModel(get_model("deepseek-v3"), H200, CONFIG, data_parallel=8, expert_parallel=True),
    RooflineModel(get_model("qwen3-30b-a3b"), H200, replace(CONFIG, routing_skew=0.7)),
    RooflineModel(get_model("gpt-oss-120b"), get_gpu("a100-80gb"), CONFIG, tensor_parallel=2),
    RooflineModel(
        replace(get_model("llama-3.1-8b"), weight_dtype=WeightDtype.FP8), get_gpu("l40s"), CONFIG
    ),
]


@st.composite
def seq_works(draw: st.DrawFn) -> SeqWork:
    if draw(st.booleans()):
        num_new = draw(st.integers(1, 2048))
        return SeqWork(0, 0, num_new, num_new + draw(st.integers(0, 4096)), True)
    return SeqWork(0, 0, 1, draw(st.integers(1, 8192)), False)


@settings(max_examples=100, deadline=None)
@given(
    work=st.lists(seq_works(), min_size=1, max_size=30),
    index=st.integers(0, len(NEW_KINDS) - 1),
)
def test_breakdown_adds_up_to_the_price_for_the_new_kinds(work: list[SeqWork], index: int) -> None:
    roof = NEW_KINDS[index]
    plan = StepPlan.build([w._replace(request_id=i, seq_id=i) for i, w in enumerate(work)])
    parts = roof.breakdown(plan)
    cost = roof.price(plan)
    assert sum(parts.values()) == pytest.approx(cost.compute_s, rel=1e-12)
    assert all(v >= 0 for v in parts.values())
    # One more decoding sequence never makes the step cheaper or lighter, but for its
    # all-reduce: under 4 MiB that follows NCCL's measured medians, which fall with size in
    # places (core/presets/interconnects.toml; e.g. DeepSeek-V3 at TP 8 on H200: 3 -> 4 tokens).
    more = StepPlan.build([*plan.work, SeqWork(len(work), len(work), 1, 100, False)])
    more_s = roof.price(more).compute_s - roof.breakdown(more)["all_reduce"]
    assert more_s >= cost.compute_s - parts["all_reduce"] - 1e-15
    assert roof.price(more).bytes_moved > cost.bytes_moved

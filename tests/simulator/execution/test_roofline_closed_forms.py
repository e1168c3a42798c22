"""Roofline execution model: closed forms computed by hand here from the GPU preset's factors
(core/presets/), the description of its factors, and the settings it refuses."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from pagesim.simulator.core.catalog import KVDtype, get_gpu, get_model
from pagesim.simulator.core.config import ExecutionConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.plan import BlockCopy, SeqWork, StepPlan
from pagesim.simulator.execution.overhead import EngineEra
from pagesim.simulator.execution.roofline import RooflineModel

A100 = get_gpu("a100-80gb")
F = A100.factors  # the A100's fitted factors
LLAMA_7B = get_model("llama-2-7b")
LLAMA_13B = get_model("llama-2-13b")
LLAMA_70B = get_model("llama-2-70b")
CONFIG = ExecutionConfig()  # the GPU's factors; V0 host overhead 1.183 ms + 0.1 ms per sequence
NO_OVERHEAD = replace(CONFIG, step_overhead_s=0.0, step_overhead_s_per_seq=0.0)
A100_BW = 2039e9
A100_PEAK = 312e12
KV_BPS = A100_BW * F.attention_bw_efficiency


def decode_plan(contexts: list[int]) -> StepPlan:
    return StepPlan.build([SeqWork(i, i, 1, c, False) for i, c in enumerate(contexts)])


def prefill_plan(num_tokens: int, context: int | None = None) -> StepPlan:
    return StepPlan.build([SeqWork(0, 0, num_tokens, context or num_tokens, True)])


def test_single_short_decode_is_a_weight_read_plus_fixed_costs() -> None:
    roofline = RooflineModel(LLAMA_7B, A100, CONFIG)
    # Llama-2-7B: 6.74 B params, of which the 32000 x 4096 embedding is looked up, not streamed.
    streamed_bytes = 2 * (6.74e9 - 32000 * 4096)  # ≈ 13.2 GB
    assert roofline.weight_bytes_per_step == pytest.approx(streamed_bytes, rel=0.01)
    # One token: the weights stream at the fitted share of the bandwidth; then the fixed costs of
    # 32 layers (4 GEMMs, the small operators, one attention call) and the V0 host overhead.
    fixed_s = (32 * 4 + 1) * F.gemm_launch_s + 32 * (F.small_ops_layer_s + F.attention_layer_s)
    expected_s = 13.2e9 / (A100_BW * F.weight_bw_efficiency) + fixed_s + 1.2e-3 + 0.1e-3
    cost = roofline.price(decode_plan([1]))
    assert cost.compute_s == pytest.approx(expected_s, rel=0.03)
    assert cost.swap_s == cost.copy_s == 0.0
    assert cost.duration_s == cost.compute_s


def test_decode_is_memory_bound_in_batch() -> None:
    roofline = RooflineModel(LLAMA_7B, A100, CONFIG, era=EngineEra.V1)  # no per-sequence host cost
    one = roofline.decode_time_s(8, 32)
    two = roofline.decode_time_s(16, 32)
    assert one < two < 1.05 * one


def test_decode_attention_reads_context_at_attention_bandwidth() -> None:
    roofline = RooflineModel(LLAMA_7B, A100, CONFIG)
    # 1000 more context tokens: 1000 x 524,288 B more KV read at the attention bandwidth, plus the
    # block term: 1000 / 16 more blocks, each 32 CTAs x (4 B table entry + 64 B estimated run
    # start) in each of 32 layers; linear layers unchanged.
    delta_s = roofline.decode_time_s(1, 2000) - roofline.decode_time_s(1, 1000)
    block_bytes = 1000 / 16 * 32 * 32 * (4 + 64)
    assert delta_s == pytest.approx((1000 * 524_288 + block_bytes) / KV_BPS, rel=1e-9)
    delta_bytes = (
        roofline.price(decode_plan([2000])).bytes_moved
        - roofline.price(decode_plan([1000])).bytes_moved
    )
    assert delta_bytes == pytest.approx(1000 * 524_288, rel=1e-12)
    delta_flops = (
        roofline.price(decode_plan([2000])).flops - roofline.price(decode_plan([1000])).flops
    )
    assert delta_flops == pytest.approx(1000 * 4 * 32 * 128 * 32, rel=1e-12)


def test_smaller_blocks_cost_more_lookups() -> None:
    """The block term: the same context in 1-token blocks reads 16 times the table entries and
    starts 16 times the runs of 16-token blocks (kernels/paged_attention.cu; an estimate)."""
    small, large = (
        RooflineModel(LLAMA_7B, A100, NO_OVERHEAD, block_size=b).decode_time_s(64, 1024)
        for b in (1, 16)
    )
    per_block = 32 * 32 * 68 / KV_BPS  # 32 layers x 32 CTAs x 68 B
    # 16 tokens: 64 x 1024 / 16 blocks + 64 x 15/32 for the partial last ones; 1 token: 64 x 1024.
    expected = per_block * (64 * 1024 - (64 * 1024 / 16 + 64 * 15 / 32))
    assert small - large == pytest.approx(expected, rel=1e-9)
    assert 0 < (small - large) / large < 0.2


def test_long_prefill_is_compute_bound_and_superlinear() -> None:
    roofline = RooflineModel(LLAMA_7B, A100, NO_OVERHEAD)
    n = 4096
    cost = roofline.price(prefill_plan(n))
    linear_flops = 2 * n * (6.74e9 - 2 * 32000 * 4096)  # all but embedding and LM head
    attention_flops = 4 * 32 * 128 * 32 * n * (n + 1) / 2
    lm_head_flops = 2 * 32000 * 4096
    hand_flops = linear_flops + attention_flops + lm_head_flops
    assert cost.flops == pytest.approx(hand_flops, rel=0.01)
    # Compute-bound: linear layers at the fitted GEMM efficiency (plus the overlap share of
    # their weight streaming), attention's causal triangle at its fitted efficiency, plus a cost
    # per new token and per call.
    linear_s = linear_flops / (A100_PEAK * F.gemm_efficiency)
    streaming_s = (roofline.linear_weight_bytes + n * roofline.linear_act_bytes_per_token) / (
        A100_BW * F.weight_bw_efficiency
    )
    attention_s = 32 * (
        4 * 32 * 128 * n * (n + 1) / 2 / (A100_PEAK * F.attention_causal_efficiency)
        + n * 32 * F.attention_token_s  # 32 query heads
        + F.attention_prefill_layer_s
    )
    small_ops_s = roofline.breakdown(prefill_plan(n))["small_ops"]
    expected_s = linear_s + F.gemm_overlap * streaming_s + attention_s + small_ops_s
    assert cost.compute_s == pytest.approx(expected_s, rel=0.01)
    assert cost.bytes_moved / A100_BW < 0.1 * cost.compute_s  # memory is far from the limit
    # The quadratic attention term makes twice the prompt cost more than twice as much.
    assert roofline.prefill_time_s(2 * n) > 2 * roofline.prefill_time_s(n)
    excess_s = roofline.prefill_time_s(2 * n) - 2 * roofline.prefill_time_s(n)
    # (2n)(2n+1)/2 - 2·n(n+1)/2 = n² extra causal pairs, minus what one step saves over two: an
    # LM head, the fixed costs and the overlapped share of one weight stream.
    parts = roofline.breakdown(prefill_plan(n))
    saved_s = (
        parts["lm_head"]
        + 32 * (4 * F.gemm_launch_s + F.small_ops_layer_s + F.attention_prefill_layer_s)
        + F.gemm_overlap * roofline.linear_weight_bytes / (A100_BW * F.weight_bw_efficiency)
    )
    attention_s = 4 * 32 * 128 * 32 * n * n / (A100_PEAK * F.attention_causal_efficiency)
    assert excess_s == pytest.approx(attention_s - saved_s, rel=1e-6)


def test_prefill_chunk_attends_to_earlier_context() -> None:
    roofline = RooflineModel(LLAMA_7B, A100, CONFIG)
    # A 512-token chunk after 1536 cached tokens has 512 x 1536 more (query, key) pairs than the
    # same chunk from scratch.
    chunk = roofline.price(prefill_plan(512, 2048)).flops
    fresh = roofline.price(prefill_plan(512)).flops
    assert chunk - fresh == pytest.approx(4 * 32 * 128 * 32 * 512 * 1536, rel=1e-9)
    assert roofline.prefill_time_s(2048, num_cached=1536) > roofline.prefill_time_s(512)


def test_multi_token_decode_counts_causal_pairs() -> None:
    roofline = RooflineModel(LLAMA_7B, A100, CONFIG)
    # 3 new tokens at context 100 attend 98 + 99 + 100 = 297 keys; a 1-token decode attends 100.
    three = roofline.price(StepPlan.build([SeqWork(0, 0, 3, 100, False)])).flops
    one = roofline.price(StepPlan.build([SeqWork(0, 0, 1, 100, False)])).flops
    linear_and_lm = 2 * 32 * roofline.model.params_per_layer
    assert three - one == pytest.approx(2 * linear_and_lm + 197 * 4 * 32 * 128 * 32, rel=1e-12)


def test_gqa_reads_eight_times_fewer_kv_bytes() -> None:
    mha_70b = replace(LLAMA_70B, name="llama-2-70b-mha", num_kv_heads=64)
    gqa = RooflineModel(LLAMA_70B, A100, CONFIG, tensor_parallel=8)
    mha = RooflineModel(mha_70b, A100, CONFIG, tensor_parallel=8)
    # Per GPU at t = 8: GQA 8/8 = 1 KV head, MHA 64/8 = 8; 2 x 80 layers x heads x 128 x 2 B.
    assert gqa.kv_bytes_per_token == 2 * 80 * 1 * 128 * 2 == 40_960
    assert mha.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2 == 327_680

    def kv_read_bytes(roofline: RooflineModel) -> float:
        return (
            roofline.price(decode_plan([3000])).bytes_moved
            - roofline.price(decode_plan([1000])).bytes_moved
        )

    assert kv_read_bytes(mha) == pytest.approx(8 * kv_read_bytes(gqa), rel=1e-12)
    assert kv_read_bytes(gqa) == pytest.approx(2000 * 40_960, rel=1e-12)


def test_tensor_parallel_halves_linear_time_and_adds_allreduce() -> None:
    one = RooflineModel(LLAMA_13B, A100, NO_OVERHEAD)
    two = RooflineModel(LLAMA_13B, A100, NO_OVERHEAD, tensor_parallel=2)
    # Memory-bound decode: half the weights per GPU, the same fixed costs per layer, and 80
    # all-reduce calls of one 10 KiB hidden state each: the knots on 2 A100s at 8 KiB (46 us)
    # and 11.3 KiB (55 us), interpolated in log size: 46 + 9 x log(10/8) / log(sqrt 2).
    link = A100.interconnect.at(2)
    assert link.small_s[:2] == pytest.approx((46e-6, 55e-6))
    per_call_s = 46e-6 + 9e-6 * math.log(10 / 8) / math.log(math.sqrt(2))
    calls_s = 2 * 40 * per_call_s
    assert two.breakdown(decode_plan([1]))["all_reduce"] == pytest.approx(calls_s, rel=1e-9)
    fixed_s = (40 * 4 + 1) * F.gemm_launch_s + 40 * (F.small_ops_layer_s + F.attention_layer_s)
    assert two.decode_time_s(1, 1) - calls_s - fixed_s == pytest.approx(
        0.5 * (one.decode_time_s(1, 1) - fixed_s), rel=0.05
    )
    # Compute-bound prefill: half the FLOPs per GPU, plus the all-reduce.
    n = 4096
    # 2 all-reduces per layer x 40 layers, each latency + 2(t-1)/t = 1 x 4096 x 5120 x 2 B / bw
    # (40 MiB: above the measured knots, the fitted curve).
    allreduce_s = 2 * 40 * (link.allreduce_latency_s + n * 5120 * 2 / link.allreduce_bw_bps)
    plan = prefill_plan(n)
    assert two.breakdown(plan)["all_reduce"] == pytest.approx(allreduce_s, rel=1e-9)
    # The sharded work halves: GEMMs and attention (the norms, replicated on every GPU, do not).
    for term in ("linear", "prefill_attention"):
        ratio = two.breakdown(plan)[term] / one.breakdown(plan)[term]
        assert ratio == pytest.approx(0.5, abs=0.02), term
    assert one.price(plan).flops == pytest.approx(2 * two.price(plan).flops, rel=1e-12)


def test_block_bytes_llama_13b() -> None:
    roofline = RooflineModel(LLAMA_13B, A100, CONFIG, block_size=16)
    assert roofline.block_bytes == 13_107_200
    fp8 = RooflineModel(LLAMA_13B, A100, CONFIG, kv_dtype=KVDtype.FP8, block_size=32)
    assert fp8.block_bytes == 13_107_200


def test_swap_only_plan_costs_swap_time_exactly() -> None:
    roofline = RooflineModel(LLAMA_13B, A100, CONFIG)
    plan = StepPlan.build([], num_swap_out_blocks=5, num_swap_in_blocks=3)
    cost = roofline.price(plan)
    # Llama-2-13B: 40 layers, so 80 copies per block at 3 us each beside the bytes.
    assert cost.swap_s == pytest.approx(8 * (13_107_200 / 25e9 + 80 * 3e-6))
    assert cost.compute_s == cost.copy_s == cost.flops == cost.bytes_moved == 0.0
    assert cost.duration_s == cost.swap_s


def test_swap_adds_to_compute() -> None:
    roofline = RooflineModel(LLAMA_13B, A100, CONFIG)
    work = [SeqWork(0, 0, 1, 100, False)]
    plain = roofline.price(StepPlan.build(work))
    swapping = roofline.price(StepPlan.build(work, num_swap_in_blocks=2))
    assert swapping.compute_s == plain.compute_s
    assert swapping.swap_s == pytest.approx(2 * (13_107_200 / 25e9 + 80 * 3e-6))
    assert swapping.duration_s == pytest.approx(plain.duration_s + swapping.swap_s)


def test_copy_on_write_reads_and_writes_each_block() -> None:
    roofline = RooflineModel(LLAMA_13B, A100, CONFIG)
    work = [SeqWork(0, 0, 1, 100, False)]
    plain = roofline.price(StepPlan.build(work))
    copies = [BlockCopy(1, 2), BlockCopy(3, 4)]
    cost = roofline.price(StepPlan.build(work, copies=copies))
    assert cost.copy_s == pytest.approx(2 * 2 * 13_107_200 / KV_BPS, rel=1e-12)
    assert cost.bytes_moved - plain.bytes_moved == pytest.approx(2 * 2 * 13_107_200)
    assert cost.compute_s == plain.compute_s


def test_empty_plan_costs_nothing() -> None:
    cost = RooflineModel(LLAMA_7B, A100, CONFIG).price(StepPlan.build([]))
    assert cost == (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    assert cost.duration_s == 0.0


def test_describe_names_every_factor_and_its_source() -> None:
    config = ExecutionConfig(gemm_efficiency=0.6, step_overhead_s=0.002)
    info = RooflineModel(LLAMA_70B, A100, config, tensor_parallel=4).describe()
    assert info["kind"] == "roofline"
    assert info["model"] == "llama-2-70b"
    assert info["gpu"] == "a100-80gb"
    assert info["tensor_parallel"] == 4
    assert info["gemm_efficiency"] == 0.6
    assert info["attention_bw_efficiency"] == F.attention_bw_efficiency
    assert info["weight_bw_efficiency"] == F.weight_bw_efficiency
    assert info["host_overhead_s"] == 0.002 and info["host_overhead_s_per_seq"] == 0.1e-3
    assert "set in the scenario: gemm_efficiency" in str(info["factors_source"])
    assert info["peak_flops"] == A100_PEAK
    assert info["mem_bandwidth_bps"] == A100_BW
    assert info["allreduce_bw_bps"] == A100.interconnect.at(4).allreduce_bw_bps
    assert info["block_bytes"] == 16 * 2 * 80 * 2 * 128 * 2
    assert info["factors_extrapolated"] is False and info["notes"] == []
    sources = info["sources"]
    assert isinstance(sources, dict)
    assert sources["linear"] == (
        "roofline (set in the scenario: gemm_efficiency; other fitted factors)"
    )
    assert info["set_in_scenario"] == ["gemm_efficiency"]
    l4 = RooflineModel(LLAMA_7B, get_gpu("l4"), CONFIG, tensor_parallel=2).describe()
    assert l4["factors_extrapolated"] is True
    notes = str(l4["notes"])
    assert "extrapolated" in notes and "estimate" in notes


@pytest.mark.parametrize(
    ("config", "tensor_parallel", "block_size", "words"),
    [
        (ExecutionConfig(gemm_efficiency=0.0), 1, 16, "gemm_efficiency"),
        (ExecutionConfig(weight_bw_efficiency=1.5), 1, 16, "weight_bw_efficiency"),
        (ExecutionConfig(step_overhead_s=-1.0), 1, 16, "step_overhead_s"),
        (ExecutionConfig(allreduce_bw_gbps=0.0), 2, 16, "allreduce_bw_gbps"),
        (ExecutionConfig(), 0, 16, "tensor_parallel"),
        (ExecutionConfig(), 1, 0, "block_size"),
    ],
)
def test_bad_settings_are_refused_with_a_message(
    config: ExecutionConfig, tensor_parallel: int, block_size: int, words: str
) -> None:
    with pytest.raises(InputError, match=words):
        RooflineModel(
            LLAMA_7B, A100, config, tensor_parallel=tensor_parallel, block_size=block_size
        )

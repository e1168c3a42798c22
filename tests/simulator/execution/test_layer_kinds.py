"""Sliding-window and state layers in the step cost (execution/layer_kinds.py): numbers worked
out by hand from the catalog's config.json figures and the H200's factors."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.simulator.core.catalog import get_gpu, get_model
from pagesim.simulator.core.config import ExecutionConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.model_spec import LayerKind
from pagesim.simulator.core.plan import SeqWork, StepPlan
from pagesim.simulator.execution.layer_kinds import window_keys
from pagesim.simulator.execution.roofline import RooflineModel

H200 = get_gpu("h200-sxm")
CONFIG = ExecutionConfig()
KV_BPS = 4.8e12 * H200.factors.attention_bw_efficiency
GEMMA = get_model("gemma-3-27b")  # 10 full + 52 sliding layers, W = 1024, 16 KV heads of 128
GEMMA_ALL_FULL = replace(GEMMA, layer_kinds=(), sliding_window=None)
QWEN_NEXT = get_model("qwen3-next-80b-a3b")  # 12 full + 36 gated-DeltaNet layers


def decode(context: int) -> StepPlan:
    return StepPlan.build([SeqWork(0, 0, 1, context, False)])


def test_window_keys_is_the_sum_of_min_k_w() -> None:
    for w in (1, 4, 7):
        for m in range(0, 20):
            assert window_keys(m, w) == sum(min(k, w) for k in range(1, m + 1))


def test_gemma_decode_below_the_window_costs_what_all_full_layers_cost() -> None:
    # At context 512 < W = 1024 every layer reads all 512 tokens: the same step either way.
    hybrid = RooflineModel(GEMMA, H200, CONFIG)
    full = RooflineModel(GEMMA_ALL_FULL, H200, CONFIG)
    assert full.kinds is None and hybrid.kinds is not None
    a, b = hybrid.price(decode(512)), full.price(decode(512))
    assert a.compute_s == pytest.approx(b.compute_s, rel=1e-12)
    assert a.bytes_moved == b.bytes_moved
    assert a.flops == pytest.approx(b.flops, rel=1e-12)


def test_gemma_decode_beyond_the_window_reads_only_the_window_in_sliding_layers() -> None:
    hybrid = RooflineModel(GEMMA, H200, CONFIG)
    full = RooflineModel(GEMMA_ALL_FULL, H200, CONFIG)
    # Context 4096: full layers read 10 x 4096, sliding ones 52 x 1024 = 94,208 layer-tokens
    # against 62 x 4096 = 253,952: 159,744 fewer. One layer-token of KV is 2 x 16 heads x 128 x
    # 2 B = 8,192 B; the block term adds 16 CTAs (16 KV heads, 2 query heads each) x (4 + 64) B
    # per 16-token block = 68 B per layer-token, both at the attention bandwidth.
    fewer = 62 * 4096 - (10 * 4096 + 52 * 1024)
    assert fewer == 159_744
    a, b = hybrid.price(decode(4096)), full.price(decode(4096))
    assert b.bytes_moved - a.bytes_moved == fewer * 8192
    assert b.compute_s - a.compute_s == pytest.approx(fewer * (8192 + 68) / KV_BPS, rel=1e-9)
    # FLOPs: 4 x 32 heads x 128 = 16,384 per layer pair, 159,744 fewer pairs.
    assert b.flops - a.flops == pytest.approx(fewer * 16_384, rel=1e-9)


def test_gemma_prefill_pairs_are_bounded_by_the_window() -> None:
    hybrid = RooflineModel(GEMMA, H200, CONFIG)
    assert hybrid.kinds is not None
    # A 2048-token prompt: a full layer's pairs 2048 x 2049 / 2 = 2,098,176; a sliding layer's
    # queries 1..1024 attend 1..1024 keys (524,800 pairs), the next 1024 attend 1024 each.
    cached, causal = hybrid.kinds.prefill_pairs(2048, 2048)
    assert cached == 0
    assert causal == 10 * 2_098_176 + 52 * (524_800 + 1024 * 1024)
    # A chunk of 512 after 3584 cached tokens: each of its 512 queries sees 1024 keys in a
    # sliding layer, 512 x 513 / 2 = 131,328 of them in its own triangle, the rest cached.
    cached, causal = hybrid.kinds.prefill_pairs(512, 4096)
    assert causal == 10 * 131_328 + 52 * 131_328
    assert cached == 10 * 512 * 3584 + 52 * (512 * 1024 - 131_328)


def test_qwen3_next_decode_reads_full_layers_and_the_state() -> None:
    roof = RooflineModel(QWEN_NEXT, H200, CONFIG, block_size=544)
    kinds = roof.kinds
    assert kinds is not None and (kinds.num_full, kinds.num_state) == (12, 36)
    # A state layer keeps (4 - 1) x (2 x 16 x 128 + 32 x 128) = 24,576 conv elements and
    # 32 x 128 x 128 = 524,288 recurrent ones: 548,864 x 2 B = 1,097,728 B; 36 layers hold
    # 39,518,208 B per sequence, read and written once per step.
    assert kinds.state_bytes_per_seq == 36 * 1_097_728 == 39_518_208
    # Its FLOPs per token: 36 layers x 32 value heads x 6 x 128 x 128 = 113,246,208.
    assert kinds.state_flops_per_token == 113_246_208
    parts = roof.breakdown(decode(1000))
    assert parts["state_layers"] == pytest.approx(2 * 39_518_208 / KV_BPS, rel=1e-12)
    # Decode attention: 12 full layers x 1000 tokens x (2 x 2 heads x 256 x 2 B = 2,048 B + the
    # block term: 2 CTAs x 68 B per 544-token block = 0.25 B) + per layer the last block's
    # expected part 136 x 543 / 1088 B; no state layer reads KV.
    f = H200.factors
    expected = (
        48 * f.attention_layer_s
        + 48 * f.attention_seq_s
        + 12 * 1000 * (2048 + 0.25) / KV_BPS
        + 12 * 136 * 543 / 1088 / KV_BPS
    )
    assert parts["decode_attention"] == pytest.approx(expected, rel=1e-12)
    # A long prefill's state kernels are bound by their FLOPs instead.
    prefill = roof.breakdown(StepPlan.build([SeqWork(0, 0, 8192, 8192, True)]))
    peak = 989e12 * f.attention_flops_efficiency
    assert prefill["state_layers"] == pytest.approx(8192 * 113_246_208 / peak, rel=1e-12)


def test_mla_with_window_layers_is_refused() -> None:
    hybrid_mla = replace(get_model("deepseek-v3"), layer_kinds=(LayerKind.SLIDING,) * 61)
    with pytest.raises(InputError, match="mixes MLA"):
        RooflineModel(replace(hybrid_mla, sliding_window=128), H200, CONFIG)


def test_all_full_layer_kinds_take_the_plain_path() -> None:
    spelled = replace(GEMMA_ALL_FULL, layer_kinds=(LayerKind.FULL,) * 62)
    assert RooflineModel(spelled, H200, CONFIG).kinds is None


# -- properties ---------------------------------------------------------------------------------

HYBRIDS = [
    RooflineModel(GEMMA, H200, CONFIG),
    RooflineModel(QWEN_NEXT, H200, CONFIG, block_size=544),
    RooflineModel(get_model("gpt-oss-120b"), H200, CONFIG, tensor_parallel=2),
    RooflineModel(replace(GEMMA, sliding_window=7), H200, CONFIG, tensor_parallel=4),
]


@st.composite
def seq_works(draw: st.DrawFn) -> SeqWork:
    if draw(st.booleans()):
        num_new = draw(st.integers(1, 4096))
        return SeqWork(0, 0, num_new, num_new + draw(st.integers(0, 4096)), True)
    num_new = draw(st.sampled_from([1, 1, 1, 3]))  # a speculative verification now and then
    return SeqWork(0, 0, num_new, num_new + draw(st.integers(0, 8192)), False)


@settings(max_examples=150, deadline=None)
@given(
    work=st.lists(seq_works(), max_size=30),
    extra=seq_works(),
    index=st.integers(0, len(HYBRIDS) - 1),
)
def test_more_work_never_costs_less_for_hybrid_models_but_for_the_measured_all_reduce(
    work: list[SeqWork], extra: SeqWork, index: int
) -> None:
    """Every term but the all-reduce grows with the work; the all-reduce (TP 2 and 4 here, on
    the H200's NVLink) is the measured NCCL medians up to 4 MiB, which fall with size where
    NCCL's measured regimes do (test_allreduce.py), so it is left out of the comparison."""
    roof = HYBRIDS[index]
    before = roof.price(StepPlan.build(work))
    after = roof.price(StepPlan.build([*work, extra]))

    def all_reduce_s(plan_work: list[SeqWork]) -> float:
        return roof.allreduce_step_s(sum(w.num_new_tokens for w in plan_work))

    assert after.compute_s - all_reduce_s([*work, extra]) > before.compute_s - all_reduce_s(work)
    assert after.flops > before.flops
    assert after.bytes_moved > before.bytes_moved
    parts = roof.breakdown(StepPlan.build([*work, extra]))
    assert sum(parts.values()) == pytest.approx(after.compute_s, rel=1e-12)
    assert all(v >= 0 for v in parts.values())


@settings(max_examples=100, deadline=None)
@given(num_new=st.integers(1, 64), context=st.integers(1, 5000), index=st.integers(0, 3))
def test_a_longer_context_never_costs_less_and_window_layers_stop_growing(
    num_new: int, context: int, index: int
) -> None:
    roof = HYBRIDS[index]
    kinds = roof.kinds
    assert kinds is not None
    context = max(context, num_new)
    for is_prefill in (True, False):
        short = roof.price(StepPlan.build([SeqWork(0, 0, num_new, context, is_prefill)]))
        longer = roof.price(StepPlan.build([SeqWork(0, 0, num_new, context + 1, is_prefill)]))
        assert longer.compute_s >= short.compute_s
        assert longer.bytes_moved >= short.bytes_moved
    # A sliding layer never reads more than its window plus the step's new tokens.
    per_layer = kinds.keys_read(num_new, context) - kinds.num_full * context
    assert per_layer <= kinds.num_sliding * (kinds.window + num_new - 1)


# -- the execution model's block size is the capacity's -----------------------------------------


def test_execution_model_prices_the_capacity_blocks() -> None:
    from pagesim.simulator.execution.factory import make_execution_model
    from pagesim.simulator.kv.block_budget import kv_capacity
    from pagesim.simulator.scenario.files import resolve_scenario
    from pagesim.simulator.scenario.load import load_scenario

    base = load_scenario(resolve_scenario("moe_decode"))
    # Qwen3-Next at TP 2: vLLM raises the attention block to 16 x cdiv(548,864 B of state per
    # layer, 16 x 1,024 B per token per layer) = 16 x 34 = 544 tokens (kv/hybrid_layout.py).
    scenario = replace(base, model=QWEN_NEXT, tensor_parallel=2)  # 148 GiB of weights
    system = scenario.systems[0]
    assert system.block_size == 16
    capacity = kv_capacity(scenario, system)
    roof = make_execution_model(scenario, system)
    assert isinstance(roof, RooflineModel)
    assert capacity.block_size == roof.block_size == 544
    # A model of full layers keeps the system's block size.
    plain = make_execution_model(base, base.systems[0])
    assert isinstance(plain, RooflineModel) and plain.block_size == 16

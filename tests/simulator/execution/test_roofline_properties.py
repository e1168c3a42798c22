"""Roofline execution model: properties over random steps: more work never costs less, the
datasheet is never exceeded, and the terms add up."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.simulator.core.catalog import KVDtype, get_gpu, get_model
from pagesim.simulator.core.config import ExecutionConfig
from pagesim.simulator.core.plan import SeqWork, StepPlan
from pagesim.simulator.execution.cuda_graphs import cuda_graphs_for
from pagesim.simulator.execution.overhead import EngineEra
from pagesim.simulator.execution.roofline import RooflineModel
from pagesim.simulator.execution.roofline_terms import allreduce_call_s
from pagesim.simulator.execution.vllm_runtime import VllmRuntime

A100 = get_gpu("a100-80gb")
LLAMA_7B = get_model("llama-2-7b")
LLAMA_70B = get_model("llama-2-70b")
CONFIG = ExecutionConfig()  # the GPU's factors


@st.composite
def seq_works(draw: st.DrawFn) -> SeqWork:
    if draw(st.booleans()):
        num_new = draw(st.integers(1, 4096))
        context = num_new + draw(st.integers(0, 4096))
        return SeqWork(0, 0, num_new, context, True)
    return SeqWork(0, 0, 1, draw(st.integers(1, 8192)), False)


MODELS = [
    RooflineModel(LLAMA_7B, A100, CONFIG),
    RooflineModel(LLAMA_70B, get_gpu("h100-sxm"), CONFIG, tensor_parallel=8),
    RooflineModel(get_model("opt-13b"), get_gpu("l4"), CONFIG, kv_dtype=KVDtype.FP8),
    # Hybrid layer kinds (execution/layer_kinds.py): sliding-window layers, state layers.
    RooflineModel(get_model("gemma-3-27b"), get_gpu("h200-sxm"), CONFIG),
    RooflineModel(get_model("qwen3-next-80b-a3b"), get_gpu("h200-sxm"), CONFIG, block_size=544),
]


@settings(max_examples=150, deadline=None)
@given(
    work=st.lists(seq_works(), max_size=40),
    extra=seq_works(),
    model_index=st.integers(0, len(MODELS) - 1),
    num_swap_blocks=st.integers(0, 8),
)
def test_more_work_never_costs_less_but_for_the_measured_all_reduce(
    work: list[SeqWork], extra: SeqWork, model_index: int, num_swap_blocks: int
) -> None:
    """Every term but the all-reduce grows with the work. The all-reduce is the measured NCCL
    medians up to 4 MiB, which fall with size where NCCL's measured regimes do (core/
    presets/interconnects.toml; test_allreduce.py): a step with more tokens may all-reduce
    faster, so it is held to its formula, two calls per layer of the step's hidden states,
    instead."""
    roofline = MODELS[model_index]
    plan_before = StepPlan.build(work, num_swap_in_blocks=num_swap_blocks)
    plan_after = StepPlan.build([*work, extra], num_swap_in_blocks=num_swap_blocks)
    before, after = roofline.price(plan_before), roofline.price(plan_after)

    def all_reduce_s(plan: StepPlan) -> float:
        tokens = plan.num_prefill_tokens + plan.num_decode_tokens
        if roofline.tensor_parallel == 1 or not tokens:
            return 0.0
        message = tokens * roofline.model.hidden_size * 2  # 16-bit hidden state per token
        calls = 2 * roofline.model.num_layers
        link = roofline.link
        assert roofline.allreduce_step_s(tokens) == pytest.approx(
            calls * allreduce_call_s(message, roofline.tensor_parallel, link), rel=1e-12
        )
        return roofline.allreduce_step_s(tokens)

    assert after.compute_s - all_reduce_s(plan_after) > before.compute_s - all_reduce_s(plan_before)
    assert after.flops > before.flops
    assert after.bytes_moved > before.bytes_moved
    assert after.swap_s == before.swap_s


# The TP 8 model of MODELS with its link's formula set by the scenario (no measured table): the
# fitted curve of 8 H100s above 4 MiB, 37.39 us + ring bytes / 377.8 GB/s (interconnects.toml).
FORMULA_LINK = RooflineModel(
    LLAMA_70B,
    get_gpu("h100-sxm"),
    replace(CONFIG, allreduce_latency_us=37.39, allreduce_bw_gbps=377.8),
    tensor_parallel=8,
)


@settings(max_examples=150, deadline=None)
@given(work=st.lists(seq_works(), max_size=40), extra=seq_works())
def test_on_a_link_priced_by_its_formula_more_work_never_costs_less(
    work: list[SeqWork], extra: SeqWork
) -> None:
    """Where the all-reduce is latency + ring bytes / bandwidth (no measured table), the whole
    step is non-decreasing in the work, the all-reduce included."""
    assert FORMULA_LINK.link.small_s == ()
    before = FORMULA_LINK.price(StepPlan.build(work))
    after = FORMULA_LINK.price(StepPlan.build([*work, extra]))
    assert after.compute_s > before.compute_s


@settings(max_examples=150, deadline=None)
@given(
    work=st.lists(seq_works(), min_size=1, max_size=40), model_index=st.integers(0, len(MODELS) - 1)
)
def test_utilizations_never_exceed_the_datasheet(work: list[SeqWork], model_index: int) -> None:
    roofline = MODELS[model_index]
    cost = roofline.price(StepPlan.build(work))
    gpu = roofline.gpu
    assert cost.flops / (gpu.fp16_flops * cost.duration_s) <= 1.0
    assert cost.bytes_moved / (gpu.mem_bandwidth_bps * cost.duration_s) <= 1.0


@settings(max_examples=100, deadline=None)
@given(
    work=st.lists(seq_works(), min_size=1, max_size=40),
    roofline=st.sampled_from([m for m in MODELS if m.experts is None]),  # experts: per step
)
def test_flops_add_up_over_sequences_and_weights_are_read_once(
    work: list[SeqWork], roofline: RooflineModel
) -> None:
    whole = roofline.price(StepPlan.build(work))
    parts = [roofline.price(StepPlan.build([item])) for item in work]
    assert whole.flops == pytest.approx(sum(p.flops for p in parts), rel=1e-9)
    weights = roofline.weight_bytes_per_step
    assert whole.bytes_moved == pytest.approx(
        sum(p.bytes_moved for p in parts) - (len(work) - 1) * weights, rel=1e-9
    )
    assert whole.compute_s <= sum(p.compute_s for p in parts)
    shuffled = roofline.price(StepPlan.build(list(reversed(work))))
    assert shuffled.flops == whole.flops
    assert shuffled.compute_s == pytest.approx(whole.compute_s, rel=1e-12)


ERAS = [
    RooflineModel(LLAMA_70B, A100, CONFIG, tensor_parallel=2, era=EngineEra.V0),
    RooflineModel(
        LLAMA_70B, A100, replace(CONFIG, async_scheduling=True), tensor_parallel=2, era=EngineEra.V1
    ),
    RooflineModel(LLAMA_7B, get_gpu("rtx-4090"), CONFIG, tensor_parallel=4, block_size=8),
]


@settings(max_examples=150, deadline=None)
@given(work=st.lists(seq_works(), min_size=1, max_size=40), model_index=st.integers(0, 2))
def test_breakdown_adds_up_to_the_price(work: list[SeqWork], model_index: int) -> None:
    """`price` adds its terms inline for speed; `breakdown` names them: the two agree."""
    roofline = ERAS[model_index]
    plan = StepPlan.build(work)
    parts = roofline.breakdown(plan)
    assert sum(parts.values()) == pytest.approx(roofline.price(plan).compute_s, rel=1e-12)
    assert all(v >= 0 for v in parts.values())


def _vllm(era: EngineEra, **config: bool) -> RooflineModel:
    """Llama-3-70B at TP 4 on H100 as vLLM of `era` runs it (vllm_runtime.py)."""
    h100 = get_gpu("h100-sxm")
    return RooflineModel(
        get_model("llama-3-70b"),
        h100,
        replace(CONFIG, **config),
        tensor_parallel=4,
        era=era,
        runtime=VllmRuntime(era, cuda_graphs_for(era, 256, 8192), h100.name),
    )


AS_VLLM = [_vllm(EngineEra.V0), _vllm(EngineEra.V1), _vllm(EngineEra.V1, async_scheduling=True)]


@settings(max_examples=150, deadline=None)
@given(
    work=st.lists(seq_works(), max_size=30),
    extra=seq_works(),
    index=st.integers(0, len(AS_VLLM) - 1),
)
def test_as_vllm_runs_it_more_work_never_costs_less_but_for_the_all_reduce(
    work: list[SeqWork], extra: SeqWork, index: int
) -> None:
    """A step priced at a CUDA graph's padded size (cuda_graphs.py) never costs less for more
    work: the padded size never shrinks, and attention grows with every sequence. The all-reduce
    is exempt: vLLM switches kernels with the message size (allreduce.py), and NCCL's measured
    medians fall in places."""
    roof = AS_VLLM[index]
    before, after = StepPlan.build(work), StepPlan.build([*work, extra])

    def without_allreduce(plan: StepPlan) -> float:
        return roof.price(plan).compute_s - roof.breakdown(plan).get("all_reduce", 0.0)

    assert without_allreduce(after) >= without_allreduce(before)
    assert roof.price(after).flops > roof.price(before).flops

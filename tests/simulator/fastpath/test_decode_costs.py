"""`price_steps` (fastpath/decode_costs.py) times pure decode steps as `price` does, and with
`step_work`'s FLOPs and bytes (`step_cost`) prices them as `price` does, to the last bit, for
every kind of model it takes, back to back up to its limit; `step_work` gives a NumPy array of
contexts the same values one by one; and `decode_terms` refuses the models it does not take."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.simulator.core.catalog import KVDtype, WeightDtype, get_gpu, get_model
from pagesim.simulator.core.config import ExecutionConfig
from pagesim.simulator.core.plan import SeqWork, StepCost, StepPlan
from pagesim.simulator.execution.cuda_graphs import cuda_graphs_for
from pagesim.simulator.execution.overhead import EngineEra
from pagesim.simulator.execution.roofline import RooflineModel
from pagesim.simulator.execution.vllm_runtime import VllmRuntime
from pagesim.simulator.fastpath.decode_costs import (
    decode_terms,
    price_steps,
    step_cost,
    step_work,
)

CONFIG = ExecutionConfig()
H200 = get_gpu("h200-sxm")
A100 = get_gpu("a100-80gb")

MODELS = {
    # dense 16-bit, GEMM by GEMM; V0's host time added, V1's overlapped
    "llama-2-7b v0": RooflineModel(get_model("llama-2-7b"), A100, CONFIG),
    "llama-2-7b v1": RooflineModel(get_model("llama-2-7b"), A100, CONFIG, era=EngineEra.V1),
    # the all-reduce of tensor parallelism (measured medians on the A100's link)
    "llama-2-70b tp2": RooflineModel(
        get_model("llama-2-70b"), A100, CONFIG, tensor_parallel=2, era=EngineEra.V1
    ),
    # as vLLM runs them (vllm_runtime.py): a V0 CUDA graph's padded batch and its custom
    # all-reduce; V1's graphs by tokens, on Hopper
    "llama-2-70b tp4 vllm v0": RooflineModel(
        get_model("llama-2-70b"),
        A100,
        CONFIG,
        tensor_parallel=4,
        runtime=VllmRuntime(EngineEra.V0, cuda_graphs_for(EngineEra.V0, 256, 4096), "a100-80gb"),
    ),
    "llama-2-70b tp8 vllm v1": RooflineModel(
        get_model("llama-2-70b"),
        H200,
        CONFIG,
        tensor_parallel=8,
        era=EngineEra.V1,
        runtime=VllmRuntime(EngineEra.V1, cuda_graphs_for(EngineEra.V1, 64, 8192), "h200-sxm"),
    ),
    # FP8 weights: the lumped GEMM; FP8 KV
    "llama-3.1-70b fp8": RooflineModel(
        replace(get_model("llama-3.1-70b"), weight_dtype=WeightDtype.FP8),
        H200,
        CONFIG,
        KVDtype.FP8,
        tensor_parallel=2,
        block_size=32,
        era=EngineEra.V1,
    ),
}


def decode_costs(
    model: RooflineModel, num_seqs: int, first_context: int, num_steps: int
) -> list[StepCost]:
    """A run's `num_steps` steps from `first_context` tokens (each `num_seqs` more) priced
    ahead, with no limit, its FLOPs and bytes one by one (`step_cost`) and all at once
    (`step_work` of an array, as run_rows.py takes them)."""
    ends: list[float] = []
    durations: list[float] = []
    terms = decode_terms(model, num_seqs)
    priced = price_steps(terms, first_context, num_steps, 0.0, float("inf"), ends, durations)
    assert priced == num_steps
    contexts = [first_context + i * num_seqs for i in range(num_steps)]
    costs = [step_cost(terms, c, d) for c, d in zip(contexts, durations, strict=True)]
    flops, bytes_moved = step_work(terms, np.array(contexts, dtype=np.int64))
    assert flops.tolist() == [cost.flops for cost in costs]
    assert bytes_moved.tolist() == [cost.bytes_moved for cost in costs]
    return costs


def _plan(contexts: list[int]) -> StepPlan:
    return StepPlan.build([SeqWork(i, i, 1, c, False) for i, c in enumerate(contexts)])


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(MODELS)),
    contexts=st.lists(st.integers(1, 40_000), min_size=1, max_size=300),
    growth=st.integers(1, 5),
)
def test_a_run_of_pure_decode_steps_is_priced_as_price_prices_each(
    name: str, contexts: list[int], growth: int
) -> None:
    model = MODELS[name]
    # A run: the same sequences, each one token longer a step.
    runs = [[c + step for c in contexts] for step in range(growth)]
    ahead = decode_costs(model, len(contexts), sum(contexts), growth)
    assert ahead == [model.price(_plan(r)) for r in runs]  # every field, exactly


@settings(max_examples=40, deadline=None)
@given(
    start=st.floats(0.0, 1e4),
    span=st.floats(0.0, 2.0),
    first_context=st.integers(4, 40_000),
    num_steps=st.integers(1, 50),
)
def test_steps_are_priced_back_to_back_until_one_would_end_past_the_limit(
    start: float, span: float, first_context: int, num_steps: int
) -> None:
    model = MODELS["llama-2-70b tp2"]
    ends: list[float] = [-1.0]  # appended to, never read
    durations: list[float] = []
    limit = start + span
    terms = decode_terms(model, 4)
    num = price_steps(terms, first_context, num_steps, start, limit, ends, durations)
    assert len(durations) == num and len(ends) == num + 1
    starts = [start, *ends[1:-1]]  # back to back
    for i in range(num):
        assert ends[i + 1] == starts[i] + durations[i] <= limit  # as a timeout lands
    if num < num_steps:  # the next step would have ended past the limit
        (cost,) = decode_costs(model, 4, first_context + num * 4, 1)
        assert (ends[-1] if num else start) + cost.duration_s > limit


def test_mla_is_priced_as_price_prices_it() -> None:
    # DeepSeek-V3's attention with its MoE layers made dense (the catalog's MLA models are all
    # mixtures of experts, which are never priced ahead): the absorbed decode's extra terms.
    deepseek = get_model("deepseek-v3")
    assert deepseek.mla is not None
    dense = RooflineModel(
        replace(deepseek, moe=None), H200, CONFIG, tensor_parallel=8, era=EngineEra.V1
    )
    assert dense.prices_statelessly
    runs = [[1000 + s, 2000 + s, 3000 + s, 4000 + s] for s in range(3)]
    ahead = decode_costs(dense, 4, sum(runs[0]), len(runs))
    assert ahead == [dense.price(_plan(r)) for r in runs]


def test_a_dense_model_prices_statelessly_and_a_mixture_of_experts_does_not() -> None:
    assert MODELS["llama-2-70b tp2"].prices_statelessly
    moe = RooflineModel(get_model("qwen3-30b-a3b"), H200, CONFIG, era=EngineEra.V1)
    assert not moe.prices_statelessly  # it tallies the experts each priced step touches
    with pytest.raises(ValueError, match="priced ahead"):
        decode_terms(moe, 8)

"""`decode_costs` (execution/decode_costs.py) is `price` of the same pure decode
steps, to the last bit, for every kind of model it takes; and it refuses the ones it does not."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.simulator.core.catalog import KVDtype, WeightDtype, get_gpu, get_model
from pagesim.simulator.core.config import ExecutionConfig
from pagesim.simulator.core.plan import SeqWork, StepPlan
from pagesim.simulator.execution.decode_costs import decode_costs
from pagesim.simulator.execution.overhead import EngineEra
from pagesim.simulator.execution.roofline import RooflineModel

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
    ahead = list(decode_costs(model, len(contexts), [sum(r) for r in runs]))
    assert ahead == [model.price(_plan(r)) for r in runs]  # every field, exactly


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
    ahead = list(decode_costs(dense, 4, [sum(r) for r in runs]))
    assert ahead == [dense.price(_plan(r)) for r in runs]


def test_a_dense_model_prices_statelessly_and_a_mixture_of_experts_does_not() -> None:
    assert MODELS["llama-2-70b tp2"].prices_statelessly
    moe = RooflineModel(get_model("qwen3-30b-a3b"), H200, CONFIG, era=EngineEra.V1)
    assert not moe.prices_statelessly  # it tallies the experts each priced step touches
    with pytest.raises(ValueError, match="priced ahead"):
        list(decode_costs(moe, 8, [8000]))

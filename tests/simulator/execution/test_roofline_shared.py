"""Roofline models built from equal arguments (a fleet's replicas) share their shape caches
(execution/roofline.py `_Caches`): each prices every step as a model of its own would."""

from __future__ import annotations

import gc
from dataclasses import replace

from hypothesis import example, given, settings
from hypothesis import strategies as st

from pagesim.simulator.core.catalog import get_gpu, get_model
from pagesim.simulator.core.config import ExecutionConfig
from pagesim.simulator.core.plan import SeqWork, StepPlan
from pagesim.simulator.execution.cuda_graphs import cuda_graphs_for
from pagesim.simulator.execution.overhead import EngineEra
from pagesim.simulator.execution.roofline import RooflineModel
from pagesim.simulator.execution.vllm_runtime import VllmRuntime


def _plans() -> list[StepPlan]:
    chunk = SeqWork(0, 0, 300, 800, True)
    decodes = [SeqWork(rid, rid, 1, 100 + rid, False) for rid in range(1, 9)]
    return [
        StepPlan.build([chunk, *decodes]),
        StepPlan.build(decodes),
        StepPlan.build([chunk]),
        StepPlan.build(decodes[:3]),
    ]


def test_equal_models_share_caches_and_price_as_one_alone() -> None:
    model, gpu = get_model("llama-2-7b"), get_gpu("a100-80gb")
    first = RooflineModel(model, gpu, ExecutionConfig(), tensor_parallel=2)
    costs = [first.price(plan) for plan in _plans()]
    twin = RooflineModel(model, gpu, ExecutionConfig(), tensor_parallel=2)
    assert twin._shape_s is first._shape_s and twin._linear is first._linear
    assert [twin.price(plan) for plan in reversed(_plans())] == costs[::-1]

    # Another argument: caches of its own, and other prices.
    slower = RooflineModel(
        model, gpu, replace(ExecutionConfig(), step_overhead_s=0.5), tensor_parallel=2
    )
    assert slower._shape_s is not first._shape_s
    assert [slower.price(plan) for plan in _plans()] != costs
    del first, twin
    gc.collect()
    alone = RooflineModel(model, gpu, ExecutionConfig(), tensor_parallel=2)
    assert not alone._shape_s  # its equals are gone: nothing kept for it
    assert [alone.price(plan) for plan in _plans()] == costs


def _clear_shape_caches(roof: RooflineModel) -> None:
    caches = roof._caches
    for cache in (
        caches.shape_priced,
        caches.shape_s,
        caches.tokens_priced,
        caches.tokens_linear_s,
        caches.tokens_allreduce_s,
    ):
        cache.clear()


@settings(max_examples=100, deadline=None)
@given(
    era=st.sampled_from([None, EngineEra.V0, EngineEra.V1]),
    shapes=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), min_size=1, max_size=30),
)
@example(era=EngineEra.V0, shapes=[(3, 0), (0, 3)])  # 3 tokens eager, then 3 graphed as 4
@example(era=EngineEra.V1, shapes=[(3, 0), (2, 1), (0, 3)])  # 3 tokens, graphed as 4 each time
def test_a_shape_priced_from_cached_terms_costs_what_it_costs_cold(
    era: EngineEra | None, shapes: list[tuple[int, int]]
) -> None:
    """`price` keeps a step shape's terms, and those of its token count alone where the CUDA
    graphs allow (V1's sized by tokens, or a step run eagerly; not V0's decode-only graphs,
    sized by sequences): a step priced after any others costs what it costs with every cache
    empty, to the bit. Shapes: a prompt chunk of `chunk` tokens (none: 0) beside `decodes`
    decoding sequences, so that equal token counts come with other sequence counts."""
    runtime = None if era is None else VllmRuntime(era, cuda_graphs_for(era, 8, 64), "h100-sxm")
    roof = RooflineModel(
        get_model("llama-2-7b"),
        get_gpu("h100-sxm"),
        ExecutionConfig(),
        tensor_parallel=2,
        runtime=runtime,
    )
    plans = []
    for chunk, decodes in shapes:
        work = [SeqWork(rid, rid, 1, 50 + rid, False) for rid in range(1, decodes + 1)]
        if chunk:
            work.append(SeqWork(0, 0, chunk, 40 + chunk, True))
        if work:
            plans.append(StepPlan.build(work))
    cold = []
    for plan in plans:
        _clear_shape_caches(roof)
        cold.append(roof.price(plan))
    _clear_shape_caches(roof)
    assert [roof.price(plan) for plan in plans] == cold

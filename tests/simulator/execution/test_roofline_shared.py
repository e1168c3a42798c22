"""Roofline models built from equal arguments (a fleet's replicas) share their shape caches
(execution/roofline.py `_Caches`): each prices every step as a model of its own would."""

from __future__ import annotations

import gc
from dataclasses import replace

from pagesim.simulator.core.catalog import get_gpu, get_model
from pagesim.simulator.core.config import ExecutionConfig
from pagesim.simulator.core.plan import SeqWork, StepPlan
from pagesim.simulator.execution.roofline import RooflineModel


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

"""Pipeline stages: vLLM's layer split, each stage as a model, the measured hand-offs, and the
timeline of batches through the stages (exact stories and the balanced pipe's closed form)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagesim.simulator.core.catalog import KVDtype, get_gpu, get_model
from pagesim.simulator.core.config import Policy
from pagesim.simulator.core.defaults import resolve_system
from pagesim.simulator.core.pipeline_stages import stage_layer_counts, stage_models
from pagesim.simulator.execution.factory import make_execution_model
from pagesim.simulator.execution.pipeline_clock import PipelineClock, StageSpan
from pagesim.simulator.execution.pipeline_link import (
    StageLinks,
    crosses_nodes,
    send_recv_table,
)
from pagesim.simulator.execution.pipeline_model import PipelineModel
from tests.sim_helpers import explicit_workload, scenario, system


@pytest.mark.parametrize(
    ("num_layers", "pp", "counts"),
    [
        # vllm/distributed/utils.py get_pp_indices (v0.34.0): L // P each, the remainder one
        # each to the stages before the last, walking back from it.
        (126, 2, (63, 63)),
        (126, 4, (31, 32, 32, 31)),
        (10, 4, (2, 3, 3, 2)),
        (11, 4, (3, 3, 3, 2)),
        (32, 3, (11, 11, 10)),
        (80, 3, (27, 27, 26)),
        (5, 5, (1, 1, 1, 1, 1)),
    ],
)
def test_vllm_layer_split(num_layers: int, pp: int, counts: tuple[int, ...]) -> None:
    assert stage_layer_counts(num_layers, pp) == counts


def test_an_explicit_partition_replaces_the_rule() -> None:
    assert stage_layer_counts(126, 2, (60, 66)) == (60, 66)


@given(st.integers(1, 300), st.integers(1, 64))
def test_split_properties(num_layers: int, pp: int) -> None:
    if pp > num_layers:
        return
    counts = stage_layer_counts(num_layers, pp)
    assert sum(counts) == num_layers and len(counts) == pp
    assert max(counts) - min(counts) <= 1
    assert counts[-1] == min(counts)  # the last stage (LM head) never takes an extra layer


@pytest.mark.parametrize("name", ["llama-3.1-405b", "llama-2-7b", "mixtral-8x7b"])
@pytest.mark.parametrize("pp", [2, 3, 4])
def test_stages_add_up_to_the_model(name: str, pp: int) -> None:
    model = get_model(name)
    stages = stage_models(model, pp)
    assert sum(s.num_layers for s in stages) == model.num_layers
    # parameters: the published count, each layer once, each end on one stage
    assert abs(sum(s.num_params for s in stages) - model.num_params) <= pp
    # KV per token: each stage its own layers' only
    assert sum(s.kv_bytes_per_token(KVDtype.BF16, 8) for s in stages) == model.kv_bytes_per_token(
        KVDtype.BF16, 8
    )


def test_405b_stage_weights_by_hand() -> None:
    # 405,849,243,648 published parameters; vocabulary 128,256 x 16,384 = 2,101,346,304 each
    # for the embedding (stage 0) and the untied LM head (stage 1); 126 equal layers split
    # 63 / 63: (405,849,243,648 - 2 x 2,101,346,304) / 2 + 2,101,346,304 per stage.
    first, last = stage_models(get_model("llama-3.1-405b"), 2)
    assert first.num_params == last.num_params == 202_924_621_824


@pytest.mark.parametrize(
    ("boundary", "tp", "crosses"),
    [(0, 8, True), (0, 4, False), (1, 4, True), (2, 4, False), (0, 1, False), (7, 1, True)],
)
def test_which_hand_offs_leave_the_node(boundary: int, tp: int, crosses: bool) -> None:
    assert crosses_nodes(boundary, tp, 8) is crosses


@pytest.mark.parametrize(
    ("boundary", "tp", "crosses"),
    [(0, 8, False), (7, 8, False), (8, 8, True), (3, 18, True), (2, 18, False), (71, 1, True)],
)
def test_a_rack_domain_keeps_hand_offs_on_nvlink(boundary: int, tp: int, crosses: bool) -> None:
    # GB200 NVL72: GPUs 0..71 share one NVLink domain; stage b ends at GPU (b + 1) tp - 1
    assert crosses_nodes(boundary, tp, 72) is crosses


def test_send_recv_table_reads_the_measured_medians() -> None:
    table = send_recv_table("h100_dgx")
    # Vidur network/h100_dgx/send_recv.csv medians (ms): 2,048 B 0.005 intra / 0.017 inter;
    # 64 MiB 0.193 / 1.871.
    assert table.seconds(2048, False) == pytest.approx(0.005e-3)
    assert table.seconds(2048, True) == pytest.approx(0.017e-3)
    assert table.seconds(64 << 20, True) == pytest.approx(1.871e-3)
    # 4,096 B lies between 2,048 (0.017 ms) and 10,240 (0.019 ms): a quarter of the way
    assert table.seconds(4096, True) == pytest.approx(0.0175e-3)
    assert table.seconds(100, True) == pytest.approx(0.017e-3)  # below: the smallest's


def test_405b_decode_hand_off_by_hand() -> None:
    # TP 8 x PP 2 on H100s: one token's hidden_states and residual, 16,384 x 2 B / 8 ranks =
    # 4,096 B per message, two messages across the nodes: 2 x 0.0175 ms.
    links = StageLinks.of("h100-sxm", 2, 16384, 8, 8)
    assert links.crossing == (True,)
    assert links.transfer_s(1) == pytest.approx((0.035e-3,))
    assert StageLinks.of("h100-sxm", 2, 16384, 4, 8).crossing == (False,)
    # the same shape in a GB200 rack stays on NVLink: DGX H100's intra-node 2 x 0.00525 ms
    # (4,096 B a quarter of the way from 2,048 B at 0.005 ms to 10,240 B at 0.006 ms)
    rack = StageLinks.of("gb200", 2, 16384, 8, 72)
    assert rack.crossing == (False,)
    assert rack.transfer_s(1) == pytest.approx((0.0105e-3,))


def test_two_stages_three_batches_by_hand() -> None:
    """Stage times a: (2, 3), b: (1, 1), c: (4, 2) s, hand-offs 0.5 s, all scheduled at 0.

    a: stage 0 [0, 2], reaches stage 1 at 2.5: [2.5, 5.5]
    b: stage 0 [2, 3] (after a), reaches stage 1 at 3.5 but a holds it until 5.5: [5.5, 6.5]
    c: stage 0 [3, 7], reaches stage 1 at 7.5 (free since 6.5): [7.5, 9.5]
    """
    clock = PipelineClock(2)
    assert clock.run(0.0, (2.0, 3.0), (0.5,)) == (StageSpan(0.0, 2.0), StageSpan(2.5, 5.5))
    assert clock.run(0.0, (1.0, 1.0), (0.5,)) == (StageSpan(2.0, 3.0), StageSpan(5.5, 6.5))
    assert clock.run(0.0, (4.0, 2.0), (0.5,)) == (StageSpan(3.0, 7.0), StageSpan(7.5, 9.5))


def test_a_late_batch_waits_for_nobody() -> None:
    clock = PipelineClock(3)
    clock.run(0.0, (1.0, 1.0, 1.0), (0.0, 0.0))
    # stage 0 [10, 11], stage 1 [11.5, 12.5], stage 2 [13, 14]: the stages were long free
    assert clock.run(10.0, (1.0, 1.0, 1.0), (0.5, 0.5))[-1] == StageSpan(13.0, 14.0)


@given(st.integers(1, 6), st.integers(1, 8), st.integers(1, 16), st.integers(0, 16))
def test_balanced_pipe_closed_form(num_stages: int, num_batches: int, t: int, x: int) -> None:
    """Balanced stages of t, hand-offs of x, B batches at 0: batch b on stage s runs from
    b t + s (t + x); the last ends at (B + P - 1) t + (P - 1) x. (Integers: exact floats.)"""
    clock = PipelineClock(num_stages)
    for b in range(num_batches):
        spans = clock.run(0.0, (float(t),) * num_stages, (float(x),) * (num_stages - 1))
        for s, span in enumerate(spans):
            assert span == StageSpan(b * t + s * (t + x), b * t + s * (t + x) + t)
    assert spans[-1].end_s == (num_batches + num_stages - 1) * t + (num_stages - 1) * x


def test_bad_clock_calls() -> None:
    with pytest.raises(ValueError):
        PipelineClock(0)
    with pytest.raises(ValueError):
        PipelineClock(2).run(0.0, (1.0,), ())


@pytest.mark.parametrize(("gpu", "crossing"), [("h100-sxm", (True,)), ("gb200", (False,))])
def test_the_built_model_takes_the_gpus_domain(gpu: str, crossing: tuple[bool, ...]) -> None:
    # Llama-2-70B at TP 8 x PP 2: 16 GPUs leave an 8-GPU node, not a 72-GPU GB200 rack
    pipelined = system(Policy.VLLM_V1, pipeline_parallel=2)
    sc = replace(scenario(explicit_workload([(100, 4, 0.0)]), pipelined), tensor_parallel=8)
    sc = replace(sc, model=get_model("llama-2-70b"), gpu=get_gpu(gpu))
    model = make_execution_model(sc, resolve_system(pipelined, sc.model, sc.gpu, 8).system)
    assert isinstance(model, PipelineModel)
    assert model.links.crossing == crossing

"""vLLM's own all-reduce (execution/allreduce.py): which kernel a call runs, by the rules of
vLLM v0.6.4 and v0.11, and what it costs in a CUDA graph and eagerly (that a step priced so
still costs more for more work: test_roofline_properties.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pagesim.simulator.core.catalog import get_gpu, get_model
from pagesim.simulator.core.config import ExecutionConfig
from pagesim.simulator.core.plan import SeqWork, StepPlan
from pagesim.simulator.core.preset_files import shipped_presets
from pagesim.simulator.execution.allreduce import Route, call_s, route
from pagesim.simulator.execution.cuda_graphs import cuda_graphs_for
from pagesim.simulator.execution.factors import resolve_link
from pagesim.simulator.execution.overhead import EngineEra
from pagesim.simulator.execution.roofline import RooflineModel
from pagesim.simulator.execution.roofline_terms import allreduce_call_s
from pagesim.simulator.execution.vllm_runtime import VllmRuntime

KIB, MIB = 1 << 10, 1 << 20
DGX_A100 = shipped_presets().interconnects["dgx-a100"]
DGX_H100 = shipped_presets().interconnects["dgx-h100"]
PCIE4 = shipped_presets().interconnects["pcie4"]
V0, V1 = EngineEra.V0, EngineEra.V1


def test_v0_6_4_runs_its_custom_kernels_by_group_size_and_message_size() -> None:
    """vLLM v0.6.4 csrc/custom_all_reduce.cuh CustomAllreduce::allreduce: one-shot for 2 GPUs,
    or under 512 KiB on up to 4, or under 256 KiB on up to 8; two-shot otherwise.
    custom_all_reduce.py should_custom_ar: messages under max_size, 8 MiB; NCCL above."""
    for size in (16 * KIB, 4 * MIB, 8 * MIB - 16):
        assert route(size, 2, DGX_H100, V0, "h100-sxm") is Route.ONE_SHOT
    assert route(512 * KIB - 16, 4, DGX_H100, V0, "h100-sxm") is Route.ONE_SHOT
    assert route(512 * KIB, 4, DGX_H100, V0, "h100-sxm") is Route.TWO_SHOT
    assert route(256 * KIB - 16, 8, DGX_A100, V0, "a100-80gb") is Route.ONE_SHOT
    assert route(256 * KIB, 8, DGX_A100, V0, "a100-80gb") is Route.TWO_SHOT
    assert route(8 * MIB, 4, DGX_H100, V0, "h100-sxm") is Route.NCCL  # not under max_size
    assert route(16 * KIB, 3, DGX_H100, V0, "h100-sxm") is Route.NCCL  # _SUPPORTED_WORLD_SIZES


def test_without_nvlink_between_every_gpu_nccl_runs() -> None:
    """v0.6.4 CustomAllreduce.__init__ disables itself on more than two PCIe-only GPUs; two GPUs
    over PCIe with peer-to-peer would run it, which pagesim leaves to NCCL's figures."""
    assert PCIE4.custom is None
    for gpus in (2, 4):
        assert route(16 * KIB, gpus, PCIE4, V0, "l40s") is Route.NCCL


def test_v0_11_on_hopper_hands_larger_messages_at_6_and_8_gpus_to_symmetric_memory() -> None:
    """v0.11 all_reduce_utils.CUSTOM_ALL_REDUCE_MAX_SIZES["9.0"]: 512 KiB at 6 GPUs, 256 KiB at
    8 (2 and 4 GPUs keep max_size, 8 MiB); above, torch symmetric memory, priced as NCCL. The
    A100 (8.0) is not in the table: 8 MiB."""
    assert route(256 * KIB, 8, DGX_H100, V1, "h100-sxm") is Route.NCCL
    assert route(256 * KIB - 16, 8, DGX_H100, V1, "h200-sxm") is Route.ONE_SHOT
    assert route(4 * MIB, 4, DGX_H100, V1, "h100-sxm") is Route.TWO_SHOT
    assert route(4 * MIB, 8, DGX_A100, V1, "a100-80gb") is Route.TWO_SHOT
    assert route(4 * MIB, 8, DGX_H100, V0, "h100-sxm") is Route.TWO_SHOT  # v0.6.4: 8 MiB


def test_a_call_costs_its_stages_and_peer_reads_and_eagerly_the_copy_in() -> None:
    """One-shot: a stage + (t - 1) B of peer reads; two-shot: two stages + 2 (t - 1) / t B.
    Eagerly, custom_all_reduce.py all_reduce(registered=False) first copies the input into its
    registered buffer: B read and written at the GPU's bandwidth."""
    custom = DGX_H100.custom
    assert custom is not None
    link = DGX_H100.at(4)
    b = 128 * KIB
    one = custom.stage_s + 3 * b / custom.one_shot_bps
    assert call_s(b, 4, link, Route.ONE_SHOT, True, 3.35e12) == pytest.approx(one, rel=1e-12)
    assert call_s(b, 4, link, Route.ONE_SHOT, False, 3.35e12) == pytest.approx(
        one + 2 * b / 3.35e12, rel=1e-12
    )
    two = 2 * custom.stage_s + 1.5 * (2 * MIB) / custom.two_shot_bps
    assert call_s(2 * MIB, 4, link, Route.TWO_SHOT, True, 3.35e12) == pytest.approx(two)
    # NCCL: the measured medians, as before
    assert call_s(b, 4, link, Route.NCCL, True, 3.35e12) == allreduce_call_s(b, 4, link)
    # A decode step's 128 KiB on 4 H100s: ~16 us, inside the 9-21 us SGLang PR #2904 measured
    # for vLLM's kernel, and under NCCL's 41 us median (Vidur) that priced it before.
    assert 9e-6 < one < 21e-6 < allreduce_call_s(b, 4, link)


def test_a_scenario_that_sets_its_link_prices_every_call_by_its_formula() -> None:
    config = ExecutionConfig(allreduce_latency_us=20.0, allreduce_bw_gbps=100.0)
    assert resolve_link(DGX_H100, config, 4).custom is None
    staged = resolve_link(DGX_H100, ExecutionConfig(custom_allreduce_stage_us=5.0), 4)
    assert staged.custom is not None and staged.custom.stage_s == pytest.approx(5e-6)


H100 = get_gpu("h100-sxm")
LLAMA_70B = get_model("llama-3-70b")


def _vllm(era: EngineEra, **config: float) -> RooflineModel:
    graphs = cuda_graphs_for(era, 256, 8192)
    return RooflineModel(
        LLAMA_70B,
        H100,
        replace(ExecutionConfig(), **config),
        tensor_parallel=4,
        era=era,
        runtime=VllmRuntime(era, graphs, H100.name),
    )


def test_a_decode_step_runs_the_custom_kernel_in_its_graph_and_a_prefill_eagerly() -> None:
    roof = _vllm(V0)
    decode = StepPlan.build([SeqWork(i, i, 1, 100, False) for i in range(8)])
    custom = roof.link.custom
    assert custom is not None
    message = 8 * 8192 * 2
    per_call = custom.stage_s + 3 * message / custom.one_shot_bps
    assert roof.breakdown(decode)["all_reduce"] == pytest.approx(160 * per_call, rel=1e-12)
    prefill = StepPlan.build([SeqWork(0, 0, 200, 200, True)])  # 3.2 MB: two-shot, eager
    message = 200 * 8192 * 2
    per_call = 2 * custom.stage_s + 1.5 * message / custom.two_shot_bps + 2 * message / 3350e9
    assert roof.breakdown(prefill)["all_reduce"] == pytest.approx(160 * per_call, rel=1e-12)
    big = StepPlan.build([SeqWork(0, 0, 1024, 1024, True)])  # 16 MiB: NCCL
    assert roof.allreduce_route(1024) is Route.NCCL
    expected = 160 * allreduce_call_s(1024 * 8192 * 2, 4, roof.link)
    assert roof.breakdown(big)["all_reduce"] == pytest.approx(expected, rel=1e-12)

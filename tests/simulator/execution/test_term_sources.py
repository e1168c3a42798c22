"""Where each step-cost term's figures come from (roofline_report.py `term_sources`, `describe`):
a factor or all-reduce figure the scenario's [execution] sets is "set in the scenario" in the
terms it enters; the rest keep "fitted", "extrapolated" or "estimate"."""

from __future__ import annotations

import pytest

from pagesim.simulator.core.catalog import get_gpu, get_model
from pagesim.simulator.core.config import ExecutionConfig
from pagesim.simulator.execution.overhead import EngineEra, host_overhead
from pagesim.simulator.execution.roofline import RooflineModel

LLAMA_7B = get_model("llama-2-7b")
FITTED = "roofline (fitted factors)"
ATTENTION = "factors fitted to A100 attention"
NVLINK3 = (
    "roofline (fitted: nvlink3 (DGX A100); measured medians up to 4 MiB, falling with size "
    "where NCCL's measured regimes do)"
)


def sources(gpu: str, config: ExecutionConfig, tensor_parallel: int = 2) -> dict[str, str]:
    return RooflineModel(
        LLAMA_7B, get_gpu(gpu), config, tensor_parallel=tensor_parallel
    ).term_sources()


def test_nothing_set_keeps_the_fitted_extrapolated_and_estimate_labels() -> None:
    a100 = sources("a100-80gb", ExecutionConfig())
    assert a100["linear"] == a100["lm_head"] == a100["small_ops"] == FITTED
    assert a100["decode_attention"] == f"roofline ({ATTENTION}; block term estimated)"
    assert a100["prefill_attention"] == f"roofline ({ATTENTION})"
    assert a100["all_reduce"] == NVLINK3
    l40s = sources("l40s", ExecutionConfig())  # factors from the A40's fit, a PCIe estimate
    assert l40s["linear"] == "roofline (extrapolated factors)"
    assert l40s["all_reduce"] == "roofline (estimate: pcie4 (estimate))"


def test_factors_the_scenario_sets_are_named_in_the_terms_they_enter() -> None:
    config = ExecutionConfig(gemm_efficiency=0.6, attention_bw_efficiency=0.5)
    found = sources("a100-80gb", config)
    gemm = "roofline (set in the scenario: gemm_efficiency; other fitted factors)"
    assert found["linear"] == found["lm_head"] == gemm
    assert found["small_ops"] == FITTED  # its factors are not [execution] keys
    attention = f"roofline (set in the scenario: attention_bw_efficiency; other {ATTENTION}"
    assert found["decode_attention"] == f"{attention}; block term estimated)"
    assert found["prefill_attention"] == f"{attention})"  # its KV read: the same bandwidth share
    assert found["all_reduce"] == NVLINK3
    both = sources("l40s", ExecutionConfig(gemm_efficiency=0.6, weight_bw_efficiency=0.7))
    assert both["linear"] == (
        "roofline (set in the scenario: gemm_efficiency, weight_bw_efficiency; other "
        "extrapolated factors)"
    )


@pytest.mark.parametrize(
    ("gpu", "config", "label"),
    [
        (
            "a100-80gb",
            ExecutionConfig(allreduce_bw_gbps=100.0, allreduce_latency_us=20.0),
            "roofline (set in the scenario: allreduce_latency_us, allreduce_bw_gbps)",
        ),
        (
            "l40s",
            ExecutionConfig(allreduce_bw_gbps=20.0, allreduce_latency_us=30.0),
            "roofline (set in the scenario: allreduce_latency_us, allreduce_bw_gbps)",
        ),
        (
            "a100-80gb",
            ExecutionConfig(allreduce_bw_gbps=100.0),
            "roofline (set in the scenario: allreduce_bw_gbps; latency fitted: nvlink3 (DGX A100))",
        ),
        (
            "l40s",
            ExecutionConfig(allreduce_latency_us=30.0),
            "roofline (set in the scenario: allreduce_latency_us; bandwidth estimate: pcie4 "
            "(estimate))",
        ),
    ],
)
def test_all_reduce_figures_the_scenario_sets(
    gpu: str, config: ExecutionConfig, label: str
) -> None:
    found = sources(gpu, config)
    assert found["all_reduce"] == label
    assert found["linear"] == sources(gpu, ExecutionConfig())["linear"]
    assert sources(gpu, config, tensor_parallel=1)["all_reduce"] == "none (tensor_parallel 1)"


def test_describe_lists_what_the_scenario_set_and_warns_only_of_estimates_still_used() -> None:
    def describe(config: ExecutionConfig) -> dict[str, object]:
        return RooflineModel(LLAMA_7B, get_gpu("l40s"), config, tensor_parallel=2).describe()

    plain = describe(ExecutionConfig())
    assert plain["set_in_scenario"] == []
    assert "all-reduce over pcie4 (estimate): estimate: PCIe 4 x16" in str(plain["notes"])
    both = describe(ExecutionConfig(allreduce_bw_gbps=20.0, allreduce_latency_us=30.0))
    assert both["set_in_scenario"] == ["allreduce_latency_us", "allreduce_bw_gbps"]
    assert both["interconnect_source"] == (
        "set in the scenario: allreduce_latency_us, allreduce_bw_gbps"
    )
    assert not any("all-reduce" in note for note in both["notes"])  # type: ignore[attr-defined]
    one = describe(ExecutionConfig(allreduce_bw_gbps=20.0, gemm_efficiency=0.5))
    assert one["set_in_scenario"] == ["gemm_efficiency", "allreduce_bw_gbps"]
    assert one["interconnect_source"] == (
        "set in the scenario: allreduce_bw_gbps; latency: estimate: PCIe 4 x16 ~25 GB/s "
        "effective, no NVLink"
    )
    assert (
        "all-reduce over pcie4 (estimate): set in the scenario: allreduce_bw_gbps; latency: "
        "estimate"
    ) in str(one["notes"])


def test_moe_dispatch_says_it_keeps_the_presets_link() -> None:
    """moe_cost.ExpertTraffic prices dispatch on the GPU preset's link: with the scenario's
    all-reduce figures set, the label says they do not enter."""
    ds = get_model("deepseek-v3")
    h200 = get_gpu("h200-sxm")

    def dispatch(config: ExecutionConfig) -> str:
        roof = RooflineModel(ds, h200, config, data_parallel=8, expert_parallel=True)
        return roof.term_sources()["moe_dispatch"]

    plain = "roofline (estimate: all-gather + reduce-scatter on the all-reduce link)"
    assert dispatch(ExecutionConfig()) == plain
    assert dispatch(ExecutionConfig(allreduce_bw_gbps=100.0)) == (
        f"{plain[:-1]}; the preset's figures, not the scenario's allreduce_*)"
    )


def test_host_overhead_names_what_the_scenario_set() -> None:
    v1 = (
        "estimate: about 1 ms per step with CUDA graphs and a persistent batch (vLLM V1, v0.11; "
        "not measured)"
    )
    assert host_overhead(ExecutionConfig(), EngineEra.V1).source == v1
    both = ExecutionConfig(step_overhead_s=0.002, step_overhead_s_per_seq=1e-4)
    assert host_overhead(both, EngineEra.V1).source == (
        "set in the scenario ([execution] step_overhead_s, step_overhead_s_per_seq)"
    )
    fixed = host_overhead(ExecutionConfig(step_overhead_s=0.002), EngineEra.V1)
    assert fixed.source == f"set in the scenario ([execution] step_overhead_s); per sequence: {v1}"
    per_seq = host_overhead(ExecutionConfig(step_overhead_s_per_seq=1e-4), EngineEra.V0)
    assert per_seq.source.startswith(
        "set in the scenario ([execution] step_overhead_s_per_seq); fixed: vLLM V0 of "
        "v0.6.3-v0.6.4: serial part fitted to vLLM CI builds 9523/9555"
    )

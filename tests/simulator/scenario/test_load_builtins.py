"""Scenario files: the built-in library loads, round-trips and sweeps, and the documented schema
matches the config types."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from scenario_helpers import error_of

from pagesim.simulator.core.catalog import get_gpu, get_model
from pagesim.simulator.core.config import ArrivalKind, Policy
from pagesim.simulator.scenario import load as sc
from pagesim.simulator.scenario.load import (
    BUILTIN_DIR,
    describe_scenario,
    expand_sweep,
    list_builtin,
    load_scenario,
    parse_scenario,
    resolve_scenario,
)

BUILTINS = [name for name, _ in list_builtin()]


def test_the_library_holds_the_builtin_scenarios() -> None:
    assert BUILTINS == [
        "azure_conv_v0_vs_chunked",
        "blackwell_vs_hopper",  # issue 31: B200 and MI355X against H200 per GPU and per dollar
        "block_size_ablation",
        "deepseek_wide_ep",
        "disaggregated_vs_colocated",  # issue 16
        "energy_per_token_gpus",  # issue 32: J/token of two GPUs at one SLO
        "fleet_capacity",  # issue 15: the fewest GPUs for a trace and an SLO
        "fp8_vs_bf16",  # issue 17: weight dtypes in capacity and step cost
        "kv_offload_mooncake",  # issue 32: a CPU tier behind the GPU prefix cache
        "latency_vs_rate_alpaca",
        "latency_vs_rate_sharegpt",
        "llama_405b_pipeline",  # issue 31: TP 8 x PP 2 across two nodes vs TP 8 with FP8
        "measured_vs_roofline",  # issue 13: the roofline beside Vidur's measurements
        "memory_waste_contiguous_vs_paged",
        "mla_capacity",  # issue 17
        "moe_decode",  # issue 17
        "parallel_sampling_beam",
        "router_comparison",  # issue 15
        "shared_system_prompt",
        "spec_decode",  # issue 17: speculative decoding under V1
        "swap_vs_recompute",
        "textbook_static_vs_continuous",
        "vllm_v1_on_h200",
    ]
    assert all(description for _, description in list_builtin())


@pytest.mark.parametrize("name", BUILTINS)
def test_every_builtin_loads_and_round_trips_through_describe(name: str) -> None:
    scenario = load_scenario(name)
    assert scenario.name == name
    assert scenario.source == BUILTIN_DIR / f"{name}.toml"
    assert scenario.systems
    # Small enough to simulate in seconds in CI (the golden test reruns every built-in): the
    # largest, vllm_v1_on_h200 (4,000 short-step requests for a steady state), takes ~4 s.
    assert (scenario.workload.num_requests or 0) <= 4000
    mooncake = scenario.workload.mooncake
    assert mooncake is None or (mooncake.num_requests or 0) <= 400
    text = describe_scenario(scenario, ["seed=1"])
    assert "# override: seed=1" in text
    assert parse_scenario(tomllib.loads(text), scenario.source) == scenario


@pytest.mark.parametrize("name", ["block_size_ablation", "latency_vs_rate_sharegpt"])
def test_builtin_sweeps_expand(name: str) -> None:
    points = expand_sweep(name)
    (axis,) = load_scenario(name).sweep
    assert [point for point, _ in points] == [{axis.path: v} for v in axis.values]


def test_textbook_scenario_is_the_textbook_example() -> None:
    scenario = load_scenario("textbook_static_vs_continuous")
    assert [r.output_len for r in scenario.workload.explicit] == [100, 50, 200, 30]
    assert {r.arrival_s for r in scenario.workload.explicit} == {0.0}
    static, continuous = scenario.systems
    # Two slots, so the second static batch waits for the first (the textbook picture).
    assert (static.policy, static.static_batch_size, static.max_num_seqs) == (Policy.STATIC, 2, 2)
    assert continuous.policy in (Policy.VLLM_V0, Policy.VLLM_V1)
    assert continuous.max_num_seqs == 2


def test_shared_prompt_and_azure_scenarios() -> None:
    shared = load_scenario("shared_system_prompt")
    assert shared.model == get_model("llama-2-13b") and shared.gpu == get_gpu("a100-80gb")
    assert shared.workload.num_requests == 10
    assert [(g.num_tokens, g.fraction) for g in shared.workload.prefix_groups] == [(2000, 1.0)]
    assert [s.enable_prefix_cache for s in shared.systems] == [True, False]
    azure = load_scenario("azure_conv_v0_vs_chunked").workload
    assert azure.trace_name == "azure-conv"
    assert azure.trace_path == sc.BUILTIN_TRACES["azure-conv"]
    assert azure.arrival.kind is ArrivalKind.TRACE
    assert 300 <= (azure.num_requests or 0) <= 600


def test_resolve_scenario_by_name_path_or_not_at_all(mini: Path) -> None:
    assert resolve_scenario("swap_vs_recompute") == BUILTIN_DIR / "swap_vs_recompute.toml"
    assert resolve_scenario("swap_vs_recompute.toml") == BUILTIN_DIR / "swap_vs_recompute.toml"
    assert resolve_scenario(mini) == mini
    message = error_of("no_such_scenario")
    assert message.startswith("'no_such_scenario': no such scenario file or built-in; built-ins: ")
    assert "textbook_static_vs_continuous" in message


def test_system_readers_cover_every_system_config_field() -> None:
    from dataclasses import fields

    from pagesim.simulator.core.config import SystemConfig

    names = [f.name for f in fields(SystemConfig)]
    assert ["name", *sc.SCHEMA["defaults"]] == names
    assert list(sc.SCHEMA["systems"][0]) == names

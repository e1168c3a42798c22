"""Scenario files: defaults merge into the systems, values parse into the config types, and
overrides from the command line apply or are refused by name."""

from __future__ import annotations

from pathlib import Path

from scenario_helpers import MINIMAL, error_of, write

from pagesim.simulator.core.catalog import GIB
from pagesim.simulator.core.config import (
    ArrivalKind,
    ContiguousAllocator,
    ExecutionKind,
    LengthKind,
    Policy,
    PreemptionPolicy,
    Reservation,
    SystemConfig,
)
from pagesim.simulator.core.defaults import resolve_system
from pagesim.simulator.core.request import SamplingKind
from pagesim.simulator.scenario.load import load_scenario, parse_value, scenario_to_toml_text


def test_defaults_apply_unless_a_system_sets_the_key(mini: Path) -> None:
    a, b = load_scenario(mini).systems
    assert (a.name, a.policy, a.block_size) == ("a", Policy.VLLM_V0, 32)
    assert (b.name, b.policy, b.block_size, b.reservation) == (
        "b",
        Policy.ORCA,
        8,
        Reservation.POW2,
    )
    # Where neither says, the knob stays unset in the scenario and takes its era's default when
    # the run starts: vLLM V0's max_num_seqs is 256 (vllm/config.py SchedulerConfig, 0.5.4).
    assert a.max_num_seqs is None
    scenario = load_scenario(mini)
    assert resolve_system(a, scenario.model, scenario.gpu).system.max_num_seqs == 256


def test_contiguous_allocator_defaults_by_policy_and_is_read_from_defaults(mini: Path) -> None:
    # orca: buddy, as the vLLM paper's Orca baselines (§6.1); static: first fit; paged: none.
    a, b = load_scenario(mini).systems
    assert (a.contiguous_allocator, b.contiguous_allocator) == (None, ContiguousAllocator.BUDDY)
    static = SystemConfig("s", Policy.STATIC)
    assert static.contiguous_allocator is ContiguousAllocator.FIRST_FIT
    text = mini.read_text().replace(
        "block_size = 32\n", 'block_size = 32\ncontiguous_allocator = "first-fit"\n'
    )
    a, b = load_scenario(write(mini.parent, text, "ff.toml")).systems
    assert (a.contiguous_allocator, b.contiguous_allocator) == (
        None,  # [defaults] serve the contiguous systems; a paged one has no such allocator
        ContiguousAllocator.FIRST_FIT,
    )


def test_values_are_parsed_into_the_config_types(mini: Path) -> None:
    scenario = load_scenario(mini)
    assert scenario.seed == 0 and scenario.tensor_parallel == 1
    assert scenario.execution.kind is ExecutionKind.ROOFLINE
    w = scenario.workload
    assert (w.arrival.kind, w.arrival.rate_per_s) == (ArrivalKind.POISSON, 2.0)
    assert (w.prompt.kind, w.prompt.value) == (LengthKind.FIXED, 64)
    assert (w.output.kind, w.output.low, w.output.high) == (LengthKind.UNIFORM, 8, 32)
    assert w.sampling is SamplingKind.SINGLE and w.num_requests == 10


def test_a_custom_gpu_and_a_preset_with_a_figure_replaced(mini: Path) -> None:
    custom = 'name = "mine"\nmemory_gib = 48\nmem_bandwidth_gbps = 960\nfp16_tflops = 180.5'
    text = MINIMAL.replace('preset = "a100-80gb"', custom)
    gpu = load_scenario(write(mini.parent, text, "custom.toml")).gpu
    assert (gpu.name, gpu.memory_bytes, gpu.mem_bandwidth_bps) == ("mine", 48 * GIB, 960e9)
    assert (gpu.fp16_flops, gpu.host_link_bps) == (180.5e12, 25e9)
    bigger = load_scenario(mini, ["gpu.memory_gib=144"]).gpu
    assert bigger.memory_bytes == 144 * GIB and bigger.name == "a100-80gb"


def test_overrides_global_and_per_system(mini: Path) -> None:
    scenario = load_scenario(
        mini,
        [
            "systems.max_num_seqs=64",
            "systems[0].preemption=swap",
            "workload.arrival.rate_per_s=4",  # an integer where a float is expected
            "stop.max_time_s=30.5",  # a table the file lacks is created
            "seed=7",
            'name="renamed"',
        ],
    )
    assert [s.max_num_seqs for s in scenario.systems] == [64, 64]
    assert [s.preemption for s in scenario.systems] == [PreemptionPolicy.SWAP, None]
    assert scenario.workload.arrival.rate_per_s == 4.0
    assert scenario.stop.max_time_s == 30.5
    assert (scenario.seed, scenario.name) == (7, "renamed")


def test_an_override_of_defaults_reaches_systems_that_do_not_set_the_key(mini: Path) -> None:
    a, b = load_scenario(mini, ["defaults.block_size=64"]).systems
    assert (a.block_size, b.block_size) == (64, 8)


def test_override_values_parse_as_toml_or_else_as_bare_strings() -> None:
    assert parse_value("2") == 2
    assert parse_value("2.5") == 2.5
    assert parse_value("true") is True
    assert parse_value('"x"') == "x"
    assert parse_value("[1, 2]") == [1, 2]
    assert parse_value('{ kind = "burst" }') == {"kind": "burst"}
    assert parse_value("vllm-v1") == "vllm-v1"
    assert parse_value("1\nx = 2") == "1\nx = 2"  # never a second key smuggled in


def test_bad_overrides_are_named(mini: Path) -> None:
    assert error_of(mini, ("seed",)) == (
        "s.toml: override 'seed': expected dotted.key=value, e.g. systems.block_size=32"
    )
    assert error_of(mini, ("systems[5].block_size=4",)) == (
        "s.toml: override 'systems[5].block_size=4': systems has 2 entries (indices 0-1)"
    )
    assert error_of(mini, ("systems.blok_size=4",)).startswith(
        "s.toml: override 'systems.blok_size=4': unknown key 'blok_size' (did you mean "
        "'block_size'?) in systems; valid: name, policy, block_size, "
    )
    assert error_of(mini, ("seed.x=1",)) == (
        "s.toml: override 'seed.x=1': 'seed' is a value, not a table: nothing inside it to set"
    )
    assert error_of(mini, ("systems.block_size=0",)) == (
        "s.toml: systems[0].block_size: must be in [1, 1048576], got 0 "
        "(set by override 'systems.block_size=0')"
    )
    assert error_of(mini, ("defaults.policy=vlm",)) == (
        "s.toml: defaults.policy: unknown policy 'vlm'; valid: static, orca, vllm-v0, vllm-v1 "
        "(set by override 'defaults.policy=vlm')"
    )


def test_the_scenario_as_run_lists_its_overrides(mini: Path) -> None:
    assert scenario_to_toml_text(mini) == MINIMAL
    text = scenario_to_toml_text(mini, ["seed=3"])
    assert text.startswith("# pagesim: overrides applied on top of this file:\n#   seed=3\n")
    assert text.endswith(MINIMAL)

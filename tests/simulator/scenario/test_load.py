"""Scenario files: the built-in library loads, defaults merge, overrides and sweeps apply, relative
paths resolve against the file, and bad input gets one exact, actionable message."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest
from profile_helpers import synthetic_profile

from pagesim.simulator.core.catalog import GIB, get_gpu, get_model, load_hf_config
from pagesim.simulator.core.config import (
    ArrivalKind,
    ContiguousAllocator,
    ExecutionKind,
    LengthKind,
    Policy,
    PreemptionPolicy,
    Reservation,
    SampleLengths,
    Scenario,
    SweepAxis,
    SystemConfig,
)
from pagesim.simulator.core.defaults import resolve_system
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.request import SamplingKind
from pagesim.simulator.engine import simulate
from pagesim.simulator.scenario import load as sc
from pagesim.simulator.scenario.load import (
    BUILTIN_DIR,
    describe_scenario,
    expand_sweep,
    list_builtin,
    load_scenario,
    parse_param,
    parse_scenario,
    parse_value,
    resolve_scenario,
    scenario_to_toml_text,
)
from pagesim.simulator.workload.stream import iter_requests

BUILTINS = [name for name, _ in list_builtin()]


MINIMAL = """
name = "mini"
[model]
preset = "llama-2-7b"
[gpu]
preset = "a100-80gb"
[workload]
num_requests = 10
[workload.arrival]
kind = "poisson"
rate_per_s = 2.0
[workload.prompt]
kind = "fixed"
value = 64
[workload.output]
kind = "uniform"
low = 8
high = 32
[defaults]
policy = "vllm-v0"
block_size = 32
[[systems]]
name = "a"
[[systems]]
name = "b"
policy = "orca"
reservation = "pow2"
block_size = 8
"""


def write(folder: Path, text: str, name: str = "s.toml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def error_of(path: Path | str, overrides: tuple[str, ...] = ()) -> str:
    with pytest.raises(InputError) as info:
        load_scenario(path, overrides)
    return str(info.value)


@pytest.fixture
def mini(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # messages name the file relative to the working directory
    return write(tmp_path, MINIMAL)


def test_the_library_holds_the_builtin_scenarios() -> None:
    assert BUILTINS == [
        "azure_conv_v0_vs_chunked",
        "block_size_ablation",
        "disaggregated_vs_colocated",  # issue 16
        "fleet_capacity",  # issue 15: the fewest GPUs for a trace and an SLO
        "fp8_vs_bf16",  # issue 17: weight dtypes in capacity and step cost
        "latency_vs_rate_alpaca",
        "latency_vs_rate_sharegpt",
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


def test_overrides_global_and_per_system(mini: Path) -> None:
    scenario = load_scenario(
        mini,
        [
            "systems.max_num_seqs=64",
            "systems[1].preemption=swap",
            "workload.arrival.rate_per_s=4",  # an integer where a float is expected
            "stop.max_time_s=30.5",  # a table the file lacks is created
            "seed=7",
            'name="renamed"',
        ],
    )
    assert [s.max_num_seqs for s in scenario.systems] == [64, 64]
    assert [s.preemption for s in scenario.systems] == [None, PreemptionPolicy.SWAP]
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


def test_sweep_expansion_is_the_cartesian_product(mini: Path) -> None:
    text = MINIMAL + (
        "[sweep]\naxes = [\n"
        '  { path = "workload.arrival.rate_per_s", values = [1, 2, 4] },\n'
        '  { path = "systems.block_size", values = [8, 16] },\n]\n'
    )
    path = write(mini.parent, text)
    points = expand_sweep(path)
    assert [p for p, _ in points] == [
        {"workload.arrival.rate_per_s": rate, "systems.block_size": block}
        for rate in (1, 2, 4)
        for block in (8, 16)
    ]
    for point, scenario in points:
        assert scenario.workload.arrival.rate_per_s == point["workload.arrival.rate_per_s"]
        assert {s.block_size for s in scenario.systems} == {point["systems.block_size"]}


def test_sweep_axes_from_the_command_line_replace_the_files(mini: Path) -> None:
    axes = [parse_param("systems[1].reservation=max,oracle"), parse_param("seed=1, 2")]
    assert axes == [
        SweepAxis("systems[1].reservation", ("max", "oracle")),
        SweepAxis("seed", (1, 2)),
    ]
    points = expand_sweep(mini, ["systems.max_num_seqs=8"], axes=axes)
    assert len(points) == 4
    assert [(s.systems[1].reservation, s.seed) for _, s in points] == [
        (Reservation.MAX, 1),
        (Reservation.MAX, 2),
        (Reservation.ORACLE, 1),
        (Reservation.ORACLE, 2),
    ]
    assert all(s.systems[0].max_num_seqs == 8 for _, s in points)
    as_text = expand_sweep(
        mini, ["systems.max_num_seqs=8"], params=["systems[1].reservation=max,oracle", "seed=1,2"]
    )
    assert as_text == points


def test_parse_param_errors() -> None:
    with pytest.raises(InputError, match=r"^sweep parameter 'rate': expected dotted.key=value"):
        parse_param("rate")
    with pytest.raises(InputError, match=r"unknown key 'polcy' \(did you mean 'policy'\?\)"):
        parse_param("systems.polcy=orca")
    with pytest.raises(InputError, match=r"no values"):
        parse_param("seed=")


def test_a_bad_sweep_value_fails_at_load_naming_the_axis(mini: Path) -> None:
    text = MINIMAL + '[sweep]\naxes = [{ path = "seed", values = [1, -1] }]\n'
    assert error_of(write(mini.parent, text, "bad.toml")) == (
        "bad.toml: sweep.axes[0].values[1]: seed = -1: seed: must be in [0, 9223372036854775807], "
        "got -1"
    )
    with pytest.raises(InputError, match=r"at sweep point systems.block_size = 0"):
        expand_sweep(mini, axes=[parse_param("systems.block_size=16,0")])
    with pytest.raises(InputError, match=r"s.toml: sweep: no axes"):
        expand_sweep(mini)


def test_relative_paths_resolve_against_the_scenario_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "deep" / "folder"
    (folder / "model").mkdir(parents=True)
    llama = {
        "model_type": "llama",
        "num_hidden_layers": 2,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "max_position_embeddings": 1024,
    }
    (folder / "model" / "config.json").write_text(json.dumps(llama))
    (folder / "trace.csv").write_text(
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,5\n0.5,20,6\n1.0,30,7\n"
    )
    (folder / "lengths.csv").write_text("tokens\n5\n9\n")
    tiny = load_hf_config(folder / "model" / "config.json")
    (folder / "measured.json").write_text(json.dumps(synthetic_profile(tiny)))
    text = MINIMAL.replace('preset = "llama-2-7b"', 'config = "model/config.json"')
    text = text.replace("num_requests = 10", 'trace = "trace.csv"\nnum_requests = 2')
    text = text.replace('kind = "poisson"\nrate_per_s = 2.0', 'kind = "trace"')
    text = text.replace('kind = "fixed"\nvalue = 64', 'kind = "trace"')
    text = text.replace(
        'kind = "uniform"\nlow = 8\nhigh = 32',
        'kind = "empirical"\npath = "lengths.csv"\ncolumn = "tokens"',
    )
    text += '[execution]\nkind = "profile"\nprofile = "measured.json"\n'
    path = write(folder, text)
    monkeypatch.chdir(tmp_path)  # not the scenario's folder
    scenario = load_scenario(Path("deep/folder/s.toml"))
    assert (scenario.model.num_layers, scenario.model.num_kv_heads) == (2, 2)
    w = scenario.workload
    assert w.trace_path == folder / "trace.csv" and w.trace_name is None
    assert w.output.path == folder / "lengths.csv" and w.output.column == "tokens"
    assert scenario.execution.profile_path == folder / "measured.json"
    assert parse_scenario(tomllib.loads(text), path).workload == w


def test_a_profile_is_found_by_bare_name_in_the_installed_profiles(
    mini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profiles = mini.parent / "installed"
    profiles.mkdir()
    (profiles / "h200.json").write_text(json.dumps(synthetic_profile(get_model("llama-2-7b"))))
    monkeypatch.setattr(sc, "PROFILE_DIR", profiles)
    path = write(mini.parent, MINIMAL + '[execution]\nkind = "profile"\nprofile = "h200.json"\n')
    assert load_scenario(path).execution.profile_path == profiles / "h200.json"
    assert error_of(path, ('execution.profile="h100.json"',)) == (
        "s.toml: execution.profile: no such profile file 'h100.json' (looked for h100.json and "
        "installed/h100.json) (set by override 'execution.profile=\"h100.json\"')"
    )


def test_a_custom_gpu_and_a_preset_with_a_figure_replaced(mini: Path) -> None:
    custom = 'name = "mine"\nmemory_gib = 48\nmem_bandwidth_gbps = 960\nfp16_tflops = 180.5'
    text = MINIMAL.replace('preset = "a100-80gb"', custom)
    gpu = load_scenario(write(mini.parent, text, "custom.toml")).gpu
    assert (gpu.name, gpu.memory_bytes, gpu.mem_bandwidth_bps) == ("mine", 48 * GIB, 960e9)
    assert (gpu.fp16_flops, gpu.host_link_bps) == (180.5e12, 25e9)
    bigger = load_scenario(mini, ["gpu.memory_gib=144"]).gpu
    assert bigger.memory_bytes == 144 * GIB and bigger.name == "a100-80gb"


# --- exact messages ----------------------------------------------------------------------


def replaced(old: str, new: str) -> str:
    assert old in MINIMAL
    return MINIMAL.replace(old, new)


BAD_FILES = [
    (
        replaced('name = "b"', 'name = "b"\nblok_size = 4'),
        "s.toml: systems[1].blok_size: unknown key 'blok_size' (did you mean 'block_size'?); "
        "valid keys here: name, policy, block_size, max_num_seqs, max_num_batched_tokens, "
        "max_prefill_chunk, reservation, contiguous_allocator, preemption, victim, admission, "
        "enable_prefix_cache, watermark, gpu_memory_utilization, activation_reserve_gib, "
        "swap_space_gib, static_batch_size, static_batch_timeout_s, num_kv_blocks, execution, "
        "defaults, speculative",
    ),
    (
        replaced('policy = "orca"', 'policy = "vlm-v1"'),
        "s.toml: systems[1].policy: unknown policy 'vlm-v1'; valid: static, orca, vllm-v0, vllm-v1",
    ),
    (
        replaced("block_size = 8", "block_size = true"),
        "s.toml: systems[1].block_size: expected an integer in [1, 1048576], got boolean true",
    ),
    (
        replaced("block_size = 8", "block_size = 8.0"),
        "s.toml: systems[1].block_size: expected an integer in [1, 1048576], got float 8.0",
    ),
    (
        replaced("num_requests = 10", "num_requests = 0"),
        "s.toml: workload.num_requests: must be in [1, 1000000000], got 0",
    ),
    (
        replaced("rate_per_s = 2.0", "rate_per_s = nan"),
        "s.toml: workload.arrival.rate_per_s: must be a finite number in (0, 1000000], got nan",
    ),
    (
        replaced("rate_per_s = 2.0", "rate_per_s = -inf"),
        "s.toml: workload.arrival.rate_per_s: must be a finite number in (0, 1000000], got -inf",
    ),
    (
        replaced("rate_per_s = 2.0", "rate_per_s = " + "9" * 40),
        "s.toml: workload.arrival.rate_per_s: must be in (0, 1000000], "
        "got <an integer of about 40 digits>",
    ),
    (
        replaced('reservation = "pow2"', "gpu_memory_utilization = 1.5"),
        "s.toml: systems[1].gpu_memory_utilization: must be in (0, 1], got 1.5",
    ),
    (
        replaced('reservation = "pow2"', "watermark = 1"),
        "s.toml: systems[1].watermark: must be in [0, 1), got 1",
    ),
    (
        replaced('reservation = "pow2"', "reservation = []"),
        "s.toml: systems[1].reservation: expected a string (one of: max, pow2, oracle), "
        "got array []",
    ),
    (
        replaced('preset = "llama-2-7b"', 'preset = "llama-9"'),
        "s.toml: model.preset: unknown model 'llama-9'; known models: llama-2-7b, llama-2-13b, "
        "llama-2-70b, llama-3-8b, llama-3-70b, mistral-7b-v0.1, qwen2.5-7b, qwen2.5-72b, "
        "opt-13b, opt-66b, opt-175b, llama-3.1-8b, llama-3.1-70b, llama-3.1-405b, mixtral-8x7b, "
        "qwen3-30b-a3b, qwen3-235b-a22b, deepseek-v3, gpt-oss-20b, gpt-oss-120b, gemma-3-27b, "
        "qwen3-next-80b-a3b",
    ),
    (
        replaced('preset = "a100-80gb"', 'preset = "h300"'),
        "s.toml: gpu.preset: unknown GPU 'h300'; known GPUs: a100-40gb, a100-80gb, h100-sxm, "
        "h200-sxm, l40s, l4, rtx-4090, a40",
    ),
    (
        replaced('[gpu]\npreset = "a100-80gb"', ""),
        "s.toml: gpu: required table [gpu] is missing",
    ),
    (
        replaced('name = "mini"', 'name = "mini"\ngpu = [1, 2]').replace(
            '[gpu]\npreset = "a100-80gb"', ""
        ),
        "s.toml: gpu: expected a table, got array [1, 2]",
    ),
    (
        replaced('kind = "fixed"\nvalue = 64', 'kind = "fixed"'),
        "s.toml: workload.prompt.value: required key is missing (an integer in [1, 1000000000])",
    ),
    (
        replaced('kind = "fixed"\nvalue = 64', 'kind = "lognormal"\nvalue = 64'),
        'workload.prompt.value: not used with kind = "lognormal" (it uses: mean, cv)',
    ),
    (
        replaced('name = "b"', 'name = "a"'),
        "s.toml: systems[1].name: duplicate system name 'a' (also systems[0].name); "
        "names must be unique",
    ),
    (
        replaced("num_requests = 10", 'num_requests = 10\nsampling = "single"\nnum_seqs = 4'),
        's.toml: workload.num_seqs: must be 1 with sampling = "single"; '
        'use "parallel" or "beam" for more',
    ),
    (
        replaced('kind = "poisson"\nrate_per_s = 2.0', 'kind = "trace"'),
        's.toml: workload.arrival.kind: kind = "trace" needs workload.trace '
        "(a trace with timestamps)",
    ),
    (
        replaced('reservation = "pow2"', "enable_prefix_cache = true"),
        "s.toml: systems[1].enable_prefix_cache: prefix caching needs a paged policy "
        "(vllm-v0, vllm-v1); the policy is 'orca'",
    ),
    (
        replaced('reservation = "pow2"', 'contiguous_allocator = "slab"'),
        "s.toml: systems[1].contiguous_allocator: unknown contiguous allocator 'slab'; "
        "valid: buddy, first-fit",
    ),
    (
        replaced('name = "a"', 'name = "a"\ncontiguous_allocator = "buddy"'),
        "s.toml: systems[0].contiguous_allocator: only used by the contiguous policies "
        "(static, orca); the policy is 'vllm-v0', which allocates blocks",
    ),
    (
        replaced("num_requests = 10", 'num_requests = 10\nempirical_pairing = "rows"'),
        "s.toml: workload.empirical_pairing: only used when [workload.prompt] and "
        '[workload.output] both have kind = "empirical"',
    ),
    (
        replaced("num_requests = 10", 'num_requests = 10\nempirical_pairing = "rows"')
        .replace('kind = "fixed"\nvalue = 64', 'kind = "empirical"\ntrace = "azure-conv"')
        .replace(
            'kind = "uniform"\nlow = 8\nhigh = 32', 'kind = "empirical"\ntrace = "azure-code"'
        ),
        's.toml: workload.empirical_pairing: "rows" draws both lengths from one row of one '
        "file, but the prompt reads 'azure-conv' and the output 'azure-code'; read one file, "
        'or set "independent"',
    ),
    (
        replaced('reservation = "pow2"', 'preemption = "swap"\nswap_space_gib = 0'),
        "s.toml: systems[1].swap_space_gib: must be > 0: preemption 'swap' swaps",
    ),
    (
        MINIMAL + '[execution]\nkind = "profile"\n',
        's.toml: execution.profile: required key is missing: kind = "profile" needs a profile file',
    ),
    (
        MINIMAL + '[execution]\nkind = "profile"\nprofile = "nowhere/p.json"\n',
        "s.toml: execution.profile: no such profile file 'nowhere/p.json' "
        "(looked for nowhere/p.json)",
    ),
    (
        replaced("num_requests = 10", 'num_requests = 10\ntrace = "azure-conv"'),
        's.toml: workload.trace: not used: no [workload.arrival|prompt|output] has kind = "trace"',
    ),
    (
        replaced('[gpu]\npreset = "a100-80gb"', '[gpu]\npreset = "l4"\n[model.x]'),
        "s.toml: model.x: unknown key 'x'; valid keys here: preset, config, kv_dtype, "
        "tensor_parallel, weight_dtype, data_parallel, expert_parallel",
    ),
    (
        replaced('preset = "llama-2-7b"', 'preset = "llama-2-70b"'),
        "s.toml: systems[0].gpu_memory_utilization: no memory left for the KV cache: "
        "llama-2-70b weights take 128.5 GiB per GPU and a100-80gb x 0.9 less 1.28 GiB of "
        "activations is 71.3 GiB; use a bigger GPU, more tensor_parallel, or set num_kv_blocks",
    ),
    (
        'name = "x"\nseed = 1 2\n',
        "s.toml: not valid TOML: Expected newline or end of document after a statement "
        "(at line 2, column 10)",
    ),
    (
        "[model]\n[model]\n",
        "s.toml: not valid TOML: Cannot declare ('model',) twice (at line 2, column 7)",
    ),
    ("", "s.toml: model: required table [model] is missing"),
]


@pytest.mark.parametrize(("text", "message"), BAD_FILES)
def test_exact_messages(mini: Path, text: str, message: str) -> None:
    got = error_of(write(mini.parent, text))
    assert got == message or (not message.startswith("s.toml") and got.endswith(message))
    assert "\n" not in got


def test_non_utf8_bytes(mini: Path) -> None:
    mini.write_bytes(b'name = "x"\n\xff\xfe\n')
    assert error_of(mini) == "s.toml: not UTF-8 text (byte 0xff at line 2)"


def test_deep_nesting_and_huge_integers_are_clean_errors(mini: Path) -> None:
    mini.write_text("a = " + "[" * 5000 + "]" * 5000)
    assert error_of(mini) == "s.toml: not valid TOML: arrays or tables nested too deeply"
    mini.write_text("seed = " + "9" * 5000)
    assert error_of(mini).startswith("s.toml: not valid TOML: Exceeds the limit")


def test_a_directory_or_unreadable_path_is_an_input_error(mini: Path) -> None:
    assert "no such scenario file or built-in" in error_of(mini.parent)


def test_parse_scenario_without_a_file_names_the_scenario() -> None:
    with pytest.raises(InputError, match=r"^<scenario>: a scenario must be a TOML table, got"):
        parse_scenario([1, 2], None)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^<scenario>: model: required table \[model\]"):
        parse_scenario({}, None)


def test_the_scenario_as_run_lists_its_overrides(mini: Path) -> None:
    assert scenario_to_toml_text(mini) == MINIMAL
    text = scenario_to_toml_text(mini, ["seed=3"])
    assert text.startswith("# pagesim: overrides applied on top of this file:\n#   seed=3\n")
    assert text.endswith(MINIMAL)


def test_the_readme_schema_example_is_a_valid_scenario() -> None:
    readme = (BUILTIN_DIR / "README.md").read_text()
    block = re.search(r"```toml\n(.*?)```", readme, re.S)
    assert block is not None
    scenario = parse_scenario(tomllib.loads(block[1]), BUILTIN_DIR / "example.toml")
    assert isinstance(scenario, Scenario)
    assert set(tomllib.loads(block[1])) == set(sc.SCHEMA)  # every top-level key documented


COMBINATIONS = [
    (
        replaced(
            'reservation = "pow2"', 'policy = "static"\nstatic_batch_size = 8\nmax_num_seqs = 4'
        ).replace('policy = "orca"\n', ""),
        "systems[1].static_batch_size: 8 exceeds max_num_seqs 4",
    ),
    (
        replaced("num_requests = 10", 'num_requests = 10\nsampling = "beam"\nnum_seqs = 4')
        + "max_num_seqs = 2\n",
        "systems[1].max_num_seqs: 2 is below workload.num_seqs 4: no request could ever run",
    ),
    (
        replaced(
            "num_requests = 10", 'num_requests = 10\nsampling = "parallel"\nnum_seqs = 2'
        ).replace('reservation = "pow2"', 'preemption = "auto"\nswap_space_gib = 0.0'),
        "systems[1].swap_space_gib: must be > 0: preemption 'auto' swaps",
    ),
    (
        MINIMAL + "[[workload.prefix_groups]]\nnum_tokens = 100\nfraction = 0.7\n"
        "[[workload.prefix_groups]]\nnum_tokens = 10\nfraction = 0.4\n",
        "workload.prefix_groups: the groups' fractions add up to more than 1",
    ),
    (
        MINIMAL + "[[workload.prefix_groups]]\nnum_tokens = 5000\nfraction = 0.5\n",
        "workload.prefix_groups[0].num_tokens: must be in [1, 4096], got 5000",
    ),
    (
        MINIMAL + "[[workload.requests]]\nprompt_len = 3\noutput_len = 4\n",
        "workload.num_requests: not used with [[workload.requests]], which replace the generators",
    ),
    (
        replaced("num_requests = 10", "num_requests = 10\ntrace_offset = 3"),
        "workload.trace_offset: only used with workload.trace",
    ),
    (
        replaced('kind = "poisson"\nrate_per_s = 2.0', 'kind = "burst"\nrate_per_s = 2.0'),
        'workload.arrival.rate_per_s: not used with kind = "burst"',
    ),
    (
        replaced(
            'kind = "poisson"\nrate_per_s = 2.0', 'kind = "poisson"\nrate_per_s = 2.0\ncv = 2'
        ),
        'workload.arrival.cv: only used with kind = "gamma", not "poisson"',
    ),
    (
        replaced('kind = "poisson"\nrate_per_s = 2.0', 'kind = "gamma"'),
        "workload.arrival.rate_per_s: required key is missing (a number in (0, 1000000])",
    ),
    (
        replaced("low = 8\nhigh = 32", "low = 8\nhigh = 4"),
        "workload.output.high: must be in [8, 1000000000], got 4",
    ),
    (
        replaced('kind = "fixed"\nvalue = 64', 'kind = "trace"'),
        'workload.prompt.kind: kind = "trace" needs workload.trace (the trace to read)',
    ),
    (
        replaced(
            'kind = "fixed"\nvalue = 64', 'kind = "empirical"\ntrace = "azure-conv"\npath = "x"'
        ),
        "workload.prompt: kind = \"empirical\" needs exactly one of 'trace' (a built-in trace: "
        "azure-conv, azure-code, arxiv-summarization) or 'path' (a CSV file), and a 'column'",
    ),
    (
        replaced(
            'kind = "fixed"\nvalue = 64',
            'kind = "empirical"\ntrace = "arxiv-summarization"\ncolumn = "pd_ratio"',
        ),
        f"workload.prompt.column: '{sc.BUILTIN_TRACES['arxiv-summarization']}' column "
        "'pd_ratio': line 2 holds "
        "'69.85185185185185', not a whole number of tokens from 1 to 1,000,000,000",
    ),
    (
        replaced("num_requests = 10", 'trace = "azure-code"\ntrace_offset = 8819').replace(
            'kind = "poisson"\nrate_per_s = 2.0', 'kind = "trace"'
        ),
        f"workload.trace_offset: must be < 8819, the rows of '{sc.BUILTIN_TRACES['azure-code']}'",
    ),
    (
        replaced('preset = "llama-2-7b"', 'preset = "llama-2-7b"\ntensor_parallel = 3'),
        "model.tensor_parallel: 3 does not divide llama-2-7b's 32 heads",
    ),
    (
        MINIMAL + "[stop]\nmax_time_s = 10\nwarmup_s = 10\n",
        "stop.warmup_s: must be < max_time_s (10)",
    ),
    (
        MINIMAL
        + '[sweep]\naxes = [{ path = "seed", values = [1] }, { path = "seed", values = [2] }]\n',
        "sweep.axes[1].path: 'seed' is already an axis",
    ),
    (
        MINIMAL + '[sweep]\naxes = [{ path = "sweep.axes", values = [1] }]\n',
        "sweep.axes[0].path: a sweep axis cannot change [sweep] itself",
    ),
    (
        MINIMAL + '[sweep]\naxes = [{ path = "seed", values = [] }]\n',
        "sweep.axes[0].values: expected a non-empty array of values, got array []",
    ),
    (
        MINIMAL + "[sweep]\naxes = [" + '{ path = "seed", values = [1] }, ' * 3 + "]\n",
        "sweep.axes: at most 2 axes, got 3",
    ),
    (
        MINIMAL + '[sweep]\naxes = [{ path = "systems.enable_prefix_cache", values = [true] }]\n',
        "sweep.axes[0].values[0]: systems.enable_prefix_cache = true: "
        "systems[1].enable_prefix_cache: prefix caching needs a paged policy (vllm-v0, vllm-v1); "
        "the policy is 'orca'",
    ),
]


@pytest.mark.parametrize(("text", "message"), COMBINATIONS)
def test_combinations_that_cannot_work(mini: Path, text: str, message: str) -> None:
    assert error_of(write(mini.parent, text, "combo.toml")) == f"combo.toml: {message}"


TRACES = [
    ("", "'t.csv' is empty"),
    ("arrived_at,num_prefill_tokens,num_decode_tokens\n", "'t.csv' has no rows"),
    (
        "arrived_at,num_prefill_tokens\n0,5\n",
        "'t.csv' has no column 'num_decode_tokens'; it has: arrived_at, num_prefill_tokens",
    ),
    (
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\n1,abc,5\n",
        "'t.csv' column 'num_prefill_tokens': line 3 holds 'abc', "
        "not a whole number of tokens from 1 to 1,000,000,000",
    ),
    (
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\n1,5,0\n",
        "'t.csv' column 'num_decode_tokens': line 3 holds '0', "
        "not a whole number of tokens from 1 to 1,000,000,000",
    ),
    (
        "arrived_at,num_prefill_tokens,num_decode_tokens\n1,5,5\n0.5,5,5\n",
        "'t.csv' column 'arrived_at': line 3 holds '0.5', not a finite time at or after the "
        "previous row's",
    ),
    (
        "arrived_at,num_prefill_tokens,num_decode_tokens\n1,5\n",
        "'t.csv' line 2 has 2 fields, the header 3",
    ),
]


@pytest.mark.parametrize(("csv_text", "problem"), TRACES)
def test_trace_file_problems(mini: Path, csv_text: str, problem: str) -> None:
    (mini.parent / "t.csv").write_text(csv_text)
    text = replaced("num_requests = 10", 'trace = "t.csv"').replace(
        'kind = "poisson"\nrate_per_s = 2.0', 'kind = "trace"'
    )
    assert (
        error_of(write(mini.parent, text, "trace.toml")) == f"trace.toml: workload.trace: {problem}"
    )


def test_trace_rows_are_counted_against_num_requests(mini: Path) -> None:
    (mini.parent / "t.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\n")
    text = replaced('kind = "poisson"\nrate_per_s = 2.0', 'kind = "trace"')
    text = text.replace("num_requests = 10", 'trace = "t.csv"\nnum_requests = 2')
    assert error_of(write(mini.parent, text, "trace.toml")) == (
        "trace.toml: workload.num_requests: 2 requests from row 0 need 2 rows; 't.csv' has 1"
    )


@pytest.mark.parametrize(
    ("config_text", "problem"),
    [
        ("{", "model.config: cfg.json: not valid JSON (line 1): Expecting property name"),
        ("[1]", "model.config: cfg.json: a config.json must hold a JSON object"),
        ('{"num_hidden_layers": 0}', "model.config: cfg.json: field 'num_hidden_layers' must be"),
    ],
)
def test_model_config_problems(mini: Path, config_text: str, problem: str) -> None:
    (mini.parent / "cfg.json").write_text(config_text)
    text = replaced('preset = "llama-2-7b"', 'config = "cfg.json"')
    assert error_of(write(mini.parent, text, "m.toml")).startswith(f"m.toml: {problem}")


def test_model_needs_exactly_one_of_preset_and_config(mini: Path) -> None:
    text = replaced('preset = "llama-2-7b"', 'preset = "llama-2-7b"\nconfig = "c.json"')
    assert error_of(write(mini.parent, text, "m.toml")).startswith(
        "m.toml: model: give exactly one of 'preset' (a catalog model: llama-2-7b, "
    )
    text = replaced('preset = "llama-2-7b"', 'config = "missing.json"')
    assert error_of(write(mini.parent, text, "m.toml")) == (
        "m.toml: model.config: no such model config file 'missing.json'"
    )


def test_system_readers_cover_every_system_config_field() -> None:
    from dataclasses import fields

    from pagesim.simulator.core.config import SystemConfig

    names = [f.name for f in fields(SystemConfig)]
    assert ["name", *sc.SCHEMA["defaults"]] == names
    assert list(sc.SCHEMA["systems"][0]) == names


def test_keys_that_are_not_bare_are_quoted_and_messages_stay_on_one_line() -> None:
    raw = tomllib.loads(MINIMAL)
    raw["model"]["a\nb"] = 1
    with pytest.raises(InputError) as info:
        parse_scenario(raw, None)
    assert str(info.value).startswith('<scenario>: model."a\\nb": unknown key')


def test_parallel_samples_of_their_own_lengths(mini: Path) -> None:
    """workload.sample_lengths = "independent": each of n samples draws its own length from
    the output distribution (the request's output_len is the longest); only V1's fan-out runs
    them apart, so other policies are refused with the way out, and beams cannot use it."""
    text = (
        MINIMAL.replace(
            "num_requests = 10",
            'num_requests = 10\nsampling = "parallel"\nnum_seqs = 3\n'
            'sample_lengths = "independent"',
        )
        .replace('policy = "vllm-v0"', 'policy = "vllm-v1"')
        .replace('policy = "orca"\nreservation = "pow2"\n', "")
    )
    scenario = load_scenario(write(mini.parent, text, "v1.toml"))
    assert scenario.workload.sample_lengths is SampleLengths.INDEPENDENT
    requests = list(iter_requests(scenario.workload, 4096, np.random.default_rng(0)))
    assert all(len(r.sample_output_lens) == 3 for r in requests)
    assert all(r.output_len == max(r.sample_output_lens) for r in requests)
    assert all(8 <= n <= 32 for r in requests for n in r.sample_output_lens)
    assert any(len(set(r.sample_output_lens)) > 1 for r in requests)
    result = simulate(scenario, check_invariants=True)
    assert list(result.requests["num_output_tokens"]) == [
        sum(r.sample_output_lens) for r in requests
    ]
    assert parse_scenario(tomllib.loads(describe_scenario(scenario)), scenario.source) == scenario

    v0 = write(mini.parent, text.replace('policy = "vllm-v1"', 'policy = "vllm-v0"'), "v0.toml")
    assert 'workload.sample_lengths = "independent" needs policy "vllm-v1"' in error_of(v0)
    beams = write(mini.parent, text.replace('"parallel"', '"beam"'), "beam.toml")
    assert '"independent" needs sampling = "parallel"' in error_of(beams)

"""Scenario files: bad keys, values and bytes get one exact, actionable message on one line."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from scenario_helpers import MINIMAL, error_of, replaced, write

from pagesim.simulator.core.errors import InputError
from pagesim.simulator.scenario.load import parse_scenario

BAD_FILES = [
    (
        replaced('name = "b"', 'name = "b"\nblok_size = 4'),
        "s.toml: systems[1].blok_size: unknown key 'blok_size' (did you mean 'block_size'?); "
        "valid keys here: name, policy, block_size, max_num_seqs, max_num_batched_tokens, "
        "max_prefill_chunk, reservation, contiguous_allocator, preemption, victim, admission, "
        "enable_prefix_cache, watermark, gpu_memory_utilization, activation_reserve_gib, "
        "swap_space_gib, static_batch_size, static_batch_timeout_s, num_kv_blocks, execution, "
        "defaults, speculative, hybrid_kv_cache_manager, vllm_version, scheduler_reserve_full_isl, "
        "kv_offload, pipeline_parallel, pipeline_layer_partition, tensor_parallel, weight_dtype, "
        "kv_dtype",
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
        "h200-sxm, l40s, l4, rtx-4090, a40, b200, gb200, b300, mi300x, mi325x, mi355x",
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
        "(static, orca); the policy is 'vllm-v0'",
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
        replaced(
            'policy = "orca"\nreservation = "pow2"',
            'policy = "vllm-v0"\npreemption = "swap"\nswap_space_gib = 0',
        ),
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


def test_keys_that_are_not_bare_are_quoted_and_messages_stay_on_one_line() -> None:
    raw = tomllib.loads(MINIMAL)
    raw["model"]["a\nb"] = 1
    with pytest.raises(InputError) as info:
        parse_scenario(raw, None)
    assert str(info.value).startswith('<scenario>: model."a\\nb": unknown key')

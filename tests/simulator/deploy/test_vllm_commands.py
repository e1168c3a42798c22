"""The vLLM command lines of a configuration (simulator/deploy/): the expected lines of every
built-in scenario's systems in every release, every flag in that release's table of vLLM's own
flags, and knob by knob what each sets or lists.

The expected lines live in tests/data/vllm_commands.json; after a reviewed change, rewrite it
with `PAGESIM_UPDATE_VLLM_COMMANDS=1 python -m pytest tests/simulator/deploy -k expected`.
They were parsed by vLLM's own parsers of each release (.ci/vllm_parser.py) when written.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from pagesim.simulator.core.catalog import KVDtype
from pagesim.simulator.core.config import (
    AdmissionOrder,
    Policy,
    PreemptionPolicy,
    Scenario,
    SystemConfig,
)
from pagesim.simulator.deploy.commands import deployment, deployments, flags_of, shell_text
from pagesim.simulator.deploy.eras import Era, era_flags, era_of, unknown_flags
from pagesim.simulator.scenario.load import list_builtin, load_scenario, resolve_scenario

EXPECTED = Path(__file__).parents[2] / "data" / "vllm_commands.json"
V1_ERAS = (Era.V0_11_0, Era.V0_33_0, Era.V0_34_0)


def _all_lines() -> dict[str, dict[str, dict[str, dict[str, object]]]]:
    """scenario -> system -> release -> {serve: [argv...], bench: argv, unflagged: [...]}."""
    found: dict[str, dict[str, dict[str, dict[str, object]]]] = {}
    for name, _ in list_builtin():
        scenario = load_scenario(resolve_scenario(name))
        for era in V1_ERAS:
            for done in deployments(scenario, era):
                if done.era is None:
                    continue
                entry = {
                    "serve": [["vllm", *line.argv] for line in done.serve],
                    "bench": list(done.bench),
                    "unflagged": list(done.unflagged),
                }
                found.setdefault(name, {}).setdefault(done.system, {})[done.era.value] = entry
    return found


@pytest.fixture(scope="module")
def all_lines() -> dict[str, dict[str, dict[str, dict[str, object]]]]:
    return _all_lines()


def test_every_built_in_systems_expected_command_lines(all_lines: dict) -> None:
    if os.environ.get("PAGESIM_UPDATE_VLLM_COMMANDS"):
        EXPECTED.write_text(json.dumps(all_lines, indent=1, sort_keys=True) + "\n")
    assert json.loads(json.dumps(all_lines)) == json.loads(EXPECTED.read_text())


def test_every_flag_written_is_one_of_its_releases_flags() -> None:
    checked = 0
    for name, _ in list_builtin():
        scenario = load_scenario(resolve_scenario(name))
        for era in V1_ERAS:
            for done in deployments(scenario, era):
                for what, argv, known in flags_of(done):
                    assert unknown_flags(argv, known) == [], (name, done.system, what)
                    checked += 1
    assert checked > 60


def test_the_flag_table_holds_each_releases_own_spelling() -> None:
    # prefix caching off: absent in v0.6.4, --no-enable- in v0.11, --disable- from v0.33
    assert "--enable-prefix-caching" in era_flags(Era.V0_6_4).serve
    assert "--no-enable-prefix-caching" not in era_flags(Era.V0_6_4).serve
    assert "--no-enable-prefix-caching" in era_flags(Era.V0_11_0).serve
    assert "--disable-prefix-caching" in era_flags(Era.V0_34_0).serve
    assert "--swap-space" in era_flags(Era.V0_6_4).serve
    assert "--swap-space" not in era_flags(Era.V0_34_0).serve
    assert era_flags(Era.V0_6_4).bench_tool == "python benchmarks/benchmark_serving.py"
    assert "--timed-trace-sec-multiplier" in era_flags(Era.V0_33_0).bench
    assert "--timed-trace-sec-multiplier" not in era_flags(Era.V0_11_0).bench


def test_unknown_flags_names_what_a_release_lacks_and_skips_values() -> None:
    known = frozenset({"--a", "--b"})
    assert unknown_flags(["serve", "m", "--a", "-3", "--b=1", "--c", "x"], known) == ["--c"]


TINY = """
name = "tiny"
[model]
preset = "llama-2-7b"
[gpu]
preset = "a100-80gb"
[workload]
num_requests = 50
[workload.arrival]
kind = "gamma"
rate_per_s = 4.0
cv = 2.0
[workload.prompt]
kind = "uniform"
low = 50
high = 150
[workload.output]
kind = "uniform"
low = 50
high = 150
[[systems]]
name = "s"
policy = "vllm-v1"
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    path = tmp_path_factory.mktemp("deploy") / "tiny.toml"
    path.write_text(TINY)
    return load_scenario(path)


def _with(scenario: Scenario, policy: Policy = Policy.VLLM_V1, **knobs: object):  # type: ignore[no-untyped-def]
    system = SystemConfig("s", policy, **knobs)  # type: ignore[arg-type]
    return replace(scenario, systems=(system,)), system


def _options(argv: tuple[str, ...] | list[str]) -> dict[str, list[str]]:
    """Each flag of argv with the values after it."""
    found: dict[str, list[str]] = {}
    flag = None
    for word in argv:
        if word.startswith("--"):
            flag = word
            found[flag] = []
        elif flag is not None:
            found[flag].append(word)
    return found


def test_a_v1_system_sets_its_resolved_knobs_and_lists_the_rest(tiny: Scenario) -> None:
    scenario, system = _with(
        tiny,
        max_num_seqs=32,
        max_num_batched_tokens=1024,
        max_prefill_chunk=256,
        block_size=32,
        enable_prefix_cache=False,
        admission=AdmissionOrder.PRIORITY,
        watermark=0.02,
    )
    done = deployment(replace(scenario, kv_dtype=KVDtype.FP8), system, v1_era=Era.V0_11_0)
    argv = list(done.serve[0].argv)
    assert argv[:2] == ["serve", "meta-llama/Llama-2-7b-hf"]
    pairs = _options(argv)
    assert pairs["--max-num-seqs"] == ["32"] and pairs["--max-num-batched-tokens"] == ["1024"]
    assert pairs["--long-prefill-token-threshold"] == ["256"]
    assert pairs["--block-size"] == ["32"] and pairs["--kv-cache-dtype"] == ["fp8"]
    assert pairs["--scheduling-policy"] == ["priority"]
    assert "--no-enable-prefix-caching" in argv and "--swap-space" not in argv
    assert any(item.startswith("watermark = 0.02") for item in done.unflagged)
    assert "--no-async-scheduling" in argv  # v0.11.0 runs V1 without async scheduling
    newer = deployment(scenario, system, v1_era=Era.V0_34_0).serve[0].argv
    # v0.34.0's defaults: async scheduling (from v0.14.0), whole-prompt admission (v0.19.0)
    assert "--disable-prefix-caching" in newer and "--async-scheduling" in newer
    assert "--scheduler-reserve-full-isl" in newer


def test_a_v0_system_is_written_for_v0_6_4_with_its_preemption_and_swap_space(
    tiny: Scenario,
) -> None:
    scenario, system = _with(
        tiny, Policy.VLLM_V0, preemption=PreemptionPolicy.SWAP, swap_space_gib=16, watermark=0.05
    )
    done = deployment(scenario, system)
    assert done.era is Era.V0_6_4 and done.release == "vLLM v0.6.4"
    argv = " ".join(done.serve[0].argv)
    assert "--preemption-mode swap" in argv and "--swap-space 16" in argv
    assert "--enable-chunked-prefill False" in argv and "prefix" not in argv
    assert done.bench[:2] == ("python", "benchmarks/benchmark_serving.py")
    assert any(item.startswith("watermark = 0.05") for item in done.unflagged)


def test_static_batching_and_orca_have_no_vllm_command(tiny: Scenario) -> None:
    for policy in (Policy.STATIC, Policy.ORCA):
        scenario, system = _with(tiny, policy)
        done = deployment(scenario, system)
        assert era_of(system) is None and done.serve == () and done.bench == ()
        assert done.release == "no vLLM equivalent"


def test_gamma_arrivals_set_burstiness_and_uniform_lengths_are_exact(tiny: Scenario) -> None:
    scenario, system = _with(tiny)
    new = _options(deployment(scenario, system, v1_era=Era.V0_34_0).bench)
    assert new["--request-rate"] == ["4"] and new["--burstiness"] == ["0.25"]  # 1 / cv^2
    assert "--goodput" not in new and new["--num-prompts"] == ["50"]  # no SLO: no goodput
    # a uniform in [L(1 - r), L(1 + r)] with the drawn mean and spread (50..150 -> ~100 +- 50)
    length, ratio = int(new["--random-input-len"][0]), float(new["--random-range-ratio"][0])
    assert 90 <= length <= 110 and 0.4 <= ratio <= 0.6
    v0_scenario, v0_system = _with(tiny, Policy.VLLM_V0)
    old = deployment(v0_scenario, v0_system)
    assert "--burstiness" not in old.bench
    assert any(item.startswith("gamma arrivals (cv 2)") for item in old.unflagged)


def test_the_mooncake_trace_replays_as_a_timed_trace_from_v0_33(tmp_path: Path) -> None:
    text = """
name = "mooncake"
[model]
preset = "llama-3-8b"
[gpu]
preset = "h100-sxm"
[workload.mooncake]
trace = "mooncake-conversation"
num_requests = 20
time_scale = 2.0
[[systems]]
name = "v1"
policy = "vllm-v1"
"""
    path = tmp_path / "mooncake.toml"
    path.write_text(text)
    loaded = load_scenario(path)
    new = " ".join(deployment(loaded, loaded.systems[0], v1_era=Era.V0_34_0).bench)
    assert "--dataset-name timed_trace --dataset-path mooncake_conversation.jsonl" in new
    assert "--timed-trace-chunk-hash-size 512 --timed-trace-sec-multiplier 0.0005" in new
    old = deployment(loaded, loaded.systems[0], v1_era=Era.V0_11_0)
    assert "--dataset-name random" in " ".join(old.bench)
    assert any("Mooncake" in item for item in old.unflagged)


def test_shell_text_keeps_a_flag_with_its_values_and_quotes_json() -> None:
    text = shell_text(
        ["vllm", "serve", "m", "--a", "1", "--goodput", "ttft:1", "tpot:2", "--j", '{"k":1}']
    )
    assert text.splitlines() == [
        "vllm serve m \\",
        "    --a 1 \\",
        "    --goodput ttft:1 tpot:2 \\",
        "    --j '{\"k\":1}'",
    ]

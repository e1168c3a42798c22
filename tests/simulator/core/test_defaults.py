"""Era defaults (core.defaults), each pinned the way the source it cites behaves (FACTS.md,
"vLLM behaviour by version")."""

from __future__ import annotations

from pathlib import Path

import pytest
from sim_helpers import poisson_workload, scenario, system

from pagesim.simulator.core.catalog import GIB, get_gpu, get_model
from pagesim.simulator.core.config import DefaultsMode, Policy, PreemptionPolicy
from pagesim.simulator.core.defaults import driver_memory_bytes, era_notes, resolve_system
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.request import SamplingKind
from pagesim.simulator.engine import simulate
from pagesim.simulator.scenario.load import load_scenario
from pagesim.simulator.scenario.table import ScenarioError

LLAMA3 = get_model("llama-3-8b")


@pytest.mark.parametrize(
    ("gpu", "mode", "tokens", "seqs"),
    [
        # vLLM v0.11.0 vllm/engine/arg_utils.py: >= 70 GiB and not an A100 -> the larger set.
        ("h100-sxm", DefaultsMode.SERVER, 8192, 1024),
        ("h200-sxm", DefaultsMode.SERVER, 8192, 1024),
        ("h100-sxm", DefaultsMode.OFFLINE, 16384, 1024),
        ("a100-80gb", DefaultsMode.SERVER, 2048, 256),  # an A100, though 80 GB
        ("a100-80gb", DefaultsMode.OFFLINE, 8192, 256),
        ("l40s", DefaultsMode.SERVER, 2048, 256),  # < 70 GiB
    ],
)
def test_v1_token_budget_and_sequences_follow_the_gpu(
    gpu: str, mode: DefaultsMode, tokens: int, seqs: int
) -> None:
    resolved = resolve_system(system(Policy.VLLM_V1, defaults=mode), LLAMA3, get_gpu(gpu))
    assert resolved.system.max_num_batched_tokens == tokens
    assert resolved.system.max_num_seqs == seqs
    assert "arg_utils.py" in resolved.sources["max_num_batched_tokens"]


def test_v1_prefix_caching_on_no_watermark_recompute_only() -> None:
    resolved = resolve_system(system(Policy.VLLM_V1), LLAMA3, get_gpu("h100-sxm")).system
    assert resolved.enable_prefix_cache is True
    assert resolved.watermark == 0.0
    assert resolved.preemption is PreemptionPolicy.RECOMPUTE


def test_v0_defaults() -> None:
    """vLLM 0.5.4 vllm/config.py SchedulerConfig: without chunked prefill the token cap is
    max(max_model_len, 2048); block manager watermark 0.01; preemption mode None (recompute
    single-sequence groups, swap the others); prefix caching off."""
    llama2 = resolve_system(system(Policy.VLLM_V0), get_model("llama-2-7b"), get_gpu("a100-80gb"))
    assert llama2.system.max_num_batched_tokens == 4096
    opt = resolve_system(system(Policy.VLLM_V0), get_model("opt-13b"), get_gpu("a100-80gb"))
    assert opt.system.max_num_batched_tokens == 2048  # OPT's 2,048 tokens: the floor applies
    assert opt.system.watermark == 0.01 and opt.system.max_num_seqs == 256
    assert opt.system.preemption is PreemptionPolicy.AUTO
    assert opt.system.enable_prefix_cache is False


def test_a_knob_set_by_the_scenario_is_kept_and_has_no_default_source() -> None:
    resolved = resolve_system(
        system(Policy.VLLM_V1, max_num_seqs=64, enable_prefix_cache=False),
        LLAMA3,
        get_gpu("h100-sxm"),
    )
    assert resolved.system.max_num_seqs == 64 and resolved.system.enable_prefix_cache is False
    assert "max_num_seqs" not in resolved.sources
    assert "enable_prefix_cache" not in resolved.sources
    assert resolved.sources.keys() >= {"max_num_batched_tokens", "watermark", "preemption"}


def test_driver_memory() -> None:
    """vLLM applies gpu_memory_utilization to what the driver reports (FACTS.md: H100 about
    79.2 GiB, H200 about 140 GiB); other presets: an estimate, 99% of the marketed GiB."""
    assert driver_memory_bytes(get_gpu("h100-sxm")) == int(79.2 * GIB)
    assert driver_memory_bytes(get_gpu("h200-sxm")) == int(140 * GIB)
    assert driver_memory_bytes(get_gpu("a100-40gb")) == int(40 * GIB * 79.2 / 80)


def test_activation_reserve_grows_with_the_token_budget_and_the_vocabulary() -> None:
    h100 = get_gpu("h100-sxm")
    small = resolve_system(system(Policy.VLLM_V1, max_num_batched_tokens=2048), LLAMA3, h100)
    big = resolve_system(system(Policy.VLLM_V1, max_num_batched_tokens=8192), LLAMA3, h100)
    assert big.system.activation_reserve_gib > small.system.activation_reserve_gib
    llama2 = resolve_system(
        system(Policy.VLLM_V1, max_num_batched_tokens=8192), get_model("llama-2-7b"), h100
    )  # same hidden size, 32,000 words of vocabulary instead of 128,256
    assert llama2.system.activation_reserve_gib < big.system.activation_reserve_gib


def test_v0_token_cap_below_the_model_length_is_refused_as_vllm_v0_refuses_it(
    tmp_path: Path,
) -> None:
    """vLLM 0.5.4 SchedulerConfig._verify_args: max_num_batched_tokens < max_model_len without
    chunked prefill raises at start. pagesim used to raise the cap silently (repro 15)."""
    s = scenario(poisson_workload(3, 1.0), system(Policy.VLLM_V0, max_num_batched_tokens=8))
    with pytest.raises(InputError, match="8 is below the model's maximum length 4096"):
        simulate(s)
    path = tmp_path / "s.toml"
    path.write_text(
        'name = "cap"\n[model]\npreset = "llama-2-7b"\n[gpu]\npreset = "a100-80gb"\n'
        '[workload]\nnum_requests = 3\n[workload.arrival]\nkind = "burst"\n'
        '[workload.prompt]\nkind = "fixed"\nvalue = 300\n[workload.output]\nkind = "fixed"\n'
        'value = 4\n[[systems]]\nname = "v0"\npolicy = "vllm-v0"\nmax_num_batched_tokens = 8\n'
    )
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: systems[0].max_num_batched_tokens: 8 is below")
    assert "set it to at least 4096, or use vllm-v1" in message


def test_what_vllm_no_longer_has_is_labelled_where_a_run_shows_it() -> None:
    """Issue 12, item 2: swap preemption, copy-on-write forks and the watermark stay available,
    labelled as historical (V0 had them) or as a pagesim extension (V1 with swap), in each
    run's provenance (and so in its report) and in `scenarios show --resolved`."""
    model, gpu = get_model("llama-2-7b"), get_gpu("a100-80gb")

    def notes(policy: Policy, sampling: SamplingKind = SamplingKind.SINGLE, **knobs: object) -> str:
        return " | ".join(
            era_notes(resolve_system(system(policy, **knobs), model, gpu).system, sampling)
        )

    assert notes(Policy.VLLM_V1) == ""  # V1 as it is: nothing to label
    assert notes(Policy.VLLM_V1, preemption=PreemptionPolicy.SWAP).startswith(
        "pagesim extension: swap preemption under vllm-v1"
    )
    assert "v0.33.0" in notes(Policy.VLLM_V1, watermark=0.01)
    v0 = notes(Policy.VLLM_V0, SamplingKind.PARALLEL)
    assert v0.count("historical:") == 3 and "copy-on-write" in v0 and "watermark" in v0
    run = simulate(scenario(poisson_workload(3, 1.0), system(Policy.VLLM_V0)))
    assert run.provenance["era_notes"] == [
        "historical: swap preemption (vLLM V0; V1 preempts by recompute only)",
        "historical: the admission watermark (vLLM V0; V1 has none by default)",
    ]

"""Era defaults (core.defaults), each pinned the way the source it cites behaves (docs/facts.md,
"vLLM behaviour by version")."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from sim_helpers import poisson_workload, scenario, system

from pagesim.simulator.core.catalog import GIB, get_gpu, get_model
from pagesim.simulator.core.config import (
    DefaultsMode,
    Policy,
    PreemptionPolicy,
    SpecMethod,
    SpeculativeConfig,
    VllmVersion,
)
from pagesim.simulator.core.defaults import driver_memory_bytes, era_notes, resolve_system
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.request import SamplingKind
from pagesim.simulator.core.vllm_eras import async_scheduling_default
from pagesim.simulator.engine import simulate
from pagesim.simulator.scenario.load import load_scenario
from pagesim.simulator.scenario.table import ScenarioError

LLAMA3 = get_model("llama-3-8b")


@pytest.mark.parametrize(
    ("gpu", "mode", "tokens", "seqs"),
    [
        # vLLM vllm/engine/arg_utils.py, v0.11.0 and v0.34.0 alike here: >= 70 GiB and not an
        # A100 -> the larger set.
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
    """Row 2. vLLM v0.11.0 vllm/engine/arg_utils.py EngineArgs._set_default_args: `if
    device_memory >= 70 * GiB_bytes and "a100" not in device_name` -> {LLM_CLASS: 16384,
    OPENAI_API_SERVER: 8192} tokens and 1024 sequences; else {8192, 2048} and 256."""
    resolved = resolve_system(system(Policy.VLLM_V1, defaults=mode), LLAMA3, get_gpu(gpu))
    assert resolved.system.max_num_batched_tokens == tokens
    assert resolved.system.max_num_seqs == seqs
    assert "arg_utils.py" in resolved.sources["max_num_batched_tokens"]


def test_v1_prefix_caching_on_no_watermark_recompute_only() -> None:
    """Rows 3 and 4 (their step-by-step stories: tests/simulator/policies/test_vllm_rows.py and
    test_vllm_v1.py test_no_watermark). vLLM v0.11.0 vllm/engine/arg_utils.py
    EngineArgs._set_default_args: "V1 uses chunked prefills and prefix caching by default";
    v1/core/kv_cache_manager.py allocate_slots has no watermark; v1/core/sched/scheduler.py
    _preempt_request frees the victim's blocks (no swap)."""
    resolved = resolve_system(system(Policy.VLLM_V1), LLAMA3, get_gpu("h100-sxm")).system
    assert resolved.enable_prefix_cache is True
    assert resolved.watermark == 0.0
    assert resolved.preemption is PreemptionPolicy.RECOMPUTE


def test_v0_defaults() -> None:
    """Row 13. vLLM v0.5.4 vllm/config.py SchedulerConfig: without chunked prefill the token cap is
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
    """Row 12. vLLM v0.11.0 v1/worker/gpu_worker.py Worker.determine_available_memory applies
    gpu_memory_utilization to the total the driver reports (torch.cuda.mem_get_info; docs/facts.md:
    H100 about 79.2 GiB, H200 about 140 GiB); other presets: an estimate, 99% of the marketed
    GiB. The whole capacity formula: tests/simulator/test_engine.py
    test_capacity_from_gpu_memory."""
    assert driver_memory_bytes(get_gpu("h100-sxm")) == int(79.2 * GIB)
    assert driver_memory_bytes(get_gpu("h200-sxm")) == int(140 * GIB)
    assert driver_memory_bytes(get_gpu("a100-40gb")) == int(40 * GIB * 79.2 / 80)


def test_activation_reserve_grows_with_the_token_budget_and_the_vocabulary() -> None:
    """Row 12. vLLM v0.11.0 v1/worker/gpu_worker.py determine_available_memory subtracts the
    peak of a profiling run (gpu_model_runner.py profile_run: a forward pass of
    max_num_batched_tokens tokens, then the sampler on max_num_seqs rows). pagesim's estimate
    (core.defaults.activation_reserve_bytes), to the byte: 2 bytes x (hidden + 3 x
    intermediate) per token, 2 x 4 bytes x vocabulary per sequence, 0.5 GiB besides."""
    h100 = get_gpu("h100-sxm")
    small = resolve_system(system(Policy.VLLM_V1, max_num_batched_tokens=2048), LLAMA3, h100)
    big = resolve_system(system(Policy.VLLM_V1, max_num_batched_tokens=8192), LLAMA3, h100)
    per_token = 2 * (4096 + 3 * 14336)  # Llama-3-8B
    logits = 2 * 4 * 128_256 * 1024  # max_num_seqs 1024 on an H100
    assert big.system.activation_reserve_gib * GIB == 8192 * per_token + logits + GIB // 2
    assert (big.system.activation_reserve_gib - small.system.activation_reserve_gib) * GIB == (
        (8192 - 2048) * per_token
    )
    llama2 = resolve_system(
        system(Policy.VLLM_V1, max_num_batched_tokens=8192), get_model("llama-2-7b"), h100
    )  # same hidden size, 32,000 words of vocabulary instead of 128,256, intermediate 11,008
    assert llama2.system.activation_reserve_gib * GIB == (
        8192 * 2 * (4096 + 3 * 11008) + 2 * 4 * 32_000 * 1024 + GIB // 2
    )


def test_v0_token_cap_below_the_model_length_is_refused_as_vllm_v0_refuses_it(
    tmp_path: Path,
) -> None:
    """Row 13. vLLM v0.5.4 vllm/config.py SchedulerConfig._verify_args: max_num_batched_tokens
    < max_model_len without chunked prefill raises ("is smaller than max_model_len") at
    start. pagesim used to raise the cap silently (repro 15)."""
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
    assert notes(Policy.VLLM_V1, watermark=0.01) == ""  # an option of vLLM's since v0.24.0
    old = notes(Policy.VLLM_V1, watermark=0.01, vllm_version=VllmVersion.V0_11)
    assert "an option from vLLM v0.24.0" in old
    v0 = notes(Policy.VLLM_V0, SamplingKind.PARALLEL)
    assert v0.count("historical:") == 3 and "copy-on-write" in v0 and "watermark" in v0
    run = simulate(scenario(poisson_workload(3, 1.0), system(Policy.VLLM_V0)))
    assert run.provenance["era_notes"] == [
        "historical: swap preemption (vLLM V0; V1 preempts by recompute only)",
        "historical: the admission watermark (vLLM V0; V1 has none by default)",
    ]


def test_a_v1_system_follows_the_newest_release_unless_told() -> None:
    """`vllm_version` unset: v0.34.0, the newest vLLM on PyPI (pip index versions vllm,
    2026-12-07), each default citing that release; v0.11.0 stays selectable. Only
    scheduler_reserve_full_isl differs among the knobs here (config/scheduler.py
    SchedulerConfig, True from v0.19.0; v0.11.0 has no such option)."""
    h100 = get_gpu("h100-sxm")
    new = resolve_system(system(Policy.VLLM_V1), LLAMA3, h100)
    assert new.system.vllm_version is VllmVersion.V0_34
    assert "newest vLLM release on PyPI" in new.sources["vllm_version"]
    assert new.system.scheduler_reserve_full_isl is True
    assert new.sources["max_num_batched_tokens"].startswith("vLLM v0.34.0 engine/arg_utils.py")
    old = resolve_system(system(Policy.VLLM_V1, vllm_version=VllmVersion.V0_11), LLAMA3, h100)
    assert "vllm_version" not in old.sources  # the scenario's
    assert old.system.scheduler_reserve_full_isl is False
    assert "from v0.19.0" in old.sources["scheduler_reserve_full_isl"]
    v0 = resolve_system(system(Policy.VLLM_V0), LLAMA3, h100).system
    assert (v0.vllm_version, v0.scheduler_reserve_full_isl) == (None, None)


@pytest.mark.parametrize(
    ("version", "mode", "tokens"),
    [
        (VllmVersion.V0_34, DefaultsMode.SERVER, 16384),
        (VllmVersion.V0_34, DefaultsMode.OFFLINE, 16384),
        (VllmVersion.V0_11, DefaultsMode.SERVER, 8192),
    ],
)
def test_from_v0_28_a_gpu_of_160_gib_gets_the_largest_budget(
    version: VllmVersion, mode: DefaultsMode, tokens: int
) -> None:
    """vllm/engine/arg_utils.py get_batch_defaults: `if device_memory >= 160 * GiB_bytes` ->
    16384 tokens in both usage contexts and 1024 sequences (from v0.28.0; a 192 GiB GPU here).
    v0.11.0 gives it the >= 70 GiB set."""
    b200 = replace(get_gpu("h200-sxm"), name="b200-like", memory_bytes=192 * GIB)
    knobs = system(Policy.VLLM_V1, defaults=mode, vllm_version=version)
    resolved = resolve_system(knobs, LLAMA3, b200).system
    assert (resolved.max_num_batched_tokens, resolved.max_num_seqs) == (tokens, 1024)


def test_defaulted_limits_are_capped_by_each_other() -> None:
    """vllm/engine/arg_utils.py: a defaulted max_num_batched_tokens is at most max_num_seqs x
    max_model_len (from v0.11.1: max_num_seqs 1 and Llama-2-7B's 4096 tokens cap the H100's
    server budget of 8192 at 4096), and a defaulted max_num_seqs at most the budget (every
    release)."""
    llama2, h100 = get_model("llama-2-7b"), get_gpu("h100-sxm")
    for version, tokens in ((VllmVersion.V0_34, 4096), (VllmVersion.V0_11, 8192)):
        knobs = system(Policy.VLLM_V1, max_num_seqs=1, vllm_version=version)
        resolved = resolve_system(knobs, llama2, h100)
        assert resolved.system.max_num_batched_tokens == tokens
    capped = resolve_system(system(Policy.VLLM_V1, max_num_batched_tokens=128), llama2, h100)
    assert capped.system.max_num_seqs == 128
    assert "at most max_num_batched_tokens 128" in capped.sources["max_num_seqs"]


def test_async_scheduling_by_release_and_drafter() -> None:
    """config/vllm.py VllmConfig.__post_init__: async scheduling on by default from v0.14.0
    unless a feature cannot take it: n-gram drafts never, a draft model from v0.28.0, EAGLE
    and MTP always. (The host-overhead model reads it: simulator/execution/overhead.py.)"""

    def spec(method: SpecMethod) -> SpeculativeConfig:
        return SpeculativeConfig(method, 2, acceptance_rate=0.5)

    assert async_scheduling_default(VllmVersion.V0_11, None) is False
    assert async_scheduling_default(VllmVersion.V0_34, None) is True
    assert async_scheduling_default(VllmVersion.V0_34, spec(SpecMethod.NGRAM)) is False
    assert async_scheduling_default(VllmVersion.V0_33, spec(SpecMethod.DRAFT_MODEL)) is True
    assert async_scheduling_default(VllmVersion.V0_34, spec(SpecMethod.EAGLE)) is True

"""Defaults that depend on the engine era, the GPU and the model, each with where it comes from.

A `SystemConfig` knob left unset (None) takes the value of its rule here when a run starts
(`resolve_system`); the run's provenance and `pagesim scenarios show --resolved` list every value
in force with its source. The eras pagesim models (docs/facts.md, "vLLM behaviour by version"):

    vllm-v0   the V0 engine of vLLM 0.5-0.6 (`vllm/core/`), without chunked prefill
    vllm-v1   the V1 engine (`vllm/v1/`) of the release in `vllm_version`: 0.11 (v0.11.0,
              Oct 2025), 0.33 or 0.34 (v0.34.0, the newest on PyPI and the default); what
              changed between them, and in which release, is core/vllm_eras.py
    static, orca   the textbook baselines of the vLLM paper (not vLLM): pagesim's own defaults

One era-dependent default is not here: the host's work per step (scheduling, input preparation,
sampling, output processing). It prices steps, so the execution model owns it; its one rule, its
figures and their sources (vllm-v0, static, orca: fitted to Vidur's measured CPU overheads; vllm-v1:
an estimate) are in simulator/execution/overhead.py (`host_overhead`), and a run's provenance
lists its value and source under `execution_model` and in `defaults_from` (HOST_OVERHEAD_KEY).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from pagesim.simulator.core.catalog import GIB, GPUSpec, ModelSpec
from pagesim.simulator.core.config import (
    NEWEST_VLLM,
    DefaultsMode,
    Policy,
    PreemptionPolicy,
    SampleLengths,
    Scenario,
    SystemConfig,
    VllmVersion,
)
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.request import SamplingKind
from pagesim.simulator.core.vllm_eras import (
    BIG_GPU_TIER_SINCE,
    CAPPED_DEFAULT_TOKENS_SINCE,
    RESERVE_FULL_ISL_SINCE,
    WATERMARK_OPTION_SINCE,
)

NEWEST_CHECKED = "v0.34.0, pip index versions vllm, 2026-12-07"

ERA = {
    Policy.VLLM_V0: "vLLM V0 engine (vLLM 0.5-0.6, vllm/core/), without chunked prefill",
    Policy.VLLM_V1: "vLLM V1 engine (vllm/v1/) of the release in vllm_version (0.11, 0.33, 0.34)",
    Policy.STATIC: "static batching (FasterTransformer-style), as the vLLM paper's baseline",
    Policy.ORCA: "Orca iteration-level scheduling, as the vLLM paper models it (§6.1)",
}


def era_text(system: SystemConfig) -> str:
    """The engine era a system stands for, its vLLM release named (vllm-v1)."""
    if system.policy is not Policy.VLLM_V1:
        return ERA[system.policy]
    version = system.vllm_version or NEWEST_VLLM
    return f"vLLM V1 engine (vllm/v1/) of vLLM v{version.value}.0"


# What the CUDA driver reports as the device's total memory, which vLLM multiplies by
# gpu_memory_utilization (v1/worker/gpu_worker.py determine_available_memory). H100 and H200
# as docs/facts.md records them; the others are an estimate: about 99% of the marketed GiB.
DRIVER_MEMORY_GIB = {
    "h100-sxm": 79.2,  # docs/facts.md, "GPU memory as the driver reports it"
    "h200-sxm": 140.0,  # docs/facts.md (the H200 lent to this project's GPU checks reports ~139)
}
DRIVER_MEMORY_SHARE = 79.2 / 80  # estimate for presets without a reported figure
NON_TORCH_BYTES = 0.5 * GIB  # estimate: CUDA context and NCCL buffers vLLM counts as non-torch

# The `defaults_from` key under which a run's provenance names the host overhead's source (the rule
# itself: simulator/execution/overhead.py, by era).
HOST_OVERHEAD_KEY = "execution.step_overhead_s"

_V0_REF = "vLLM 0.5.4 vllm/config.py SchedulerConfig"


@dataclass(frozen=True, slots=True)
class ResolvedSystem:
    """A system with every knob set, and where each defaulted knob's value came from."""

    system: SystemConfig
    sources: dict[str, str]  # knob -> source, for the knobs that were left unset


@dataclass(frozen=True, slots=True)
class Knobs:
    """The era-dependent knobs a policy reads, every one set (`knobs_of` a resolved system)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    enable_prefix_cache: bool
    watermark: float
    preemption: PreemptionPolicy


def knobs_of(system: SystemConfig) -> Knobs:
    """The knobs of a system `resolve_system` has resolved; a ValueError names any still unset
    (a policy built from an unresolved system: a bug, never input)."""
    values = {name: getattr(system, name) for name in Knobs.__dataclass_fields__}
    unset = [name for name, value in values.items() if value is None]
    if unset:
        raise ValueError(f"system {system.name!r}: {', '.join(unset)} unset; resolve_system first")
    return Knobs(**values)


def driver_memory_bytes(gpu: GPUSpec) -> int:
    """Total device memory as the driver reports it (what vLLM's utilization applies to)."""
    reported = DRIVER_MEMORY_GIB.get(gpu.name)
    if reported is not None and gpu.memory_bytes == _marketed_bytes(gpu.name):
        return int(reported * GIB)
    return int(gpu.memory_bytes * DRIVER_MEMORY_SHARE)


def is_big_non_a100(gpu: GPUSpec) -> bool:
    """vLLM V1's test for its larger defaults: >= 70 GiB of device memory and not an A100."""
    return driver_memory_bytes(gpu) >= 70 * GIB and "a100" not in gpu.name.lower()


def activation_reserve_bytes(model: ModelSpec, tensor_parallel: int, system: SystemConfig) -> int:
    """Non-KV memory vLLM sets aside (estimate): the activation peak of its profiling run, a
    forward pass of `max_num_batched_tokens` tokens (v1/worker/gpu_worker.py
    determine_available_memory), plus the sampler's logits for `max_num_seqs` rows, plus
    NON_TORCH_BYTES.

    Peak within a layer, per token: the MLP's input, its gate/up output and the activation
    (hidden + 3 x intermediate per GPU, or + 2 x for a plain MLP) in 16 bits; logits in fp32,
    twice (logits and probabilities). An estimate of a measured quantity: it grows with the
    token budget and the vocabulary as vLLM's does, not to the byte."""
    assert system.max_num_batched_tokens is not None and system.max_num_seqs is not None
    t = tensor_parallel
    inner = (3 if model.is_gated_mlp else 2) * max(1, model.intermediate_size // t)
    per_token = 2 * (model.hidden_size + inner)
    logits = 2 * 4 * model.vocab_size * system.max_num_seqs
    return int(system.max_num_batched_tokens * per_token + logits + NON_TORCH_BYTES)


def resolve_system(
    system: SystemConfig, model: ModelSpec, gpu: GPUSpec, tensor_parallel: int = 1
) -> ResolvedSystem:
    """Every unset knob of `system` by the rules of its era (see the module docstring)."""
    policy = system.policy
    sources: dict[str, str] = {}
    values: dict[str, object] = {}

    def default(knob: str, value: object, source: str) -> None:
        if getattr(system, knob) is None:
            values[knob] = value
            sources[knob] = source

    if policy is Policy.VLLM_V1:
        version = system.vllm_version or NEWEST_VLLM
        default("vllm_version", version, f"the newest vLLM release on PyPI ({NEWEST_CHECKED})")
        _default_v1(system, version, model, gpu, default)
    elif policy is Policy.VLLM_V0:
        default(
            "max_num_batched_tokens",
            max(model.max_seq_len, 2048),
            f"{_V0_REF}: max(max_model_len, 2048) without chunked prefill",
        )
        default("max_num_seqs", 256, f"{_V0_REF}: max_num_seqs 256")
        default("enable_prefix_cache", False, "vLLM V0: prefix caching off by default")
        default("watermark", 0.01, "vLLM V0 core/block_manager: watermark 0.01 of the blocks")
        default(
            "preemption",
            PreemptionPolicy.AUTO,
            "vLLM V0 core/scheduler.py: recompute single sequences, swap multi-sequence groups",
        )
    else:
        era = f"pagesim's {policy.value} baseline"
        default("max_num_batched_tokens", max(model.max_seq_len, 2048), f"{era}: as vLLM V0")
        default("max_num_seqs", 256, f"{era}: as vLLM V0")
        default("enable_prefix_cache", False, f"{era}: no prefix cache")
        default("watermark", 0.0, f"{era}: no watermark")
        default("preemption", PreemptionPolicy.RECOMPUTE, f"{era}: never preempts")
    resolved = replace(system, **values)  # type: ignore[arg-type]  # knob names checked above
    if system.activation_reserve_gib is None:
        reserve = activation_reserve_bytes(model, tensor_parallel, resolved) / GIB
        resolved = replace(resolved, activation_reserve_gib=reserve)
        sources["activation_reserve_gib"] = (
            "estimate of vLLM's profiled activation peak at max_num_batched_tokens, the "
            "sampler's logits at max_num_seqs and 0.5 GiB of non-torch memory"
        )
    return ResolvedSystem(resolved, sources)


def _default_v1(
    system: SystemConfig,
    version: VllmVersion,
    model: ModelSpec,
    gpu: GPUSpec,
    default: Callable[[str, object, str], None],
) -> None:
    """The knobs of a vllm-v1 system left unset, by its release's `engine/arg_utils.py` (batch
    limits by GPU and usage context) and `config/scheduler.py` (the rest)."""
    ref = f"vLLM v{version.value}.0"
    offline = system.defaults is DefaultsMode.OFFLINE
    which = "LLM class (offline)" if offline else "vllm serve (server)"
    huge = version.has(BIG_GPU_TIER_SINCE) and driver_memory_bytes(gpu) >= 160 * GIB
    big = is_big_non_a100(gpu)
    if huge:  # get_batch_defaults' B200/B300 tier, from v0.28.0
        gpu_rule, tokens, seqs = ">= 160 GiB", 16384, 1024
    elif big:
        gpu_rule, tokens, seqs = ">= 70 GiB, not A100", 16384 if offline else 8192, 1024
    else:
        gpu_rule, tokens, seqs = "< 70 GiB or A100", 8192 if offline else 2048, 256
    where = f"{ref} engine/arg_utils.py EngineArgs defaults, {which}, GPU {gpu_rule}"
    seqs_set = system.max_num_seqs
    if system.max_num_batched_tokens is None and version.has(CAPPED_DEFAULT_TOKENS_SINCE):
        # From v0.11.1 a defaulted token budget is capped at max_num_seqs x max_model_len.
        capped = min(tokens, (seqs_set or seqs) * model.max_seq_len)
        if capped < tokens:
            where += f", capped at max_num_seqs x max_model_len = {capped}"
        tokens = capped
    default("max_num_batched_tokens", tokens, where)
    budget = system.max_num_batched_tokens or tokens
    # Every release: a defaulted max_num_seqs is at most the token budget.
    seqs_note = f", at most max_num_batched_tokens {budget}" if budget < seqs else ""
    default("max_num_seqs", min(seqs, budget), f"{where}{seqs_note}")
    default("enable_prefix_cache", True, f"{ref} engine/arg_utils.py: prefix caching on (V1)")
    watermark_ref = (
        f"{ref} config/scheduler.py SchedulerConfig.watermark: 0"
        if version.has(WATERMARK_OPTION_SINCE)
        else f"{ref}: no admission watermark (an option from v0.24.0)"
    )
    default("watermark", 0.0, watermark_ref)
    default("preemption", PreemptionPolicy.RECOMPUTE, "vLLM V1 preempts by recompute only")
    reserves = version.has(RESERVE_FULL_ISL_SINCE)
    default(
        "scheduler_reserve_full_isl",
        reserves,
        f"{ref} config/scheduler.py SchedulerConfig.scheduler_reserve_full_isl: True"
        if reserves
        else f"{ref}: admits on the first chunk (scheduler_reserve_full_isl from v0.19.0)",
    )


def system_knobs(system: SystemConfig) -> dict[str, object]:
    """Every knob in force, as plain values (Enums by their names in scenario files)."""
    knobs = {
        name: getattr(value, "value", value)
        for name in system.__dataclass_fields__
        if (value := getattr(system, name)) is not None or name in _OPTIONAL
    }
    if system.speculative is not None:
        knobs["speculative"] = system.speculative.describe()
    if system.kv_offload is not None:
        knobs["kv_offload"] = system.kv_offload.describe()
    if system.policy is not Policy.VLLM_V1:
        del knobs["hybrid_kv_cache_manager"]  # vLLM V1's manager: no other policy has one
    return knobs


_OPTIONAL = ("max_prefill_chunk", "num_kv_blocks")


def v0_token_cap_reason(system: SystemConfig, max_model_len: int) -> str | None:
    """vLLM V0 without chunked prefill refuses to start when its token cap cannot hold one
    whole prompt of the model's maximum length (vLLM 0.5.4 vllm/config.py
    SchedulerConfig._verify_args); pagesim refuses the same system, naming the fix."""
    cap = system.max_num_batched_tokens
    if system.policy is not Policy.VLLM_V0 or cap is None or cap >= max_model_len:
        return None
    return (
        f"{cap} is below the model's maximum length {max_model_len}: vLLM V0 without chunked "
        f"prefill refuses to start (SchedulerConfig._verify_args); set it to at least "
        f"{max_model_len}, or use vllm-v1 (chunked prefill)"
    )


def beam_search_reason(system: SystemConfig, sampling: SamplingKind) -> str | None:
    """Beam search left vLLM's engine in v0.6.3: V1 runs it as a front-end loop issuing
    one-token requests (LLM.beam_search), which pagesim does not model; its forked beams are V0's
    (core/scheduler.py with copy-on-write)."""
    if system.policy is not Policy.VLLM_V1 or sampling is not SamplingKind.BEAM:
        return None
    return (
        "vllm-v1 has no beam search in its engine (it left in vLLM v0.6.3; V1 runs it as a "
        "front-end loop of one-token requests, LLM.beam_search, which pagesim does not model): "
        'use policy "vllm-v0" for engine beam search, or sampling = "parallel"'
    )


def sample_lengths_reason(system: SystemConfig, lengths: SampleLengths) -> str | None:
    """Samples of their own lengths need V1's fan-out: pagesim's V0 group (and the baselines)
    run a request's samples in lockstep to one length. (vLLM V0 let a sequence of a group finish
    on its own; pagesim does not model that.)"""
    if lengths is SampleLengths.SAME or system.policy is Policy.VLLM_V1:
        return None
    return (
        f'workload.sample_lengths = "independent" needs policy "vllm-v1"; pagesim\'s '
        f"{system.policy.value} runs a request's samples to one length "
        '(use sample_lengths = "same")'
    )


def resolve_runnable(system: SystemConfig, scenario: Scenario) -> ResolvedSystem:
    """`system` resolved for `scenario` (`resolve_system`), or InputError when its era would
    refuse to run it: V0's token cap below the model's length, beam search under V1, samples of
    their own lengths outside V1 (what engine.simulate and each fleet replica check first)."""
    resolved = resolve_system(system, scenario.model, scenario.gpu, scenario.tensor_parallel)
    system = resolved.system
    refusal = v0_token_cap_reason(system, scenario.model.max_seq_len)
    if refusal is not None:
        raise InputError(f"system {system.name!r}: max_num_batched_tokens {refusal}")
    workload = scenario.workload
    refusal = beam_search_reason(system, workload.sampling) or sample_lengths_reason(
        system, workload.sample_lengths
    )
    if refusal is not None:
        raise InputError(f"system {system.name!r}: {refusal}")
    return resolved


def era_notes(system: SystemConfig, sampling: SamplingKind) -> list[str]:
    """What a resolved system runs that today's vLLM (V1) no longer has, labelled for the user:
    historical (vLLM V0 had it) or a pagesim extension (no vLLM engine had it this way)."""
    notes = []
    swaps = system.preemption in (PreemptionPolicy.SWAP, PreemptionPolicy.AUTO)
    if system.policy is Policy.VLLM_V1:
        if swaps:
            notes.append(
                "pagesim extension: swap preemption under vllm-v1 (V1 preempts by recompute "
                "only, vllm/v1/core/sched/scheduler.py)"
            )
        version = system.vllm_version or NEWEST_VLLM
        if system.watermark and not version.has(WATERMARK_OPTION_SINCE):
            notes.append(
                f"watermark under vllm-v1 {version.value}: an option from vLLM v0.24.0 (default "
                "0); v0.11.0 has none"
            )
        if system.scheduler_reserve_full_isl and not version.has(RESERVE_FULL_ISL_SINCE):
            notes.append(
                f"scheduler_reserve_full_isl under vllm-v1 {version.value}: an option from vLLM "
                "v0.19.0 (on by default); v0.11.0 admits once the first chunk fits"
            )
    elif system.policy is Policy.VLLM_V0:
        if swaps:
            notes.append("historical: swap preemption (vLLM V0; V1 preempts by recompute only)")
        if sampling is not SamplingKind.SINGLE:
            notes.append(
                "historical: copy-on-write forks of a sequence group (vLLM V0; V1 fans n out "
                "into child requests, and beam search left the engine in v0.6.3)"
            )
        if system.watermark:
            notes.append("historical: the admission watermark (vLLM V0; V1 has none by default)")
    return notes


def _marketed_bytes(name: str) -> int | None:
    from pagesim.simulator.core.catalog import GPUS

    preset = GPUS.get(name)
    return None if preset is None else preset.memory_bytes

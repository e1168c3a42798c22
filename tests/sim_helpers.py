"""Small scenarios built in code for the simulator tests."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from pagesim.simulator.core.catalog import get_gpu, get_model, load_hf_config
from pagesim.simulator.core.config import (
    ArrivalKind,
    ArrivalProcess,
    ExplicitRequest,
    LengthDist,
    LengthKind,
    Policy,
    PrefixGroup,
    Scenario,
    SystemConfig,
    WorkloadConfig,
)
from pagesim.simulator.core.defaults import resolve_system
from pagesim.simulator.core.plan import StepPlan
from pagesim.simulator.core.request import Request, SamplingKind
from pagesim.simulator.policies.paged import PagedScheduler
from pagesim.simulator.policies.vllm_v0 import VllmV0
from pagesim.simulator.policies.vllm_v1 import VllmV1


def explicit_workload(
    requests: list[tuple[int, int, float]],
    *,
    sampling: SamplingKind = SamplingKind.SINGLE,
    num_seqs: int = 1,
) -> WorkloadConfig:
    """(prompt_len, output_len, arrival_s) triples."""
    return WorkloadConfig(
        arrival=ArrivalProcess(ArrivalKind.BURST),
        prompt=LengthDist(LengthKind.FIXED, value=1),
        output=LengthDist(LengthKind.FIXED, value=1),
        explicit=tuple(ExplicitRequest(p, o, a) for p, o, a in requests),
        sampling=sampling,
        num_seqs=num_seqs,
    )


def poisson_workload(
    num_requests: int,
    rate_per_s: float,
    prompt_mean: float = 200,
    output_mean: float = 150,
    *,
    prefix_groups: tuple[PrefixGroup, ...] = (),
    sampling: SamplingKind = SamplingKind.SINGLE,
    num_seqs: int = 1,
) -> WorkloadConfig:
    return WorkloadConfig(
        arrival=ArrivalProcess(ArrivalKind.POISSON, rate_per_s=rate_per_s),
        prompt=LengthDist(LengthKind.LOGNORMAL, mean=prompt_mean, cv=1.0),
        output=LengthDist(LengthKind.LOGNORMAL, mean=output_mean, cv=1.0),
        num_requests=num_requests,
        prefix_groups=prefix_groups,
        sampling=sampling,
        num_seqs=num_seqs,
    )


def scenario(
    workload: WorkloadConfig,
    *systems: SystemConfig,
    model: str = "llama-2-7b",
    gpu: str = "a100-80gb",
    seed: int = 0,
) -> Scenario:
    return Scenario(
        name="test",
        model=get_model(model),
        gpu=get_gpu(gpu),
        workload=workload,
        systems=systems or (SystemConfig("v1", Policy.VLLM_V1),),
        seed=seed,
    )


def system(policy: Policy, name: str | None = None, **knobs: object) -> SystemConfig:
    return replace(SystemConfig(name or policy.value, policy), **knobs)  # type: ignore[arg-type]


TINY_CONFIG = {  # a 2-layer Llama-like model: GQA (2 query heads, 1 KV head), gated MLP
    "model_type": "llama",
    "num_hidden_layers": 2,
    "hidden_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "intermediate_size": 256,
    "vocab_size": 512,
    "max_position_embeddings": 1024,
    "hidden_act": "silu",
}


def write_tiny_config(folder: Path) -> Path:
    path = folder / "config.json"
    path.write_text(json.dumps(TINY_CONFIG))
    return path


def tiny_scenario(folder: Path, num_requests: int = 200, **knobs: object) -> Scenario:
    """A few hundred short requests on the tiny model; a small pool (128 blocks) and swap space."""
    sys_knobs = {"num_kv_blocks": 128, "max_num_batched_tokens": 64, "swap_space_gib": 0.01}
    sys_knobs.update(knobs)
    return Scenario(
        name="tiny_fidelity",
        model=load_hf_config(write_tiny_config(folder)),
        gpu=get_gpu("a100-80gb"),
        workload=poisson_workload(num_requests, 400.0, 48, 24),
        systems=(system(Policy.VLLM_V1, "v1", **sys_knobs),),
        seed=0,
    )


def paged_scheduler(
    policy: Policy, num_blocks: int, block_size: int = 4, **knobs: object
) -> PagedScheduler:
    """A vLLM-style scheduler over `num_blocks` blocks, driven step by step by a test; knobs not
    given take their era's defaults (for Llama-2-7B on an A100-80GB)."""
    resolved = resolve_system(
        system(policy, block_size=block_size, **knobs),
        get_model("llama-2-7b"),
        get_gpu("a100-80gb"),
    ).system
    step = VllmV1() if policy is Policy.VLLM_V1 else VllmV0()
    return PagedScheduler(resolved, 4096, num_blocks, 16, step)


def request(
    request_id: int,
    prompt_len: int,
    output_len: int,
    *,
    prefix_len: int = 0,
    priority: int = 0,
    arrival_s: float = 0.0,
) -> Request:
    """A single-sequence request; `prefix_len` tokens shared with every other such request."""
    return Request(
        request_id,
        arrival_s,
        prompt_len,
        output_len,
        prefix_group=0 if prefix_len else None,
        prefix_len=prefix_len,
        priority=priority,
    )


def resolved(config: SystemConfig) -> SystemConfig:
    """`config` with its era's defaults filled in (for Llama-2-7B on an A100-80GB), as the engine
    resolves a system before building its scheduler."""
    return resolve_system(config, get_model("llama-2-7b"), get_gpu("a100-80gb")).system


Work = tuple[int, int, int, int, bool]  # (request, seq, new tokens, context, prefill)


def step_and_check(sched: PagedScheduler, now_s: float) -> StepPlan:
    """One step of a scheduler driven by a test: planned at `now_s`, completed 10 ms later,
    every invariant checked."""
    plan = sched.schedule(now_s)
    sched.complete(plan, now_s + 0.01)
    sched.check_invariants()
    return plan


def work_of(plan: StepPlan) -> list[Work]:
    return [tuple(item) for item in plan.work]  # type: ignore[misc]


def tables_of(sched: PagedScheduler, *seq_ids: int) -> dict[int, tuple[int, ...]]:
    """Block tables of the sequences that still hold KV."""
    return {s: sched.kv.block_table(s) for s in seq_ids if sched.kv.has_seq(s)}

"""What a disaggregated fleet (cluster/disagg.py) cannot run, as reasons: the run raises them
(`link_of`, `check_replicas` and the fleet's own checks, as InputError), and `pagesim validate`
(scenario/disagg.py) says them first, naming the scenario's key.

- Multi-turn sessions: a next turn waits for the answer of the last, which pagesim's P/D fleet
  does not route back to the prefill side.
- More than one sequence per request (parallel samples, beams): the fleet hands one block table
  per request from prefill to decode; every such request would be rejected.
- A contiguous policy (static, orca): prefill and decode replicas hold and hand over KV blocks,
  vLLM's paged cache (vllm-v0, vllm-v1).
- A decode pool that cannot hold one request of the model's maximum length: such a request
  would wait for its blocks for ever.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pagesim.simulator.core.cluster import ClusterConfig, PoolRole
from pagesim.simulator.core.config import (
    CONTIGUOUS_POLICIES,
    Scenario,
    SystemConfig,
    WorkloadConfig,
)
from pagesim.simulator.core.draft import model_draft_key
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.link import LinkConfig
from pagesim.simulator.kv.block_budget import Capacity
from pagesim.simulator.policies.seq_group import blocks_for

if TYPE_CHECKING:  # the replicas import nothing of this module: types only
    from pagesim.simulator.cluster.disagg_replicas import DecodeReplica, PrefillReplica


def workload_refusal(workload: WorkloadConfig) -> tuple[str, str] | None:
    """(the [workload] key, why) when a disaggregated fleet cannot serve `workload`, or None."""
    if workload.sessions is not None:
        return "sessions", (
            "multi-turn sessions are not simulated on a disaggregated fleet; use a trace or a "
            'synthetic workload, or colocated pools (role = "both")'
        )
    if workload.num_seqs > 1:
        return "num_seqs", (
            f"{workload.num_seqs} sequences per request ({workload.sampling.value} sampling); "
            "a disaggregated fleet serves single-sequence requests and would reject every one: "
            'use sampling = "single", or colocated pools (role = "both")'
        )
    return None


def policy_reason(system: SystemConfig) -> str | None:
    """Why `system` cannot run in a prefill or decode pool, or None."""
    if system.pipeline_parallel > 1:
        # A prefill replica's steps are priced one at a time (disagg_replicas.py), not through
        # the pipe (cluster/pipeline_loop.py), each stage would send its own layers' KV to the
        # decode side, and the pools' GPU counts leave the stages out: not modelled.
        return (
            f"system {system.name!r} has {system.pipeline_parallel} pipeline stages, which are "
            "not modelled on prefill/decode pools (the pipe, each stage's KV hand-off); use "
            'pipeline_parallel = 1 there, or colocated pools (role = "both")'
        )
    if system.kv_offload is not None:
        return (
            f"system {system.name!r} has a KV offload tier ([systems.kv_offload]), which is not "
            "modelled on prefill/decode pools (vLLM would run it beside the NIXL connector, "
            'in a MultiConnector); use colocated pools (role = "both")'
        )
    if system.policy not in CONTIGUOUS_POLICIES:
        return None
    return (
        f"disaggregated pools need a paged vLLM policy (vllm-v0 or vllm-v1); system "
        f"{system.name!r} is {system.policy.value!r}"
    )


def decode_memory_reason(capacity: Capacity, system: SystemConfig, max_seq_len: int) -> str | None:
    """Why a decode replica of `capacity` cannot hold one request of `max_seq_len` tokens."""
    # A speculating request of the maximum length peaks at max_seq_len slots (its drafts and
    # lookahead, capped at the model's length: policies/spec_decoder.py peak_slots).
    peak = max_seq_len if system.speculative is not None else max_seq_len - 1
    needed = blocks_for(peak, capacity.block_size)
    if capacity.num_gpu_blocks >= needed:
        return None
    return (
        f"with system {system.name!r} holds {capacity.num_gpu_blocks} KV blocks of "
        f"{capacity.block_size} tokens per replica, fewer than one request of the model's "
        f"max_seq_len {max_seq_len} needs ({needed}); give it a GPU with more memory, a larger "
        "tensor_parallel or more num_kv_blocks, or a model config.json with a smaller "
        "max_position_embeddings"
    )


def link_of(cluster: ClusterConfig) -> LinkConfig:
    """The link of a disaggregated `cluster`, whose pools must all be prefill or decode pools."""
    roles = {pool.role for pool in cluster.pools}
    names = ", ".join(f"{p.name} ({p.role.value})" for p in cluster.pools)
    if PoolRole.BOTH in roles:
        raise InputError(
            f"cluster.pools: a disaggregated fleet has only prefill and decode pools; got "
            f'{names}; set role = "prefill" or "decode" on every pool'
        )
    for role in (PoolRole.PREFILL, PoolRole.DECODE):
        if role not in roles:
            raise InputError(
                f"cluster.pools: a disaggregated fleet needs a {role.value} pool; got {names}"
            )
    if cluster.link is None:
        raise InputError("cluster.link: required with prefill/decode pools (preset or bandwidth)")
    return cluster.link


def check_replicas(
    prefills: list[PrefillReplica], decodes: list[DecodeReplica], scenario: Scenario
) -> None:
    """What scenario/disagg.py says of scenario files, for fleets built in code too; and that
    a decode pool holds one request of the model's maximum length."""
    replicas: list[PrefillReplica | DecodeReplica] = [*prefills, *decodes]
    for member in replicas:
        if member.capacity.layout is not None:
            raise InputError(
                f"cluster pool {member.pool!r}: system {member.system.name!r} lays "
                f"{scenario.model.name}'s KV out in layer groups (sliding-window or state "
                "layers); a disaggregated fleet moves one block table per sequence: set "
                "hybrid_kv_cache_manager = false (window layers only) or run it colocated"
            )
    _check_decode_memory(decodes, scenario.model.max_seq_len)
    if len({model_draft_key(r.system.speculative) for r in replicas}) > 1:
        raise InputError(  # scenario/disagg.py names the pools
            "cluster pools: the prefill and decode replicas' systems differ in their model "
            "draft (speculative method or draft_model); its KV travels with the prompt's, so "
            "give every pool the same [systems.speculative] method and draft_model"
        )


def _check_decode_memory(decodes: list[DecodeReplica], max_seq_len: int) -> None:
    """A decode pool must hold one request of the model's maximum length."""
    for replica in {r.pool: r for r in decodes}.values():
        reason = decode_memory_reason(replica.capacity, replica.system, max_seq_len)
        if reason is not None:
            raise InputError(f"decode pool {replica.pool!r} {reason}")

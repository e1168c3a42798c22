"""The schema of a scenario file: the valid keys of every table, and the limits on values.

A table maps to a dict of its keys, an array of tables ([[name]]) to a one-element list of that
dict; a key whose value is a scalar maps to None. The parser walks it to reject unknown keys,
`check_path` to check override and sweep paths, and `describe_scenario` to write a scenario
back in the same order. Each [[systems]] key comes with how to read it (SystemConfig's fields).
"""

from __future__ import annotations

from typing import Any

from pagesim.simulator.core.cluster import ClusterConfig, RouterConfig, RouterKind
from pagesim.simulator.core.config import (
    CONTIGUOUS_POLICIES,
    LengthKind,
    Policy,
)
from pagesim.simulator.core.hardware import GPU_FIGURE_UNITS

MAX_AXES = 2
MAX_SWEEP_POINTS = 10_000

PAGED_POLICIES = (Policy.VLLM_V0, Policy.VLLM_V1)
# Knobs only some policies read (the policies, and who they are in words). Set on a [[systems]]
# entry of another policy such a knob would silently do nothing: refused. In [defaults] it is
# meant for the systems that read it, and refused only when none does.
_CONTIGUOUS = "the contiguous policies (static, orca)"
_PAGED_WORDS = "the paged policies (vllm-v0, vllm-v1)"
KNOB_READERS: dict[str, tuple[tuple[Policy, ...], str]] = {
    "contiguous_allocator": (CONTIGUOUS_POLICIES, _CONTIGUOUS),
    "reservation": (CONTIGUOUS_POLICIES, _CONTIGUOUS),
    "static_batch_size": ((Policy.STATIC,), "static batching (policy static)"),
    "static_batch_timeout_s": ((Policy.STATIC,), "static batching (policy static)"),
    "watermark": (PAGED_POLICIES, _PAGED_WORDS),
    "max_prefill_chunk": (PAGED_POLICIES, _PAGED_WORDS),
    # the contiguous policies never preempt: a reservation holds a request's whole future
    "preemption": (PAGED_POLICIES, f"{_PAGED_WORDS}, which preempt"),
    "victim": (PAGED_POLICIES, f"{_PAGED_WORDS}, which preempt"),
    # A vLLM V1 release's rules (core/vllm_eras.py); from [defaults], meant for the V1 systems.
    "vllm_version": ((Policy.VLLM_V1,), "vllm-v1 (vLLM V1's releases)"),
    "scheduler_reserve_full_isl": ((Policy.VLLM_V1,), "vllm-v1 (vLLM V1's scheduler)"),
    "kv_offload": ((Policy.VLLM_V1,), "vllm-v1 (vLLM V1's KV offloading connector)"),
    # `defaults` is read by every policy: served or offline decides the front end's time in TTFT
    # and E2E (simulator/execution/frontend.py); vllm-v1 also takes that set's knob defaults.
}

# [cluster.router] keys only some router kinds read (simulator/cluster/routers.py): set where no
# router of those kinds runs, such a key would do nothing, and is refused.
_PREFIX_AWARE = (RouterKind.PREFIX_AWARE,)
ROUTER_KEY_READERS: dict[str, tuple[RouterKind, ...]] = {
    "report_interval_s": (RouterKind.LEAST_KV,),  # the replicas' reported KV use
    "cache_threshold": _PREFIX_AWARE,
    "balance_abs_threshold": _PREFIX_AWARE,
    "balance_rel_threshold": _PREFIX_AWARE,
    "prefix_block_tokens": _PREFIX_AWARE,
    "ring_points": (RouterKind.SESSION_AFFINITY,),
}


def router_tables(
    cluster: ClusterConfig, searched: tuple[RouterKind, ...]
) -> list[tuple[str, RouterConfig, set[RouterKind]]]:
    """Each router table of `cluster` ("router", "prefill_router", "decode_router"), its config
    and the router kinds that read its keys: [cluster.router]'s serve its kind, the systems'
    (`by_system`), the kinds a fleet search tries (`searched`) and the phase routers, which start
    from it; a phase router's serve its own kind."""
    phases = [
        (name, router)
        for name, router in (
            ("prefill_router", cluster.prefill_router),
            ("decode_router", cluster.decode_router),
        )
        if router is not None
    ]
    main = {cluster.router.kind, *(kind for _, kind in cluster.router_by_system), *searched}
    main |= {router.kind for _, router in phases}
    return [("router", cluster.router, main), *((n, r, {r.kind}) for n, r in phases)]


def is_read(key: str, kinds: set[RouterKind]) -> bool:
    """Whether a router of one of `kinds` reads router key `key`."""
    return key not in ROUTER_KEY_READERS or bool(kinds & set(ROUTER_KEY_READERS[key]))


# Every [[systems]] key but name (config.py's SystemConfig fields); scenario.systems reads them.
SYSTEM_KEYS = (
    "policy",
    "block_size",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_prefill_chunk",
    "reservation",
    "contiguous_allocator",
    "preemption",
    "victim",
    "admission",
    "enable_prefix_cache",
    "watermark",
    "gpu_memory_utilization",
    "activation_reserve_gib",
    "swap_space_gib",
    "static_batch_size",
    "static_batch_timeout_s",
    "num_kv_blocks",
    "execution",
    "defaults",
    "speculative",
    "hybrid_kv_cache_manager",
    "vllm_version",
    "scheduler_reserve_full_isl",
    "kv_offload",
    "pipeline_parallel",
    "pipeline_layer_partition",
    "tensor_parallel",
    "weight_dtype",
    "kv_dtype",
)


def _keys(names: str) -> dict[str, None]:
    return dict.fromkeys(names.split())


_ROUTER_KEYS = _keys(
    "kind report_interval_s cache_threshold balance_abs_threshold balance_rel_threshold "
    "prefix_block_tokens ring_points"
)
_LENGTH_KEYS = _keys("kind value low high mean cv trace path column")
# [systems.speculative] (config.SpeculativeConfig; read by scenario/speculative.py)
SPECULATIVE_KEYS = _keys(
    "method num_speculative_tokens acceptance_rate acceptance_rates acceptance_file draft_model"
)
# [systems.kv_offload] (config.KVOffloadConfig; read by scenario/offload.py)
KV_OFFLOAD_KEYS = _keys("cpu_gib load_gbps store_gbps")
_SYSTEM_SCHEMA = {
    **dict.fromkeys(SYSTEM_KEYS),
    "speculative": SPECULATIVE_KEYS,
    "kv_offload": KV_OFFLOAD_KEYS,
}
Schema = dict[str, Any]
SCHEMA: Schema = {
    **_keys("name description seed"),
    "model": _keys(
        "preset config kv_dtype tensor_parallel weight_dtype data_parallel expert_parallel"
    ),
    "gpu": _keys(
        "preset name memory_gib mem_bandwidth_gbps fp16_tflops host_link_gbps scale_up_gpus"
    ),
    "wide_ep": _keys("all2all_backend eplb redundant_experts gpus_per_node scaleout_gbps"),
    "execution": _keys(
        "kind profile gemm_efficiency attention_bw_efficiency weight_bw_efficiency "
        "step_overhead_s step_overhead_s_per_seq async_scheduling frontend_s allreduce_bw_gbps "
        "allreduce_latency_us custom_allreduce_stage_us fused_moe_bw_efficiency "
        "swap_copy_latency_s routing_skew"
    ),
    "workload": {
        **_keys(
            "num_requests trace trace_offset time_scale sampling num_seqs empirical_pairing "
            "sample_lengths"
        ),
        "arrival": _keys("kind rate_per_s cv"),
        "prompt": _LENGTH_KEYS,
        "output": _LENGTH_KEYS,
        "prefix_groups": [_keys("num_tokens fraction")],
        "requests": [_keys("prompt_len output_len arrival_s priority")],
        "mooncake": _keys("trace offset num_requests time_scale"),
        "session_trace": _keys("path time_scale"),
        "sessions": {
            **_keys("num_sessions think_time_s"),
            "turns": _LENGTH_KEYS,
            "new_tokens": _LENGTH_KEYS,
        },
    },
    "defaults": _SYSTEM_SCHEMA,
    "systems": [{"name": None, **_SYSTEM_SCHEMA}],
    "slo": _keys("ttft_s tpot_s"),
    "stop": _keys("max_time_s warmup_s"),
    "sweep": _keys("axes"),
    "cluster": {  # simulator/scenario/cluster.py
        "router": _ROUTER_KEYS | _keys("by_system"),
        "pools": [_keys("name count system gpu tensor_parallel role")],
        # simulator/scenario/disagg.py
        "link": _keys("preset bandwidth_gb_s latency_s layerwise"),
        "prefill_router": _ROUTER_KEYS,
        "decode_router": _ROUTER_KEYS,
        "colocated_systems": None,
    },
    "report": _keys("key_metric metrics compare reference"),  # simulator/scenario/report.py
    "capacity": _keys(  # simulator/scenario/capacity.py
        "min_replicas max_replicas gpus tensor_parallel routers price_per_gpu_hour currency "
        "max_gpus prefill_tensor_parallel decode_tensor_parallel"
    ),
}

# The [gpu] figures: a custom GPU gives them, a preset takes them as overrides.
# Keys and units as the preset file writes them (core/hardware.py GPU_FIGURE_UNITS).
_GPU_FIGURE_BOUNDS = {"memory_gib": 1e5, "mem_bandwidth_gbps": 1e6, "fp16_tflops": 1e6}
GPU_FIGURES = {  # key -> (upper bound, GPUSpec field, unit in that field)
    key: (_GPU_FIGURE_BOUNDS.get(key, 1e5), field, unit)
    for key, (field, unit) in GPU_FIGURE_UNITS.items()
}

# The keys each kind of [workload.prompt] / [workload.output] uses beside kind.
LENGTH_USES: dict[LengthKind, tuple[str, ...]] = {
    LengthKind.FIXED: ("value",),
    LengthKind.UNIFORM: ("low", "high"),
    LengthKind.LOGNORMAL: ("mean", "cv"),
    LengthKind.EMPIRICAL: ("trace", "path", "column"),
    LengthKind.TRACE: (),
}

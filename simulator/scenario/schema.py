"""The schema of a scenario file: the valid keys of every table, and the limits on values.

A table maps to a dict of its keys, an array of tables ([[name]]) to a one-element list of that
dict; a key whose value is a scalar maps to None. The parser walks it to reject unknown keys,
`check_path` to check override and sweep paths, and `describe_scenario` to write a scenario
back in the same order. Each [[systems]] key comes with how to read it (SystemConfig's fields).
"""

from __future__ import annotations

from typing import Any

from pagesim.simulator.core.catalog import GB, GIB
from pagesim.simulator.core.config import (
    LengthKind,
)

MAX_AXES = 2
MAX_SWEEP_POINTS = 10_000

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
_SYSTEM_SCHEMA = {**dict.fromkeys(SYSTEM_KEYS), "speculative": SPECULATIVE_KEYS}
Schema = dict[str, Any]
SCHEMA: Schema = {
    **_keys("name description seed"),
    "model": _keys(
        "preset config kv_dtype tensor_parallel weight_dtype data_parallel expert_parallel"
    ),
    "gpu": _keys("preset name memory_gib mem_bandwidth_gbps fp16_tflops host_link_gbps"),
    "execution": _keys(
        "kind profile gemm_efficiency attention_bw_efficiency weight_bw_efficiency "
        "step_overhead_s step_overhead_s_per_seq async_scheduling allreduce_bw_gbps "
        "allreduce_latency_us swap_copy_latency_s routing_skew"
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
    "capacity": _keys(  # simulator/scenario/capacity.py
        "min_replicas max_replicas gpus tensor_parallel routers price_per_gpu_hour currency "
        "max_gpus prefill_tensor_parallel decode_tensor_parallel"
    ),
}

# The [gpu] figures: a custom GPU gives them, a preset takes them as overrides.
GPU_FIGURES = {  # field -> (upper bound, GPUSpec field, unit in that field)
    "memory_gib": (1e5, "memory_bytes", GIB),
    "mem_bandwidth_gbps": (1e6, "mem_bandwidth_bps", GB),
    "fp16_tflops": (1e6, "fp16_flops", 1e12),
    "host_link_gbps": (1e5, "host_link_bps", GB),
}

# The keys each kind of [workload.prompt] / [workload.output] uses beside kind.
LENGTH_USES: dict[LengthKind, tuple[str, ...]] = {
    LengthKind.FIXED: ("value",),
    LengthKind.UNIFORM: ("low", "high"),
    LengthKind.LOGNORMAL: ("mean", "cv"),
    LengthKind.EMPIRICAL: ("trace", "path", "column"),
    LengthKind.TRACE: (),
}

"""What each key of a scenario file means, one entry per key of `schema.SCHEMA`, for the generated
reference (`pagesim scenarios reference`, scenario/reference.py).

The keys themselves, their closed sets of values and the catalogs come from the code; only the
words are written here. tests/test_docs.py fails when a schema key has no entry here or an entry
names no key, so a key added to the schema must be documented before the suite passes.

Tables that take another table's keys (SAME_AS) are documented once, under that table.
"""

from __future__ import annotations

# A table that takes the keys of another: documented there, listed by name under its own heading.
SAME_AS = {
    "workload.output": "workload.prompt",
    "workload.sessions.turns": "workload.prompt",
    "workload.sessions.new_tokens": "workload.prompt",
    "defaults": "systems",
    "cluster.prefill_router": "cluster.router",
    "cluster.decode_router": "cluster.router",
}

# What each table is, and whether it is required.
TABLE_DOCS = {
    "": "Top-level keys.",
    "model": "Required: exactly one of `preset` / `config`.",
    "gpu": "Required: a preset (its figures replaced one by one if given), or a custom GPU: "
    "`name` and the three figures `memory_gib`, `mem_bandwidth_gbps`, `fp16_tflops`.",
    "execution": "Optional: how a step is priced (docs/step-costs.md); every factor defaults to "
    "the GPU preset's or the engine era's.",
    "workload": "Required: the requests. A trace, explicit requests, a Mooncake trace, sessions "
    "or a session trace, or generators (arrival, prompt, output).",
    "workload.arrival": 'Required unless a trace gives the timestamps (then default "trace").',
    "workload.prompt": "Required unless a trace gives the lengths (then default "
    '"trace"). The keys each kind reads: fixed `value`; uniform `low`, `high` (inclusive); '
    "lognormal `mean`, `cv` (default 1); empirical `trace` (a built-in name) or `path` (a "
    "CSV), and `column`; trace: the workload trace's own column, row by row. A key of another "
    "kind is refused.",
    "workload.output": "The output lengths.",
    "workload.prefix_groups": "Optional, repeatable: a shared system prompt. A request in the "
    "group has `num_tokens` shared tokens before its own prompt (prompt_len = num_tokens + its "
    "sampled length); fractions sum to at most 1.",
    "workload.requests": "Explicit requests: they replace `num_requests`, `trace`, `arrival`, "
    "`prompt`, `output` and `prefix_groups`, which must then be absent.",
    "workload.mooncake": "A Mooncake (FAST'25) trace row by row, in place of the generators; each "
    "512-token hash_id becomes shared prompt content.",
    "workload.session_trace": "Recorded turns (CSV: session_id, turn, arrived_at, "
    "num_prefill_tokens = new tokens, num_decode_tokens), in place of the generators.",
    "workload.sessions": "Multi-turn conversations: [workload.arrival] starts sessions, "
    "[workload.prompt] is a first turn, [workload.output] every answer; a later turn = previous "
    "prompt + answer + new text, sent an exponential think time after the answer.",
    "workload.sessions.turns": "Turns per session (any length kind).",
    "workload.sessions.new_tokens": "New user tokens of each turn after the first (any length "
    "kind).",
    "defaults": "Optional: any [[systems]] key but `name`, for every system that does not set "
    "it. A key only some policies read serves the systems that read it, and is refused only when "
    "none does.",
    "systems": "At least one; names unique. Unset knobs take their engine era's default "
    "(docs/engine-eras.md); a key the system's policy does not read is refused "
    "(docs/scenario-files.md).",
    "systems.speculative": "vllm-v1 only: speculative decoding (docs/speculative.md); or inline, "
    '`speculative = { method = "eagle", ... }`.',
    "systems.kv_offload": "vllm-v1 with prefix caching: a KV tier in CPU memory behind the GPU "
    "prefix cache, as vLLM's native KV offloading (docs/plans.md).",
    "slo": "Optional: goodput counts the requests meeting both bounds.",
    "stop": "Optional.",
    "sweep": "Optional: one or two axes; `pagesim sweep` runs their product.",
    "cluster": "Optional: a fleet of replicas behind a router (absent: one replica); "
    "docs/fleets.md.",
    "cluster.router": "What each router reads: simulator/cluster/routers.py.",
    "cluster.pools": "At least one; pools may differ (e.g. H200 TP1 beside A100 TP2).",
    "cluster.link": "Required with prefill/decode pools: how prompts' KV moves (Link presets "
    "below).",
    "cluster.prefill_router": "A router per phase (default: [cluster.router]).",
    "cluster.decode_router": 'E.g. kind = "least-kv": the decode replica with the most KV '
    "headroom.",
    "report": "Optional: the question the report answers first (docs/reports.md).",
    "capacity": "Optional: `pagesim capacity` then sizes a fleet for this traffic instead of "
    "searching the highest sustainable rate (docs/fleets.md).",
}

_LENGTH = {
    "kind": "How lengths are drawn.",
    "value": "fixed: the length.",
    "low": "uniform: the smallest length (inclusive).",
    "high": "uniform: the largest length (inclusive).",
    "mean": "lognormal: the mean length.",
    "cv": "lognormal: coefficient of variation (default 1).",
    "trace": "empirical: a built-in trace to resample (Traces below).",
    "path": "empirical: a CSV file to resample, relative to this file.",
    "column": "empirical: the CSV column read.",
}

_SYSTEM = {
    "name": "The system's name, unique in the file.",
    "policy": "Whose rules run (docs/engine-eras.md); here or in [defaults]. A model with "
    "sliding-window or state layers (Gemma 3, gpt-oss, Qwen3-Next) needs vllm-v1 (its hybrid "
    "KV-cache manager), recompute and no speculation, unless (window layers, no state layers) "
    "`hybrid_kv_cache_manager = false` lays it out as one group.",
    "block_size": "Tokens per KV block; default 16 (a state model's may be raised, as vLLM does).",
    "max_num_seqs": "Sequences running at once; default: the era's.",
    "max_num_batched_tokens": "V1: the token budget per step; V0: the prefill token cap (>= the "
    "model's length); default: the era's.",
    "max_prefill_chunk": "Paged policies: the cap on one request's chunk (default: the budget).",
    "reservation": "static, orca only: how a request's contiguous KV region is sized; default max.",
    "contiguous_allocator": "static, orca only: where a region is placed; default: orca buddy, "
    "static first-fit (docs/scenario-files.md, Contiguous allocators).",
    "preemption": "Paged policies only: auto recomputes single sequences and swaps groups; "
    "default: the era's.",
    "victim": "Paged policies only: which running request is preempted; default last-arrived.",
    "admission": "Waiting order; priority: lower `priority` first, FCFS among equals. Default "
    "fcfs.",
    "enable_prefix_cache": "Paged policies only; default: the era's (V1 on, V0 off).",
    "watermark": "Paged policies only: share of blocks kept free at admission, in [0, 1); "
    "default: the era's.",
    "gpu_memory_utilization": "In (0, 1]: the share of the memory the driver reports; default 0.9.",
    "activation_reserve_gib": "Non-KV memory kept back; default: an estimate of vLLM's profiled "
    "activation peak.",
    "swap_space_gib": "CPU memory for swapped blocks; must be > 0 when preemption can swap. "
    "Default 4.",
    "static_batch_size": "static only: requests per batch (<= max_num_seqs); default 8.",
    "static_batch_timeout_s": "static only: wait up to this long to fill a batch; default 0.",
    "num_kv_blocks": "Overrides the KV capacity computed from GPU memory.",
    "execution": "Prices this system by roofline or profile (default: [execution] kind).",
    "defaults": "server (`vllm serve`, the OpenAI API server: TTFT and E2E as its client sees "
    "them, the front end included) or offline (the `LLM` class: no front end); vllm-v1 also "
    "takes that set's defaults. Default server.",
    "hybrid_kv_cache_manager": "vllm-v1, default true; false is vLLM's "
    "--disable-hybrid-kv-cache-manager: sliding-window layers keep KV for every token (one group "
    "of all layers; the attention still reads the window only); refused for models with state "
    "layers. Disaggregated pools need it false for a window model (docs/fleets.md).",
    "vllm_version": 'vllm-v1: the vLLM release it follows, quoted ("0.34", "0.34.0" or '
    '"v0.34.0"); default the newest, "0.34": its defaults and rules (docs/engine-eras.md).',
    "scheduler_reserve_full_isl": "vllm-v1: admit a request only if blocks for its whole prompt "
    'fit; default on from v0.19.0, off under "0.11".',
    "pipeline_parallel": "vllm-v1, roofline: decoder layers split over this many stages "
    "(vLLM --pipeline-parallel-size), each a tensor_parallel group of its own; up to this many "
    "batches in the pipe (V1's batch queue); 1..the model's layers. Default 1 "
    "(docs/step-costs.md, Pipeline parallelism).",
    "pipeline_layer_partition": "Layers per stage, e.g. [63, 63] (vLLM's "
    "VLLM_PP_LAYER_PARTITION): one entry per stage, summing to the model's layers; default "
    "vLLM's split (the remainder to the stages before the last).",
    "tensor_parallel": "This system's tensor-parallel degree in place of [model] tensor_parallel "
    "(it must divide the model's heads), so one run compares deployments (e.g. TP 8 x PP 2 "
    "against TP 8); the KV capacity, step costs, GPU count and `pagesim deploy` line follow it. "
    "Refused with [cluster] pools (each has its own), [capacity] (the search picks the degree) "
    "and data_parallel > 1 or expert_parallel. Default: [model]'s.",
    "weight_dtype": "This system's weight dtype in place of [model] weight_dtype (e.g. fp8 "
    "against bf16 in one run): weight bytes, GEMM peak and KV room follow it. Default: "
    "[model]'s.",
    "kv_dtype": "This system's KV-cache dtype in place of [model] kv_dtype. Default: [model]'s.",
}

_SPECULATIVE = {
    "method": "How drafts are proposed.",
    "num_speculative_tokens": "k drafts per decoding sequence per step, in [1, 64].",
    "acceptance_rate": "Exactly one of the three acceptance keys: each draft accepted with this "
    "probability (in [0, 1]) once the ones before it were.",
    "acceptance_rates": "k per-position rates, non-increasing, e.g. [0.8, 0.6, 0.4].",
    "acceptance_file": "A CSV of `num_accepted,weight` rows, 0..k.",
    "draft_model": "Method draft-model only: a catalog model (Models below).",
}

_ROUTER = {
    "kind": "How the router picks a replica.",
    "report_interval_s": "least-kv: replicas' KV use is read at most this old; default 0.",
    "cache_threshold": "prefix-aware: route by prefix only to a replica matching more than this "
    "share of the prompt; default 0.5.",
    "balance_abs_threshold": "prefix-aware: load counts as imbalanced when max - min in-flight "
    "requests exceeds this (and the relative threshold); default 32.",
    "balance_rel_threshold": "prefix-aware: ... and max > this x min; default 1.1.",
    "prefix_block_tokens": "prefix-aware: tokens per entry of the router's prefix index; default: "
    "the replica's KV block size.",
    "ring_points": "session-affinity: points per replica on the hash ring; default 160 "
    "(libketama's).",
    "by_system": 'The router a [[systems]] entry runs behind instead, e.g. { rr = "round-robin" }.',
}

KEY_DOCS: dict[str, dict[str, str]] = {
    "": {
        "name": "Default: the file name without .toml.",
        "description": "First line: shown by `pagesim scenarios list`; more lines: shown in the "
        "report.",
        "seed": "One seed for the whole simulation: same seed, same results. Default 0.",
    },
    "model": {
        "preset": "A catalog model (Models below).",
        "config": "A Hugging Face config.json, relative to this file.",
        "kv_dtype": "The KV cache's element type; default fp16. nvfp4 (vLLM v0.33+): Blackwell "
        "GPUs only.",
        "tensor_parallel": "GPUs per replica; must divide the attention heads and fit the GPU's "
        "scale-up domain ([gpu] scale_up_gpus). Default 1.",
        "weight_dtype": "Default: the model's own (the preset's, or a config.json's "
        "quantization_config); docs/models.md says how each is priced.",
        "data_parallel": "With expert_parallel: DP attention ranks, every one simulated and "
        "lock-stepped at the MoE layers ([wide_ep]). Default 1.",
        "expert_parallel": "MoE only: experts split over tensor_parallel x data_parallel GPUs. "
        "Default false.",
    },
    "wide_ep": {
        "all2all_backend": "MoE dispatch/combine kernels (vLLM --all2all-backend): "
        "allgather_reducescatter (vLLM's default), deepep_low_latency, deepep_high_throughput.",
        "eplb": "Expert load balancing (vLLM --enable-eplb): redundant experts even the "
        "hottest GPU's load. Default false.",
        "redundant_experts": "EPLB's redundant expert slots; default: the fewest making the "
        "experts divide over the EP group's GPUs.",
        "gpus_per_node": "GPUs per node (NVLink domain); beyond it, the scale-out NIC. Default 8.",
        "scaleout_gbps": "Per-GPU bandwidth between nodes (GB/s); default 50 (ConnectX-7 "
        "400 Gb/s).",
    },
    "gpu": {
        "preset": "A GPU preset (GPUs below).",
        "name": "A custom GPU's name.",
        "memory_gib": "Device memory (GiB); any figure given replaces the preset's.",
        "mem_bandwidth_gbps": "Memory bandwidth (GB/s).",
        "fp16_tflops": "Dense 16-bit tensor peak (TFLOP/s).",
        "host_link_gbps": "Effective PCIe bandwidth for swapping (GB/s; custom default 25).",
        "scale_up_gpus": "GPUs of one NVLink/xGMI domain (default: the preset's, 72 for gb200, "
        "else 8); at most the preset's; bounds tensor_parallel.",
    },
    "execution": {
        "kind": "roofline, or a measured profile; given a profile and no kind, profile.",
        "profile": "Relative to this file, a bare name in calibration/profiles/, or "
        '"builtin:<name>" (Built-in profiles below); required with kind = "profile"; read and '
        'checked whenever given (with kind = "roofline" too).',
        "gemm_efficiency": "Share of datasheet peak, in (0, 1]; default: the GPU's fitted factor.",
        "attention_bw_efficiency": "Share of datasheet bandwidth, in (0, 1]; default: the GPU's.",
        "weight_bw_efficiency": "Share of datasheet bandwidth, in (0, 1]; default: the GPU's.",
        "step_overhead_s": "Host work per step: fixed + per_seq x sequences; default: the engine "
        "era's (vllm-v0 1.183 ms + 0.1 ms/seq, the per-sequence part overlapped; vllm-v1 1 ms).",
        "step_overhead_s_per_seq": "The per-sequence part of the host work per step.",
        "async_scheduling": "vllm-v1: host work overlaps the GPU step; default: as the system's "
        "vllm_version runs it (on from v0.14.0 but for n-gram drafts).",
        "frontend_s": "A served system's time per request outside the engine's steps, in [0, 60) "
        "s, added to TTFT and E2E; default: the era's; offline systems have none.",
        "allreduce_bw_gbps": "Tensor-parallel all-reduce per call: latency + ring bytes / bus "
        "bandwidth; default: the GPU's interconnect. Set either, and every call is priced by it, "
        "vLLM's custom all-reduce too.",
        "allreduce_latency_us": "The all-reduce's latency per call (with allreduce_bw_gbps).",
        "custom_allreduce_stage_us": "vLLM's custom all-reduce: one stage's latency in a model "
        "step, on NVSwitch nodes (A100, H100, H200); default 14.94.",
        "fused_moe_bw_efficiency": "MoE: the fused-MoE kernel's share of datasheet bandwidth "
        "streaming routed experts, in (0, 1]; default 0.85.",
        "swap_copy_latency_s": "Per copy of one layer's K or V of a swapped block; default 3e-6 "
        "(an estimate).",
        "routing_skew": "MoE: Zipf exponent of expert popularity; 0 (default) = uniform routing.",
    },
    "workload": {
        "num_requests": "Required unless a trace bounds it (then: every row from trace_offset).",
        "trace": "A built-in trace (Traces below) or a CSV path with the columns arrived_at, "
        "num_prefill_tokens, num_decode_tokens.",
        "trace_offset": "First row used (with a trace); default 0.",
        "time_scale": "Trace timestamps are divided by this (with trace arrivals); every arrival, "
        "so divided, within 1e9 s of the first (the clock's range). Default 1.",
        "sampling": "Sequences per request: single, parallel samples or beam search.",
        "num_seqs": "Samples n or beam width; must be 1 with single.",
        "empirical_pairing": 'Prompt and output both empirical: "rows" (the default when both '
        'read one file: each prompt keeps its answer) or "independent" (docs/scenario-files.md).',
        "sample_lengths": 'parallel: "same" (all samples run output_len) or "independent" (each '
        "draws its own from [workload.output]; vllm-v1 only, whose child requests end on their "
        "own).",
    },
    "workload.arrival": {
        "kind": "poisson, gamma and constant need rate_per_s; burst: all at t = 0; trace: the "
        "trace's arrived_at.",
        "rate_per_s": "Requests (or sessions) per second.",
        "cv": "gamma only: coefficient of variation of the gaps (1 = Poisson).",
    },
    "workload.prompt": _LENGTH,
    "workload.prefix_groups": {
        "num_tokens": "Shared tokens before each member's own prompt.",
        "fraction": "Share of the requests in the group.",
    },
    "workload.requests": {
        "prompt_len": "Prompt tokens.",
        "output_len": "Output tokens.",
        "arrival_s": "Arrival time (s); default 0.",
        "priority": "Lower first under admission = priority; default 0.",
    },
    "workload.mooncake": {
        "trace": "A built-in Mooncake trace (Traces below) or a JSON-lines path.",
        "offset": "First row used; default 0.",
        "num_requests": "Rows used (default: every row from offset).",
        "time_scale": "Timestamps are divided by this (2.0 replays twice as fast); default 1.",
    },
    "workload.session_trace": {
        "path": "The CSV of recorded turns.",
        "time_scale": "Times are divided by this; default 1.",
    },
    "workload.sessions": {
        "num_sessions": "Conversations started.",
        "think_time_s": "Mean of the exponential think time before a later turn.",
    },
    "systems": _SYSTEM,
    "systems.speculative": _SPECULATIVE,
    "systems.kv_offload": {
        "cpu_gib": "The tier's CPU memory in GiB, over the TP ranks (vLLM --kv-offloading-size); "
        "at least one KV block.",
        "load_gbps": "Host -> GPU bandwidth per GPU (GB/s); default: the GPU's host link.",
        "store_gbps": "GPU -> host bandwidth per GPU (GB/s); default: the GPU's host link.",
    },
    "slo": {
        "ttft_s": "Time-to-first-token bound (s).",
        "tpot_s": "Time-per-output-token bound (s).",
    },
    "stop": {
        "max_time_s": "Stop arrivals and the run at this simulated time.",
        "warmup_s": "Requests arriving before this are left out of the metrics; default 0.",
    },
    "sweep": {
        "axes": 'E.g. [{ path = "workload.arrival.rate_per_s", values = [1, 2, 4] }]: one or two '
        "axes, each a dotted key (docs/scenario-files.md, Overrides and sweep axes).",
    },
    "cluster": {
        "colocated_systems": "With prefill/decode pools: these [[systems]] run the same pools "
        "colocated (role both), for a comparison on the same GPUs.",
    },
    "cluster.router": _ROUTER,
    "cluster.pools": {
        "name": "The pool's name.",
        "count": "Replicas, >= 1.",
        "system": "A [[systems]] name (default: the system simulated).",
        "gpu": "A GPU preset (default: [gpu]).",
        "tensor_parallel": "Default: [model]'s.",
        "role": "both (colocated), or prefill / decode: prefill/decode disaggregation "
        "(simulator/cluster/disagg.py); then every pool is prefill or decode.",
    },
    "cluster.link": {
        "preset": "A link preset (Link presets below), or instead bandwidth_gb_s.",
        "bandwidth_gb_s": "GB/s per GPU port, one direction (> 0).",
        "latency_s": "Per transfer (presets: NVLink's measured 4 us, others 0).",
        "layerwise": "Send each layer's KV while the later layers compute; default false.",
    },
    "report": {
        "key_metric": "The summary key of the first headline (Headline metrics below).",
        "metrics": "The next headlines, in order.",
        "compare": "rank (best to worst) or agreement (% apart from `reference`); default rank.",
        "reference": "agreement: the system the others are compared with (default: the first).",
    },
    "capacity": {
        "min_replicas": "Smallest pool size searched (each pool's, disaggregated).",
        "max_replicas": "Largest pool size searched, up to 4096.",
        "gpus": "GPU presets tried (default: the pool's GPU, or [gpu]); one pool only.",
        "tensor_parallel": "Degrees tried (default: the pool's, or [model]'s); one pool only.",
        "routers": "Routers tried (default: each system's own router); one pool only.",
        "price_per_gpu_hour": "Your prices, one per GPU searched (or none), e.g. "
        "{ a100-80gb = 1.49 }.",
        "currency": "The unit of the prices, as printed.",
        "max_gpus": "Disaggregated: fleets of at most this many GPUs (default: twice the "
        "scenario's).",
        "prefill_tensor_parallel": "Disaggregated: prefill degrees tried (default: the pool's).",
        "decode_tensor_parallel": "Disaggregated: decode degrees tried (default: the pool's).",
    },
}

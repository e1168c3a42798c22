"""The `vllm serve` arguments that set a system's knobs, as a release's flags spell them.

One replica: its system with every knob resolved as the run resolved it (core.defaults), its
GPU count and the model. Each knob with a flag gets it, the value written out even when it is
vLLM's default, so the command says what was simulated; each knob without one is listed, with
why, never invented. Flag names per release: vllm/engine/arg_utils.py of v0.6.4, v0.11.0,
v0.33.0, v0.34.0 (EngineArgs.add_cli_args), checked against vllm_flags.json by the tests:

- --tensor-parallel-size, --max-num-seqs, --max-num-batched-tokens, --block-size,
  --gpu-memory-utilization, --num-gpu-blocks-override, --kv-cache-dtype, --quantization,
  --scheduling-policy: every release.
- prefix caching: --enable-prefix-caching; off: nothing in v0.6.4 (off by default there),
  --no-enable-prefix-caching in v0.11.0, --disable-prefix-caching from v0.33 (the
  `--enable-x`/`--disable-x` pairs of vllm/utils/argparse_utils.py).
- V0 only (v0.6.4): --swap-space (GiB), --preemption-mode, --enable-chunked-prefill False
  (pagesim's V0 schedules prompts whole; v0.6.4 turns chunking on by itself for contexts over
  32K, EngineArgs.create_engine_config).
- V1 only: --long-prefill-token-threshold (the cap on one request's chunk: v1/core/sched/
  scheduler.py cuts a longer chunk to it), --data-parallel-size, --enable-expert-parallel,
  --speculative-config (JSON), --disable-hybrid-kv-cache-manager, --async-scheduling or
  --no-async-scheduling (as the run decided: on by default from v0.14.0),
  --scheduler-reserve-full-isl or --no-scheduler-reserve-full-isl (from v0.19.0).
"""

from __future__ import annotations

import json

from pagesim.simulator.core.catalog import GIB, KVDtype, get_model
from pagesim.simulator.core.config import (
    AdmissionOrder,
    PreemptionPolicy,
    Scenario,
    SpecMethod,
    SystemConfig,
    VictimPolicy,
)
from pagesim.simulator.deploy.argv import Argv
from pagesim.simulator.deploy.eras import Era
from pagesim.simulator.deploy.models import model_reference, native_weight_dtype
from pagesim.simulator.deploy.wide_ep_args import wide_ep_args
from pagesim.simulator.execution.overhead import for_system
from pagesim.simulator.kv.block_budget import kv_capacity

# vLLM's `--speculative-config` method of each pagesim method (vllm/config/speculative.py);
# a model-based method also names its draft model, which pagesim knows only for draft-model.
_SPEC_METHODS = {
    SpecMethod.DRAFT_MODEL: "draft_model",
    SpecMethod.EAGLE: "eagle",
    SpecMethod.MTP: "mtp",
    SpecMethod.NGRAM: "ngram",
}


ServeArgs = Argv  # the arguments after `vllm serve`


def serve_args(
    scenario: Scenario, system: SystemConfig, era: Era, tensor_parallel: int
) -> ServeArgs:
    """`vllm serve` arguments of one replica of `system` (resolved) at `tensor_parallel`."""
    out = ServeArgs()
    model, note = model_reference(scenario.model)
    out.argv.append(model)
    if note:
        out.notes.append(note)
    out.add("--tensor-parallel-size", tensor_parallel)
    if system.pipeline_parallel > 1:  # core/pipeline_stages.py
        out.add("--pipeline-parallel-size", system.pipeline_parallel)
        if system.pipeline_layer_partition is not None:
            partition = ",".join(map(str, system.pipeline_layer_partition))
            out.notes.append(f"run with VLLM_PP_LAYER_PARTITION={partition}")
    out.add("--max-num-seqs", system.max_num_seqs)
    out.add("--max-num-batched-tokens", system.max_num_batched_tokens)
    out.add("--block-size", system.block_size)
    out.add("--gpu-memory-utilization", system.gpu_memory_utilization)
    _prefix_caching(out, bool(system.enable_prefix_cache), era)
    if system.num_kv_blocks is not None:
        out.add("--num-gpu-blocks-override", system.num_kv_blocks)
    if scenario.kv_dtype is KVDtype.FP8:
        out.add("--kv-cache-dtype", "fp8")
    _weights(out, scenario)
    if system.admission is AdmissionOrder.PRIORITY:
        out.add("--scheduling-policy", "priority")
    if system.victim is VictimPolicy.MOST_GENERATED:
        out.unflagged.append(
            "victim = most-generated: vLLM always preempts the last-arrived running request"
        )
    if era.is_v1:
        _v1(out, scenario, system, era)
    else:
        _v0(out, scenario, system)
    return out


def _prefix_caching(out: ServeArgs, enabled: bool, era: Era) -> None:
    if enabled:
        out.add("--enable-prefix-caching")
    elif era.has((0, 33, 0)):
        out.add("--disable-prefix-caching")
    elif era.is_v1:
        out.add("--no-enable-prefix-caching")
    # v0.6.4: off unless --enable-prefix-caching is given


def _weights(out: ServeArgs, scenario: Scenario) -> None:
    """--quantization fp8 quantizes a 16-bit checkpoint at load time; other formats come only
    from a checkpoint stored so (vLLM reads its quantization_config), which no flag makes."""
    dtype = str(scenario.model.weight_dtype)
    native = native_weight_dtype(scenario.model)
    if native is None or dtype == native:
        return
    if dtype == "fp8":
        out.add("--quantization", "fp8")
    else:
        out.unflagged.append(
            f"weight_dtype = {dtype}: no flag quantizes weights to {dtype} at load time; serve "
            f"a checkpoint stored in {dtype}"
        )


def _v0(out: ServeArgs, scenario: Scenario, system: SystemConfig) -> None:
    out.add("--enable-chunked-prefill", "False")
    out.add("--swap-space", f"{system.swap_space_gib:g}")
    if system.preemption is PreemptionPolicy.SWAP:
        out.add("--preemption-mode", "swap")
    elif system.preemption is PreemptionPolicy.RECOMPUTE:
        out.add("--preemption-mode", "recompute")
    if system.watermark is not None and system.watermark != 0.01:
        out.unflagged.append(
            f"watermark = {system.watermark:g}: vLLM V0 fixes its block manager's watermark at "
            "0.01 (vllm/core/block_manager.py); no flag changes it"
        )
    if scenario.data_parallel > 1 or scenario.expert_parallel:
        out.unflagged.append(
            "data_parallel / expert_parallel: v0.6.4 has neither --data-parallel-size nor "
            "--enable-expert-parallel"
        )


def _v1(out: ServeArgs, scenario: Scenario, system: SystemConfig, era: Era) -> None:
    if system.max_prefill_chunk is not None:
        out.add("--long-prefill-token-threshold", system.max_prefill_chunk)
    if scenario.data_parallel > 1:
        out.add("--data-parallel-size", scenario.data_parallel)
    if scenario.expert_parallel:
        out.add("--enable-expert-parallel")
    wide_ep_args(out, scenario, era, scenario.tensor_parallel)  # deploy/wide_ep_args.py
    if not system.hybrid_kv_cache_manager:
        out.add("--disable-hybrid-kv-cache-manager")
    # as the run decided it (execution/overhead.py for_system: the scenario's, else the
    # release's default, on from v0.14.0)
    is_async = for_system(scenario.execution, system).async_scheduling
    out.add("--async-scheduling" if is_async else "--no-async-scheduling")
    full_isl = system.scheduler_reserve_full_isl
    if full_isl is not None and era.has((0, 19, 0)):  # the flag arrived with v0.19.0
        out.add("--scheduler-reserve-full-isl" if full_isl else "--no-scheduler-reserve-full-isl")
    if system.watermark:
        out.unflagged.append(
            f"watermark = {system.watermark:g}: vLLM V1 has no admission watermark flag"
        )
    if system.kv_offload is not None:
        _offload(out, scenario, system, era)
    if system.speculative is not None:
        spec = system.speculative
        config: dict[str, object] = {
            "method": _SPEC_METHODS[spec.method],
            "num_speculative_tokens": spec.num_speculative_tokens,
        }
        if spec.method is SpecMethod.DRAFT_MODEL and spec.draft_model is not None:
            config["model"] = model_reference(get_model(spec.draft_model))[0]
        elif spec.method is SpecMethod.EAGLE:
            config["model"] = "<EAGLE head trained for this model>"
            out.notes.append(
                "speculative: name the EAGLE head trained for this model in --speculative-config"
            )
        out.add("--speculative-config", json.dumps(config, separators=(",", ":")))
        out.unflagged.append(
            "speculative acceptance: a property of the model and the traffic, not a flag"
        )


def _offload(out: ServeArgs, scenario: Scenario, system: SystemConfig, era: Era) -> None:
    """The CPU tier: from v0.33 --kv-offloading-size (GiB over the TP ranks) with the native
    backend (config/vllm.py `_post_init_kv_transfer_config` makes it the OffloadingConnector);
    v0.11.0 names the connector and its CPU blocks per rank (kv_offload/cpu.py
    `num_cpu_blocks`, blocks of the GPU's size)."""
    config = system.kv_offload
    assert config is not None
    if era.has((0, 33, 0)):
        out.add("--kv-offloading-size", f"{config.cpu_gib:g}")
        out.add("--kv-offloading-backend", "native")
    else:
        block_bytes = kv_capacity(scenario, system).block_bytes
        per_rank = int(config.cpu_gib * GIB / scenario.tensor_parallel // block_bytes)
        connector = {
            "kv_connector": "OffloadingConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {"num_cpu_blocks": per_rank},
        }
        out.add("--kv-transfer-config", json.dumps(connector, separators=(",", ":")))
    if config.load_gbps is not None or config.store_gbps is not None:
        out.unflagged.append(
            "kv_offload load_gbps / store_gbps: the host link's bandwidth is the machine's, "
            "not a vLLM setting"
        )

"""Whether a deployment fits its hardware: a tensor-parallel group inside one scale-up domain,
a domain no larger than the GPU's fabric builds, and an FP4 KV cache only where vLLM runs one.

    [gpu] scale_up_gpus = 36     GPUs of one NVLink/xGMI domain this deployment uses (default:
                                 the preset's, 72 for GB200 NVL72, 8 for an HGX/DGX or MI300
                                 platform; a custom GPU 8); at most the preset's
    [model] tensor_parallel      at most scale_up_gpus: the all-reduce is priced on the domain's
                                 link, and a group spanning domains (NCCL over the scale-out
                                 network) is not modelled
    [model] kv_dtype = "nvfp4"   vLLM v0.33.0 on (vllm/config/cache.py CacheDType), through
                                 FlashInfer's trtllm-gen attention on compute capability 10.x
                                 only (v1/attention/backends/flashinfer.py
                                 FlashInferBackend.supports_kv_cache_dtype, v0.34.0): a GPU
                                 whose tensor cores take NVFP4 (Blackwell), a vllm-v1 system of
                                 v0.33 or later, and MHA/GQA attention (vLLM's MLA backends take
                                 fp8 at most; state layers are not stored in FP4)

Each check returns the problem as one line, or None; the readers name the key.
"""

from __future__ import annotations

from collections.abc import Sequence

from pagesim.simulator.core.catalog import TENSOR_PEAKS, GPUSpec, KVDtype, ModelSpec
from pagesim.simulator.core.config import NEWEST_VLLM, Policy, SystemConfig
from pagesim.simulator.core.errors import choices_text
from pagesim.simulator.core.model_spec import LayerKind

NVFP4_KV_SINCE = (0, 33, 0)  # vLLM release with kv_cache_dtype "nvfp4" (absent in v0.11.0)


def scale_up_problem(gpu: GPUSpec, tensor_parallel: int) -> str | None:
    """Why `tensor_parallel` GPUs cannot form one group on `gpu`'s scale-up domain, or None."""
    if tensor_parallel <= gpu.scale_up_gpus:
        return None
    return (
        f"{tensor_parallel} GPUs do not fit one scale-up domain of {gpu.name} "
        f"({gpu.scale_up_gpus} GPUs on {gpu.interconnect.name}; [gpu] scale_up_gpus): a "
        f"tensor-parallel group across domains is not modelled; valid: 1 to {gpu.scale_up_gpus}"
    )


def scale_up_limit_problem(gpu: GPUSpec, preset_gpus: int | None, value: int) -> str | None:
    """Why [gpu] scale_up_gpus = `value` is more than the preset's fabric builds, or None."""
    if preset_gpus is None or value <= preset_gpus:
        return None
    return (
        f"{value} GPUs is more than one {gpu.name} domain holds ({preset_gpus} GPUs on "
        f"{gpu.interconnect.name}); valid: 1 to {preset_gpus}"
    )


def fp4_kv_gpus() -> list[str]:
    """The catalog GPUs that run an NVFP4 KV cache."""
    return [name for name, peaks in TENSOR_PEAKS.items() if peaks.runs_fp4("nvfp4")]


def kv_dtype_problem(
    gpu: GPUSpec, model: ModelSpec, kv_dtype: KVDtype, systems: Sequence[SystemConfig] = ()
) -> str | None:
    """Why vLLM would not run `kv_dtype` KV for `model` on `gpu` under `systems`, or None."""
    if kv_dtype is not KVDtype.NVFP4:
        return None
    peaks = TENSOR_PEAKS.get(gpu.name)
    others = choices_text(d.value for d in KVDtype if d is not KVDtype.NVFP4)
    if peaks is None or not peaks.runs_fp4("nvfp4"):
        return (
            f"nvfp4 KV runs only on GPUs with NVFP4 tensor cores ({choices_text(fp4_kv_gpus())}: "
            f"vLLM's FlashInfer trtllm-gen attention, compute capability 10.x); {gpu.name} has "
            f"none; valid here: {others}"
        )
    if model.mla is not None or model.num_layers_of(LayerKind.STATE):
        kind = "MLA" if model.mla is not None else "state (linear-attention) layers"
        return (
            f"nvfp4 KV is modelled for MHA/GQA attention only; {model.name} has {kind} "
            f"(vLLM's MLA backends take fp8 KV at most); valid here: {others}"
        )
    for system in systems:
        version = system.vllm_version or NEWEST_VLLM
        if system.policy is not Policy.VLLM_V1 or not version.has(NVFP4_KV_SINCE):
            runs = (
                f"vLLM v{version.value}"
                if system.policy is Policy.VLLM_V1
                else f"the {system.policy.value} policy"
            )
            return (
                f"nvfp4 KV came in vLLM v0.33.0; system {system.name!r} follows {runs}; "
                f"valid for it: {others}"
            )
    return None

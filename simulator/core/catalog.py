"""Model and GPU catalogs: the shapes that set KV bytes and FLOPs, the datasheets that set ceilings.

Models: the classic dense ones below and model_presets.py's, from their Hugging Face
`config.json` fields (docs/facts.md). GPUs: the data file core/presets/gpus.toml, read by
core/preset_files.py, each figure with its datasheet. Datasheet numbers are leads: a measured
profile (calibration/) always wins over them. scenario/catalog.py reads a scenario's [model] and
[gpu] into these.
"""

from __future__ import annotations

from pathlib import Path

from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.core.hardware import GB, GIB, GPUSpec, TensorPeaks
from pagesim.simulator.core.hf_config import load_hf_config
from pagesim.simulator.core.model_presets import MODERN_MODELS
from pagesim.simulator.core.model_spec import (
    KVDtype,
    ModelSpec,
    WeightDtype,
    parse_kv_dtype,
    parse_weight_dtype,
)
from pagesim.simulator.core.preset_files import shipped_presets

__all__ = [
    "CLASSIC_MODELS",
    "GB",
    "GIB",
    "GPUS",
    "MODELS",
    "TENSOR_PEAKS",
    "GPUSpec",
    "KVDtype",
    "ModelSpec",
    "TensorPeaks",
    "WeightDtype",
    "count_params",
    "custom_gpu",
    "get_gpu",
    "get_model",
    "load_hf_config",
    "parse_kv_dtype",
    "parse_weight_dtype",
    "resolve_model",
]


def count_params(
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    hidden_size: int,
    intermediate_size: int,
    vocab_size: int,
    is_gated_mlp: bool,
    tied_embeddings: bool = False,
) -> int:
    """Parameters of a dense model from shapes: layers' linear weights plus embedding (and LM
    head unless tied). MoE, MLA and hybrid models count with `ModelSpec.count_params`."""
    probe = ModelSpec(
        "probe",
        num_layers,
        num_heads,
        num_kv_heads,
        head_dim,
        hidden_size,
        intermediate_size,
        vocab_size,
        is_gated_mlp,
        1,
        0,
        tied_embeddings=tied_embeddings,
    )
    return probe.count_params()


def _preset(
    name: str,
    layers: int,
    heads: int,
    kv_heads: int,
    hidden: int,
    intermediate: int,
    vocab: int,
    gated: bool,
    max_len: int,
    params: int | None = None,
) -> ModelSpec:
    head_dim = 128  # every classic model uses 128 (docs/facts.md, "Models")
    if params is None:
        params = count_params(layers, heads, kv_heads, head_dim, hidden, intermediate, vocab, gated)
    return ModelSpec(
        name, layers, heads, kv_heads, head_dim, hidden, intermediate, vocab, gated, max_len, params
    )


# Published parameter counts (docs/facts.md) where given; others are counted from the shapes.
CLASSIC_MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        _preset("llama-2-7b", 32, 32, 32, 4096, 11008, 32000, True, 4096, 6_740_000_000),
        _preset("llama-2-13b", 40, 40, 40, 5120, 13824, 32000, True, 4096, 13_020_000_000),
        _preset("llama-2-70b", 80, 64, 8, 8192, 28672, 32000, True, 4096, 68_980_000_000),
        _preset("llama-3-8b", 32, 32, 8, 4096, 14336, 128256, True, 8192, 8_030_000_000),
        _preset("llama-3-70b", 80, 64, 8, 8192, 28672, 128256, True, 8192),
        _preset("mistral-7b-v0.1", 32, 32, 8, 4096, 14336, 32000, True, 32768),
        _preset("qwen2.5-7b", 28, 28, 4, 3584, 18944, 152064, True, 32768),
        _preset("qwen2.5-72b", 80, 64, 8, 8192, 29568, 152064, True, 32768),
        _preset("opt-13b", 40, 40, 40, 5120, 20480, 50272, False, 2048, 12_850_000_000),
        _preset("opt-66b", 64, 72, 72, 9216, 36864, 50272, False, 2048),
        _preset("opt-175b", 96, 96, 96, 12288, 49152, 50272, False, 2048),
    )
}

# The dense 16-bit models of docs/facts.md (the paged-attention kernel's catalog), then models
# served in 2025-26: MoE, MLA, sliding-window and hybrid, each from its published config.json.
MODELS: dict[str, ModelSpec] = {**CLASSIC_MODELS, **MODERN_MODELS}


def get_model(name: str) -> ModelSpec:
    """A preset by name (case-insensitive), or an InputError listing the known ones."""
    model = MODELS.get(name.lower())
    if model is None:
        raise InputError(f"unknown model {name!r}; known models: {choices_text(MODELS)}")
    return model


def resolve_model(name_or_path: str) -> ModelSpec:
    """A preset name, or a path to a config.json (anything ending in .json or naming a file)."""
    if name_or_path.endswith(".json") or Path(name_or_path).is_file():
        return load_hf_config(name_or_path)
    return get_model(name_or_path)


# The GPU presets (core/presets/gpus.toml), by name, and their tensor-core peaks by weight type: a
# GPU not among these (a custom [gpu]) has only its 16-bit figure, so every weight dtype is priced
# at it, and the report says so (execution/precision.py).
GPUS: dict[str, GPUSpec] = shipped_presets().gpus
TENSOR_PEAKS: dict[str, TensorPeaks] = shipped_presets().tensor_peaks


def get_gpu(name: str) -> GPUSpec:
    """A GPU preset by name (case-insensitive), or an InputError listing the known ones."""
    gpu = GPUS.get(name.lower())
    if gpu is None:
        raise InputError(f"unknown GPU {name!r}; known GPUs: {choices_text(GPUS)}")
    return gpu


def custom_gpu(
    name: str,
    memory_gib: float,
    mem_bandwidth_gbps: float,
    fp16_tflops: float,
    host_link_gbps: float = 25.0,
) -> GPUSpec:
    """A user-defined GPU; every figure must be positive."""
    for field, value in (
        ("memory_gib", memory_gib),
        ("mem_bandwidth_gbps", mem_bandwidth_gbps),
        ("fp16_tflops", fp16_tflops),
        ("host_link_gbps", host_link_gbps),
    ):
        if not value > 0:
            raise InputError(f"custom GPU {name!r}: {field} must be > 0, got {value!r}")
    presets = shipped_presets()  # what gpus.toml's [custom_gpu] gives a GPU without a preset
    return GPUSpec(
        name,
        int(memory_gib * GIB),
        mem_bandwidth_gbps * GB,
        fp16_tflops * 1e12,
        host_link_gbps * GB,
        presets.custom_factors,
        presets.custom_interconnect,
    )

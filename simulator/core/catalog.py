"""Model and GPU catalogs: the shapes that set KV bytes and FLOPs, the datasheets that set ceilings.

Figures and their sources: docs/facts.md (Hugging Face `config.json` fields; GPU datasheets).
Datasheet numbers are leads: a measured profile (calibration/) always wins over them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.core.hf_config import load_hf_config
from pagesim.simulator.core.model_presets import MODERN_MODELS
from pagesim.simulator.core.model_spec import (
    KVDtype,
    ModelSpec,
    WeightDtype,
    parse_kv_dtype,
    parse_weight_dtype,
)

__all__ = [
    "CLASSIC_MODELS",
    "GB",
    "GIB",
    "GPUS",
    "MODELS",
    "GPUSpec",
    "KVDtype",
    "ModelSpec",
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
from pagesim.simulator.core.hardware import (
    A40,
    A100,
    DGX_A100,
    DGX_H100,
    GENERIC_FACTORS,
    H100,
    PCIE4,
    PCIE4_NO_P2P,
    Interconnect,
    RooflineFactors,
    extrapolated,
)

GIB = 2**30


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


@dataclass(frozen=True, slots=True)
class GPUSpec:
    """Datasheet ceilings of one GPU (bandwidths in bytes/s, compute in FLOP/s), the roofline's
    factors for it and the link its tensor-parallel all-reduce crosses (hardware.py)."""

    name: str
    memory_bytes: int
    mem_bandwidth_bps: float
    fp16_flops: float
    host_link_bps: float  # effective PCIe bandwidth for swapping KV blocks to CPU memory
    factors: RooflineFactors = GENERIC_FACTORS
    interconnect: Interconnect = PCIE4


GB = 1e9

# Memory as marketed ("80 GB" HBM is 80 GiB); bandwidths and FLOP/s in decimal units (NVIDIA's
# datasheets and product pages, linked in docs/facts.md, "GPUs";
# the A40 from NVIDIA's A40 datasheet: 48 GB GDDR6, 696 GB/s, 149.7 TFLOP/s dense fp16 tensor).
# Factors: fitted where Vidur measured the GPU (A100-80GB, H100-SXM, A40), else the closest
# measured GPU's, marked extrapolated: A100-40GB <- A100-80GB (same chip); H200 <- H100 (same
# chip, more HBM); L40S, L4, RTX 4090 (Ada, GDDR6/6X, no NVLink) <- A40 (Ampere, GDDR6, PCIe).
GPUS: dict[str, GPUSpec] = {
    g.name: g
    for g in (
        GPUSpec(
            "a100-40gb",
            40 * GIB,
            1555 * GB,
            312e12,
            25 * GB,
            extrapolated(A100, "a100-80gb"),
            DGX_A100,
        ),
        GPUSpec("a100-80gb", 80 * GIB, 2039 * GB, 312e12, 25 * GB, A100, DGX_A100),
        GPUSpec("h100-sxm", 80 * GIB, 3350 * GB, 989e12, 50 * GB, H100, DGX_H100),
        GPUSpec(
            "h200-sxm",
            141 * GIB,
            4800 * GB,
            989e12,
            50 * GB,
            extrapolated(H100, "h100-sxm"),
            DGX_H100,
        ),
        GPUSpec("l40s", 48 * GIB, 864 * GB, 362e12, 25 * GB, extrapolated(A40, "a40"), PCIE4),
        GPUSpec("l4", 24 * GIB, 300 * GB, 121e12, 25 * GB, extrapolated(A40, "a40"), PCIE4),
        GPUSpec(
            "rtx-4090", 24 * GIB, 1008 * GB, 165e12, 25 * GB, extrapolated(A40, "a40"), PCIE4_NO_P2P
        ),
        GPUSpec("a40", 48 * GIB, 696 * GB, 149.7e12, 25 * GB, A40, PCIE4),
    )
}


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
    return GPUSpec(
        name,
        int(memory_gib * GIB),
        mem_bandwidth_gbps * GB,
        fp16_tflops * 1e12,
        host_link_gbps * GB,
    )

"""Model and GPU catalogs: the shapes that set KV bytes and FLOPs, the datasheets that set ceilings.

Figures come from ../shared/FACTS.md (Hugging Face `config.json` fields; datasheet GPU numbers).
Datasheet numbers are leads: a measured profile (calibration/) always wins over them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from pagesim.simulator.core.errors import InputError, choices_text

GIB = 2**30


class KVDtype(Enum):
    """Element type of the KV cache; sets bytes per element."""

    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"

    @property
    def num_bytes(self) -> int:
        return 1 if self is KVDtype.FP8 else 2


def parse_kv_dtype(value: str, where: str = "kv dtype") -> KVDtype:
    try:
        return KVDtype(value.lower())
    except ValueError:
        valid = choices_text(d.value for d in KVDtype)
        raise InputError(f"{where}: unknown KV dtype {value!r}; valid: {valid}") from None


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Shapes of a decoder-only transformer, as its Hugging Face config.json gives them."""

    name: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    is_gated_mlp: bool
    max_seq_len: int
    num_params: int  # parameters, for weight bytes; computed from shapes when not published

    def kv_heads_per_gpu(self, tensor_parallel: int = 1) -> int:
        """KV heads each GPU stores: max(1, kv_heads / t) (MQA/GQA heads are replicated)."""
        return max(1, self.num_kv_heads // tensor_parallel)

    def kv_bytes_per_token(self, dtype: KVDtype = KVDtype.FP16, tensor_parallel: int = 1) -> int:
        """2 (K and V) × layers × kv heads × head dim × bytes per element, per GPU."""
        kv_heads = self.kv_heads_per_gpu(tensor_parallel)
        return 2 * self.num_layers * kv_heads * self.head_dim * dtype.num_bytes

    def weight_bytes(self, bytes_per_param: int = 2, tensor_parallel: int = 1) -> int:
        """Weight bytes each GPU holds (weights split evenly under tensor parallelism)."""
        return self.num_params * bytes_per_param // tensor_parallel

    @property
    def params_per_layer(self) -> int:
        """Linear-layer parameters of one decoder layer (attention projections + MLP)."""
        q_out = self.num_heads * self.head_dim
        kv_out = self.num_kv_heads * self.head_dim
        attention = self.hidden_size * (q_out + 2 * kv_out) + q_out * self.hidden_size
        mlp_matrices = 3 if self.is_gated_mlp else 2
        return attention + mlp_matrices * self.hidden_size * self.intermediate_size


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
    """Parameters from shapes: layers' linear weights plus embedding (and LM head unless tied)."""
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
    )
    embeddings = vocab_size * hidden_size * (1 if tied_embeddings else 2)
    return num_layers * probe.params_per_layer + embeddings


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
    head_dim = 128  # every model of FACTS.md uses 128
    if params is None:
        params = count_params(layers, heads, kv_heads, head_dim, hidden, intermediate, vocab, gated)
    return ModelSpec(
        name, layers, heads, kv_heads, head_dim, hidden, intermediate, vocab, gated, max_len, params
    )


# Published parameter counts (FACTS.md) where given; others are counted from the shapes.
MODELS: dict[str, ModelSpec] = {
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


def get_model(name: str) -> ModelSpec:
    """A preset by name (case-insensitive), or an InputError listing the known ones."""
    model = MODELS.get(name.lower())
    if model is None:
        raise InputError(f"unknown model {name!r}; known models: {choices_text(MODELS)}")
    return model


# The largest shape a config.json may give (vocabularies, hidden sizes and context lengths of
# real models are far below it): products of shapes stay exact, and convertible to float.
MAX_CONFIG_INT = 10**9


def _config_int(
    config: Mapping[str, object], path: Path, *keys: str, default: int | None = None
) -> int:
    for key in keys:
        if key in config:
            value = config[key]
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
                raise InputError(f"{path}: field {key!r} must be a positive integer, got {shown}")
            if value > MAX_CONFIG_INT:
                raise InputError(
                    f"{path}: field {key!r} is {len(str(value))} digits long; "
                    f"valid: 1 to {MAX_CONFIG_INT:,}"
                )
            return value
    if default is not None:
        return default
    raise InputError(f"{path}: missing field {' or '.join(repr(k) for k in keys)}")


def load_hf_config(path: str | Path) -> ModelSpec:
    """A ModelSpec from a Hugging Face config.json (Llama/Mistral/Qwen or OPT field names)."""
    path = Path(path)
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: no such model config file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read model config: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON (line {exc.lineno}): {exc.msg}") from None
    except RecursionError:
        raise InputError(
            f"{path}: not a config.json: arrays or objects nested too deeply"
        ) from None
    except ValueError as exc:  # e.g. an integer beyond Python's digit limit
        raise InputError(f"{path}: not valid JSON: {str(exc).split(';')[0]}") from None
    if not isinstance(config, dict):
        raise InputError(f"{path}: a config.json must hold a JSON object")
    is_opt = config.get("model_type") == "opt"
    layers = _config_int(config, path, "num_hidden_layers", "n_layer")
    hidden = _config_int(config, path, "hidden_size", "n_embd")
    heads = _config_int(config, path, "num_attention_heads", "n_head")
    kv_heads = _config_int(config, path, "num_key_value_heads", default=heads)
    if heads % kv_heads:
        raise InputError(
            f"{path}: num_attention_heads ({heads}) is not a multiple of "
            f"num_key_value_heads ({kv_heads})"
        )
    if "head_dim" not in config and hidden < heads:
        raise InputError(
            f"{path}: hidden_size ({hidden}) is smaller than num_attention_heads ({heads}): "
            "each head would have 0 dimensions; give head_dim or fix the shapes"
        )
    head_dim = _config_int(config, path, "head_dim", default=hidden // heads)
    intermediate = _config_int(config, path, "intermediate_size", "ffn_dim", "n_inner")
    vocab = _config_int(config, path, "vocab_size")
    max_len = _config_int(config, path, "max_position_embeddings", "n_positions", default=2048)
    gated = not is_opt and config.get("hidden_act", "silu") in (
        "silu",
        "swiglu",
        "gelu_pytorch_tanh",
    )
    tied = bool(config.get("tie_word_embeddings", is_opt))
    params = count_params(
        layers, heads, kv_heads, head_dim, hidden, intermediate, vocab, gated, tied
    )
    name = str(config.get("_name_or_path") or path.parent.name or path.stem)
    return ModelSpec(
        name, layers, heads, kv_heads, head_dim, hidden, intermediate, vocab, gated, max_len, params
    )


def resolve_model(name_or_path: str) -> ModelSpec:
    """A preset name, or a path to a config.json (anything ending in .json or naming a file)."""
    if name_or_path.endswith(".json") or Path(name_or_path).is_file():
        return load_hf_config(name_or_path)
    return get_model(name_or_path)


@dataclass(frozen=True, slots=True)
class GPUSpec:
    """Datasheet ceilings of one GPU. Bandwidths in bytes/s, compute in FLOP/s."""

    name: str
    memory_bytes: int
    mem_bandwidth_bps: float
    fp16_flops: float
    host_link_bps: float  # effective PCIe bandwidth for swapping KV blocks to CPU memory


GB = 1e9

# Memory as marketed ("80 GB" HBM is 80 GiB); bandwidths and FLOP/s in decimal units.
GPUS: dict[str, GPUSpec] = {
    g.name: g
    for g in (
        GPUSpec("a100-40gb", 40 * GIB, 1555 * GB, 312e12, 25 * GB),
        GPUSpec("a100-80gb", 80 * GIB, 2039 * GB, 312e12, 25 * GB),
        GPUSpec("h100-sxm", 80 * GIB, 3350 * GB, 989e12, 50 * GB),
        GPUSpec("h200-sxm", 141 * GIB, 4800 * GB, 989e12, 50 * GB),
        GPUSpec("l40s", 48 * GIB, 864 * GB, 362e12, 25 * GB),
        GPUSpec("l4", 24 * GIB, 300 * GB, 121e12, 25 * GB),
        GPUSpec("rtx-4090", 24 * GIB, 1008 * GB, 165e12, 25 * GB),
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

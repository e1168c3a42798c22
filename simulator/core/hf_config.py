"""A ModelSpec from a Hugging Face config.json: dense Llama/Mistral/Qwen/OPT, and the fields of
the 2025-26 families: MoE (Mixtral, Qwen3-MoE, DeepSeek, gpt-oss), MLA (DeepSeek), per-layer
attention kinds (`layer_types`, Gemma 3's `sliding_window_pattern`, Qwen3-Next's
`full_attention_interval`), a multimodal config's `text_config`, and `quantization_config`.

Bad input is one InputError naming the file, the field, what is wrong and how to fix it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.core.model_spec import (
    LayerKind,
    MLASpec,
    ModelSpec,
    MoESpec,
    QuantScope,
    StateSpec,
    WeightDtype,
)

Config = Mapping[str, object]


# The largest shape a config.json may give (vocabularies, hidden sizes and context lengths of
# real models are far below it): products of shapes stay exact, and convertible to float.
MAX_CONFIG_INT = 10**9
# Layers: a model keeps one kind per layer (a tuple of them, walked to count parameters and lay
# out the KV cache), so a million layers is ~8 MB and seconds of set-up; published decoders
# have a few hundred at most.
MAX_LAYERS = 10**6


def _config_int(
    config: Config,
    path: Path,
    *keys: str,
    default: int | None = None,
    maximum: int = MAX_CONFIG_INT,
) -> int:
    for key in keys:
        if key in config and config[key] is not None:
            value = config[key]
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
                raise InputError(f"{path}: field {key!r} must be a positive integer, got {shown}")
            if value > maximum:
                digits = len(str(value))
                shown = f"{value:,}" if digits <= 20 else f"{digits} digits long"
                raise InputError(f"{path}: field {key!r} is {shown}; valid: 1 to {maximum:,}")
            return value
    if default is not None:
        return default
    raise InputError(f"{path}: missing field {' or '.join(repr(k) for k in keys)}")


def _read(path: Path) -> dict[str, object]:
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
    text = config.get("text_config")
    if isinstance(text, dict):  # a multimodal model (Gemma 3): the language model's fields
        return {**config, **text}
    return config


def _moe(config: Config, path: Path, hidden_intermediate: int, num_layers: int) -> MoESpec | None:
    expert_keys = ("n_routed_experts", "num_experts", "num_local_experts")
    if not any(config.get(k) is not None for k in expert_keys):
        return None
    experts = _config_int(config, path, *expert_keys)
    per_token_keys = ("num_experts_per_tok", "experts_per_token")
    per_token = _config_int(config, path, *per_token_keys)
    if per_token > experts:
        key = next(k for k in per_token_keys if config.get(k) is not None)
        experts_key = next(k for k in expert_keys if config.get(k) is not None)
        raise InputError(
            f"{path}: field {key!r} ({per_token}) exceeds the routed experts {experts_key!r} "
            f"({experts}); a token routes to at most every expert: set {key!r} <= {experts}"
        )
    size = _config_int(config, path, "moe_intermediate_size", default=hidden_intermediate)
    shared, shared_size = 0, 0
    if config.get("n_shared_experts") is not None:  # DeepSeek: n experts of the routed size
        shared, shared_size = _config_int(config, path, "n_shared_experts"), size
    elif config.get("shared_expert_intermediate_size") is not None:  # Qwen3-Next: one expert
        shared, shared_size = 1, _config_int(config, path, "shared_expert_intermediate_size")
    dense = config.get("first_k_dense_replace", 0)
    if isinstance(dense, bool) or not isinstance(dense, int) or dense < 0:
        raise InputError(f"{path}: field 'first_k_dense_replace' must be an integer >= 0")
    if dense >= num_layers:
        # vLLM builds no MoE layer then and refuses the model (v0.11.0
        # model_executor/models/deepseek_v2.py DeepseekV2ForCausalLM: "No DeepseekV2MoE layer
        # found in model.layers"); pricing experts on no layer gave negative expert bytes.
        shown = f"{dense:,}" if len(str(dense)) <= 20 else f"{len(str(dense))} digits long"
        raise InputError(
            f"{path}: field 'first_k_dense_replace' is {shown}, but the model has "
            f"{num_layers:,} layers (num_hidden_layers): a mixture of experts needs at least "
            f"one MoE layer; valid: 0 to {num_layers - 1:,}, or remove the expert fields for a "
            "dense model"
        )
    return MoESpec(experts, per_token, size, shared, shared_size, dense)


def _mla(config: Config, path: Path) -> MLASpec | None:
    if config.get("kv_lora_rank") is None:
        return None
    q_lora = config.get("q_lora_rank")
    return MLASpec(
        _config_int(config, path, "kv_lora_rank"),
        _config_int(config, path, "qk_rope_head_dim"),
        _config_int(config, path, "qk_nope_head_dim"),
        _config_int(config, path, "v_head_dim"),
        None if q_lora is None else _config_int(config, path, "q_lora_rank"),
    )


def _layer_kinds(config: Config, path: Path, num_layers: int) -> tuple[LayerKind, ...]:
    """Each layer's kind from `layer_types`, or the pattern fields older configs carry."""
    types = config.get("layer_types")
    if types is not None:
        valid = {k.value: k for k in LayerKind}
        if not isinstance(types, list) or len(types) != num_layers:
            raise InputError(
                f"{path}: field 'layer_types' must list one kind per layer ({num_layers})"
            )
        for value in types:
            if value not in valid:
                raise InputError(
                    f"{path}: field 'layer_types' has {value!r}; valid: {choices_text(valid)}"
                )
        return tuple(valid[str(v)] for v in types)
    if config.get("sliding_window_pattern") is not None:  # Gemma 3: every p-th layer global
        period = _config_int(config, path, "sliding_window_pattern")
        return _every(num_layers, period, LayerKind.FULL, LayerKind.SLIDING)
    if config.get("full_attention_interval") is not None:  # Qwen3-Next: every k-th layer full
        period = _config_int(config, path, "full_attention_interval")
        return _every(num_layers, period, LayerKind.FULL, LayerKind.STATE)
    if config.get("model_type") == "gpt_oss":  # sliding at even layers (openai/gpt-oss)
        return tuple(LayerKind.SLIDING if i % 2 == 0 else LayerKind.FULL for i in range(num_layers))
    return ()


def _every(n: int, period: int, every: LayerKind, other: LayerKind) -> tuple[LayerKind, ...]:
    return tuple(every if (i + 1) % period == 0 else other for i in range(n))


def _window(config: Config, path: Path, kinds: tuple[LayerKind, ...]) -> int | None:
    value = config.get("sliding_window")
    if value is None:
        if LayerKind.SLIDING in kinds:
            raise InputError(f"{path}: sliding layers but no field 'sliding_window'")
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(
            f"{path}: field 'sliding_window' must be a positive number of tokens, got "
            f"{value!r}; set the window the sliding layers attend over, or null for none"
        )
    return value if LayerKind.SLIDING in kinds else None


def _state(config: Config, path: Path, kinds: tuple[LayerKind, ...]) -> StateSpec | None:
    if LayerKind.STATE not in kinds:
        return None
    return StateSpec(
        _config_int(config, path, "linear_num_key_heads"),
        _config_int(config, path, "linear_num_value_heads"),
        _config_int(config, path, "linear_key_head_dim"),
        _config_int(config, path, "linear_value_head_dim"),
        _config_int(config, path, "linear_conv_kernel_dim"),
    )


QUANT_METHODS = ("fp8", "awq", "gptq", "mxfp4", "modelopt")

# Checkpoints that ship a multi-token-prediction module: the model types (and architectures)
# vLLM maps to an MTP drafter for speculative method "mtp" (v0.11.0 vllm/config/speculative.py
# SpeculativeConfig.hf_config_override); any other model has none to draft with.
MTP_MODEL_TYPES = frozenset(
    (
        "deepseek_v3",
        "deepseek_v32",
        "deepseek_mtp",
        "ernie4_5_moe",
        "ernie_mtp",
        "qwen3_next",
        "qwen3_next_mtp",
        "longcat_flash",
        "longcat_flash_mtp",
        "glm4_moe_mtp",
        "mimo_mtp",
    )
)
MTP_ARCHITECTURES = frozenset(("MiMoForCausalLM", "Glm4MoeForCausalLM"))


def _has_mtp(config: Config) -> bool:
    architectures = config.get("architectures")
    first = architectures[0] if isinstance(architectures, list) and architectures else None
    if config.get("num_nextn_predict_layers") == 0:
        return False  # a DeepSeek config that says it ships none
    return config.get("model_type") in MTP_MODEL_TYPES or first in MTP_ARCHITECTURES


def _quantization(config: Config, path: Path, is_moe: bool) -> tuple[WeightDtype, QuantScope]:
    quant = config.get("quantization_config")
    if not isinstance(quant, dict):
        return WeightDtype.BF16, QuantScope.LINEAR
    method = str(quant.get("quant_method", "")).lower()
    if method == "fp8":
        return WeightDtype.FP8, QuantScope.LINEAR
    if method in ("awq", "gptq") and quant.get("bits", 4) == 4:
        return WeightDtype.INT4, QuantScope.LINEAR
    if method == "mxfp4":  # gpt-oss: experts only (attention and router in modules_to_not_convert)
        return WeightDtype.MXFP4, QuantScope.EXPERTS if is_moe else QuantScope.LINEAR
    if method == "modelopt" and str(quant.get("quant_algo", "")).upper() == "NVFP4":
        return WeightDtype.NVFP4, QuantScope.LINEAR
    if method == "modelopt" and str(quant.get("quant_algo", "")).upper() == "FP8":
        return WeightDtype.FP8, QuantScope.LINEAR
    raise InputError(
        f"{path}: field 'quantization_config' has a scheme pagesim does not know "
        f"(quant_method {method!r}); known: {choices_text(QUANT_METHODS)} (4-bit awq/gptq, "
        "modelopt FP8/NVFP4); remove it and pass --weight-dtype instead"
    )


def load_hf_config(path: str | Path) -> ModelSpec:
    """A ModelSpec from a Hugging Face config.json (see the module docstring)."""
    path = Path(path)
    config = _read(path)
    is_opt = config.get("model_type") == "opt"
    layers = _config_int(config, path, "num_hidden_layers", "n_layer", maximum=MAX_LAYERS)
    hidden = _config_int(config, path, "hidden_size", "n_embd")
    heads = _config_int(config, path, "num_attention_heads", "n_head")
    kv_heads = _config_int(config, path, "num_key_value_heads", default=heads)
    if heads % kv_heads:
        raise InputError(
            f"{path}: num_attention_heads ({heads}) is not a multiple of "
            f"num_key_value_heads ({kv_heads})"
        )
    mla = _mla(config, path)
    if "head_dim" not in config and mla is None and hidden < heads:
        raise InputError(
            f"{path}: hidden_size ({hidden}) is smaller than num_attention_heads ({heads}): "
            "each head would have 0 dimensions; give head_dim or fix the shapes"
        )
    default_head = hidden // heads if mla is None else mla.qk_nope_head_dim + mla.qk_rope_head_dim
    head_dim = _config_int(config, path, "head_dim", default=default_head)
    intermediate = _config_int(config, path, "intermediate_size", "ffn_dim", "n_inner")
    vocab = _config_int(config, path, "vocab_size")
    max_len = _config_int(config, path, "max_position_embeddings", "n_positions", default=2048)
    act = config.get("hidden_act", config.get("hidden_activation", "silu"))
    gated = not is_opt and act in ("silu", "swiglu", "gelu_pytorch_tanh")
    tied = bool(config.get("tie_word_embeddings", is_opt))
    moe = _moe(config, path, intermediate, layers)
    kinds = _layer_kinds(config, path, layers)
    if kinds and all(k is LayerKind.FULL for k in kinds):
        kinds = ()  # all full attention: the plain model
    weight_dtype, scope = _quantization(config, path, moe is not None)
    name = str(config.get("_name_or_path") or path.parent.name or path.stem)
    spec = ModelSpec(
        name,
        layers,
        heads,
        kv_heads,
        head_dim,
        hidden,
        intermediate,
        vocab,
        gated,
        max_len,
        0,
        weight_dtype=weight_dtype,
        quant_scope=scope,
        moe=moe,
        mla=mla,
        layer_kinds=kinds,
        sliding_window=_window(config, path, kinds),
        state=_state(config, path, kinds),
        tied_embeddings=tied,
        has_mtp=_has_mtp(config),
    )
    return replace(spec, num_params=spec.count_params())

"""The models served at scale in 2025-26, from their published Hugging Face config.json.

Every figure below is a config.json field of the model named (huggingface.co/<repo>/config.json;
for Gemma 3 its `text_config`), read from public copies of those files and, where the makers
publish one, their reference code (named per entry). Parameter counts are counted from the
shapes (`ModelSpec.count_params`); tests/simulator/core/test_model_presets.py pins them
against the makers' published totals.

Figures first set down from memory, cross-checked later against copies of the config.json files
in a public code index (third-party copies: the index names no repository for most of them, so
they are described here by what they are); every figure matched, none changed:
- Gemma-3-27B num_hidden_layers 62, vocab_size 262208, max_position_embeddings 131072: a
  cached-config table keyed "google/gemma-3-27b" (and "google/medgemma-27b") with
  text_config {hidden_size 5376, intermediate_size 21504, 62 layers, 16 KV heads of 128,
  sliding_window 1024}; vocab 262208 and 131072 positions also in Gemma 3 4B/12B copies.
- Mixtral-8x7B max_position_embeddings 32768: a printed MixtralConfig of
  mistralai/Mixtral-8x7B-Instruct-v0.1; vocab_size 32000: a reimplementation's Mixtral 8x7B
  config (with a 32768 context) and Mixtral's Llama-2-era tokenizer.
- Qwen3-235B-A22B max_position_embeddings 40960: a KV-cache calculator's config table
  (94 layers, 64 heads, 4 KV heads of 128, hidden 4096).
- Qwen3-Next vocab_size 151936, max_position_embeddings 262144: a transcription of the
  Qwen3-Coder-Next release config.json (model_type qwen3_next, the same 48-layer
  architecture: full_attention_interval 4, 16 x 256 heads, 2 KV heads, 512 experts, 10 per
  token, linear-attention heads 16/32 of 128, conv kernel 4).
- Llama-3.1-70B max_position_embeddings 131072: the same calculator's table (Llama-3.1-8B too);
  Llama-3.1-405B's 131072 only in a heuristic config table and Meta's "128K context" for the
  3.1 family: the least checked figure here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pagesim.simulator.core.model_spec import (
    LayerKind,
    MLASpec,
    ModelSpec,
    MoESpec,
    QuantScope,
    StateSpec,
    WeightDtype,
)


def _model(
    name: str,
    layers: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    hidden: int,
    intermediate: int,
    vocab: int,
    max_len: int,
    **extra: Any,
) -> ModelSpec:
    """A gated-MLP model whose parameter count is counted from its shapes."""
    spec = ModelSpec(
        name, layers, heads, kv_heads, head_dim, hidden, intermediate, vocab, True, max_len, 0,
        **extra,
    )  # fmt: skip
    return replace(spec, num_params=spec.count_params())


def alternating(
    num_layers: int, period: int, every: LayerKind, other: LayerKind
) -> tuple[LayerKind, ...]:
    """`every` at layers period-1, 2*period-1, ... (1-based multiples of `period`), `other`
    elsewhere: Gemma 3's sliding_window_pattern and Qwen3-Next's full_attention_interval."""
    return tuple(every if (i + 1) % period == 0 else other for i in range(num_layers))


def _gpt_oss(name: str, layers: int, experts: int) -> ModelSpec:
    # openai/gpt-oss config.json: hidden_size 2880, intermediate_size 2880 (per expert),
    # num_attention_heads 64, num_key_value_heads 8, head_dim 64, vocab_size 201088,
    # max_position_embeddings 131072, experts_per_token 4, sliding_window 128, layer_types
    # alternating sliding_attention / full_attention from layer 0 (the reference code,
    # github.com/openai/gpt-oss gpt_oss/torch/model.py AttentionBlock: `sliding_window if
    # layer_idx % 2 == 0`). Experts ship in MXFP4; attention, router, embeddings in bf16
    # (quantization_config modules_to_not_convert).
    kinds = tuple(LayerKind.SLIDING if i % 2 == 0 else LayerKind.FULL for i in range(layers))
    return _model(
        name, layers, 64, 8, 64, 2880, 2880, 201088, 131072,
        moe=MoESpec(experts, 4, 2880),
        layer_kinds=kinds,
        sliding_window=128,
        weight_dtype=WeightDtype.MXFP4,
        quant_scope=QuantScope.EXPERTS,
    )  # fmt: skip


MODERN_MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        # meta-llama/Llama-3.1-{8B,70B,405B} config.json: rope-scaled to 131072 positions.
        _model("llama-3.1-8b", 32, 32, 8, 128, 4096, 14336, 128256, 131072),
        _model("llama-3.1-70b", 80, 64, 8, 128, 8192, 28672, 128256, 131072),
        _model("llama-3.1-405b", 126, 128, 8, 128, 16384, 53248, 128256, 131072),
        # mistralai/Mixtral-8x7B-v0.1: num_local_experts 8, num_experts_per_tok 2, experts of
        # intermediate_size 14336; sliding_window null (every layer full attention).
        _model(
            "mixtral-8x7b", 32, 32, 8, 128, 4096, 14336, 32000, 32768,
            moe=MoESpec(8, 2, 14336),
        ),
        # Qwen/Qwen3-30B-A3B: num_experts 128, num_experts_per_tok 8, moe_intermediate_size
        # 768, head_dim 128 (not hidden / heads), decoder_sparse_step 1, mlp_only_layers [].
        _model(
            "qwen3-30b-a3b", 48, 32, 4, 128, 2048, 6144, 151936, 40960,
            moe=MoESpec(128, 8, 768),
        ),
        # Qwen/Qwen3-235B-A22B: as above with moe_intermediate_size 1536.
        _model(
            "qwen3-235b-a22b", 94, 64, 4, 128, 4096, 12288, 151936, 40960,
            moe=MoESpec(128, 8, 1536),
        ),
        # deepseek-ai/DeepSeek-V3: MLA (kv_lora_rank 512, qk_rope_head_dim 64, qk_nope_head_dim
        # 128, v_head_dim 128, q_lora_rank 1536); n_routed_experts 256, num_experts_per_tok 8,
        # n_shared_experts 1, moe_intermediate_size 2048, first_k_dense_replace 3; shipped in
        # FP8 (quantization_config quant_method "fp8", e4m3). head_dim here is the q/k head
        # (qk_nope + qk_rope = 192); the 14B MTP module (num_nextn_predict_layers 1) is not
        # counted: it is the 685B - 671B of the release.
        _model(
            "deepseek-v3", 61, 128, 128, 192, 7168, 18432, 129280, 163840,
            moe=MoESpec(256, 8, 2048, 1, 2048, 3),
            mla=MLASpec(512, 64, 128, 128, 1536),
            weight_dtype=WeightDtype.FP8,
            has_mtp=True,
        ),
        _gpt_oss("gpt-oss-20b", 24, 32),
        _gpt_oss("gpt-oss-120b", 36, 128),
        # google/gemma-3-27b-it text_config: head_dim 128, sliding_window 1024,
        # sliding_window_pattern 6 (five local layers, then one global), embeddings tied.
        _model(
            "gemma-3-27b", 62, 32, 16, 128, 5376, 21504, 262208, 131072,
            layer_kinds=alternating(62, 6, LayerKind.FULL, LayerKind.SLIDING),
            sliding_window=1024,
            tied_embeddings=True,
        ),
        # Qwen/Qwen3-Next-80B-A3B-Instruct: full_attention_interval 4 (3 gated-DeltaNet layers,
        # then one full), head_dim 256, linear_num_key_heads 16, linear_num_value_heads 32,
        # linear_key_head_dim 128, linear_value_head_dim 128, linear_conv_kernel_dim 4;
        # num_experts 512, num_experts_per_tok 10, moe_intermediate_size 512,
        # shared_expert_intermediate_size 512; an MTP module (vLLM's qwen3_next_mtp).
        _model(
            "qwen3-next-80b-a3b", 48, 16, 2, 256, 2048, 5120, 151936, 262144,
            moe=MoESpec(512, 10, 512, 1, 512),
            layer_kinds=alternating(48, 4, LayerKind.FULL, LayerKind.STATE),
            state=StateSpec(16, 32, 128, 128, 4),
            has_mtp=True,
        ),
    )
}  # fmt: skip

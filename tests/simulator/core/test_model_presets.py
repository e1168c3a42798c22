"""The 2025-26 catalog: KV bytes per token with the arithmetic written out, parameter counts
against the makers' published totals, weight dtypes, and config.json loading of each family."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import run_cli

from pagesim.simulator.core.catalog import get_model, load_hf_config
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.model_spec import KVDtype, LayerKind, QuantScope, WeightDtype
from pagesim.simulator.kv.block_budget import weight_bytes_per_gpu

# bf16/fp16 KV (2 bytes). MHA/GQA layer: 2 (K, V) x kv_heads x head_dim x 2 B; MLA layer:
# (kv_lora_rank + qk_rope_head_dim) x 2 B; state layers keep no per-token KV.
KV_BYTES_PER_TOKEN = {
    "llama-3.1-8b": 32 * 2 * 8 * 128 * 2,  # 131,072
    "llama-3.1-70b": 80 * 2 * 8 * 128 * 2,  # 327,680
    "llama-3.1-405b": 126 * 2 * 8 * 128 * 2,  # 516,096
    "mixtral-8x7b": 32 * 2 * 8 * 128 * 2,  # 131,072
    "qwen3-30b-a3b": 48 * 2 * 4 * 128 * 2,  # 98,304
    "qwen3-235b-a22b": 94 * 2 * 4 * 128 * 2,  # 192,512
    "deepseek-v3": 61 * (512 + 64) * 2,  # 70,272 (MHA with 128 heads of 128: 3,997,696)
    "gpt-oss-20b": 24 * 2 * 8 * 64 * 2,  # 49,152 (12 of the 24 layers keep only 128 tokens)
    "gpt-oss-120b": 36 * 2 * 8 * 64 * 2,  # 73,728
    "gemma-3-27b": 62 * 2 * 16 * 128 * 2,  # 507,904 (52 of the 62 keep only 1,024 tokens)
    "qwen3-next-80b-a3b": 12 * 2 * 2 * 256 * 2,  # 24,576 (36 gated-DeltaNet layers: state)
}


@pytest.mark.parametrize(("name", "expected"), sorted(KV_BYTES_PER_TOKEN.items()))
def test_kv_bytes_per_token(name: str, expected: int, capsys: pytest.CaptureFixture[str]) -> None:
    assert get_model(name).kv_bytes_per_token(KVDtype.BF16) == expected
    result = run_cli(capsys, "kv", "--model", name, "--seq-len", "1", "--json")
    assert json.loads(result.out)["bytes_per_token"] == expected


def test_the_printed_figures() -> None:
    assert KV_BYTES_PER_TOKEN["deepseek-v3"] == 70_272
    assert KV_BYTES_PER_TOKEN["gemma-3-27b"] == 507_904
    assert KV_BYTES_PER_TOKEN["qwen3-next-80b-a3b"] == 24_576


def test_mla_is_replicated_under_tensor_parallelism_and_gqa_is_split() -> None:
    # vLLM ModelConfig.get_num_kv_heads returns 1 for MLA: every rank holds the whole latent.
    assert get_model("deepseek-v3").kv_bytes_per_token(KVDtype.BF16, 8) == 70_272
    assert get_model("deepseek-v3").kv_bytes_per_token(KVDtype.FP8, 8) == 61 * 576 * 1
    # Qwen3-235B has 4 KV heads: TP 2 splits them, TP 8 replicates one per GPU.
    qwen = get_model("qwen3-235b-a22b")
    assert qwen.kv_bytes_per_token(KVDtype.BF16, 2) == 94 * 2 * 2 * 128 * 2
    assert qwen.kv_bytes_per_token(KVDtype.BF16, 8) == 94 * 2 * 1 * 128 * 2


def test_window_and_state_footprint_of_one_sequence() -> None:
    gemma = get_model("gemma-3-27b")  # 10 full + 52 sliding layers, window 1,024
    per_layer = 2 * 16 * 128 * 2
    assert gemma.kv_bytes_for_sequence(100) == 62 * 100 * per_layer  # inside the window
    assert gemma.kv_bytes_for_sequence(4096) == (10 * 4096 + 52 * 1024) * per_layer
    oss = get_model("gpt-oss-120b")  # 18 full + 18 sliding layers, window 128
    assert oss.kv_bytes_for_sequence(8192) == (18 * 8192 + 18 * 128) * 2 * 8 * 64 * 2
    nxt = get_model("qwen3-next-80b-a3b")
    # per gated-DeltaNet layer: conv (4 - 1) x (2 x 16 x 128 + 32 x 128) + recurrent 32 x 128 x 128
    state_elements = 3 * (2 * 16 * 128 + 32 * 128) + 32 * 128 * 128
    assert state_elements == 548_864
    assert nxt.state_bytes_per_seq(KVDtype.BF16) == 36 * state_elements * 2  # 39,518,208
    assert nxt.kv_bytes_for_sequence(1000) == 1000 * 24_576 + 39_518_208


# Published totals (and active counts where the maker gives one): DeepSeek-V3 README_WEIGHTS
# (671B, 36.6B activated without the input embedding); gpt-oss model card (116.8B / 5.1B and
# 20.9B / 3.6B, active without the input embedding); Qwen3 model cards (30.5B / 3.3B,
# 235B / 22B); Mistral's Mixtral post (46.7B / 12.9B); Meta's 8B / 70B / 405B; Qwen3-Next 80B.
PUBLISHED_BILLIONS = {
    "deepseek-v3": (671, 36.6, True),
    "gpt-oss-120b": (116.8, 5.1, True),
    "gpt-oss-20b": (20.9, 3.6, True),
    "qwen3-30b-a3b": (30.5, 3.3, False),
    "qwen3-235b-a22b": (235, 22, False),
    "mixtral-8x7b": (46.7, 12.9, False),
    "llama-3.1-8b": (8.03, 8.03, False),
    "llama-3.1-70b": (70.6, 70.6, False),
    "llama-3.1-405b": (405, 405, False),
    "qwen3-next-80b-a3b": (80, 3, False),
}


@pytest.mark.parametrize(("name", "published"), sorted(PUBLISHED_BILLIONS.items()))
def test_parameter_counts_from_shapes_match_the_published_ones(
    name: str, published: tuple[float, float, bool]
) -> None:
    total, active, without_input_embedding = published
    model = get_model(name)
    assert model.num_params / 1e9 == pytest.approx(total, rel=0.01)
    counted = model.count_params(active=True)
    if without_input_embedding:
        counted -= model.vocab_size * model.hidden_size
    # Qwen3-Next's "A3B" is a rounded name (its gated attention's extra projections uncounted)
    assert counted / 1e9 == pytest.approx(
        active, rel=0.3 if name.startswith("qwen3-next") else 0.03
    )


def test_weight_dtype_sets_weight_bytes_and_16_bit_is_unchanged() -> None:
    llama = get_model("llama-3.1-70b")
    assert weight_bytes_per_gpu(llama, 2) == llama.num_params * 2 // 2
    linear = llama.quantized_params()
    assert linear == 0  # bf16: nothing quantized
    fp8 = replace(llama, weight_dtype=WeightDtype.FP8)
    layers = sum(fp8.layer_params(i) for i in range(80))
    embeddings = 2 * 128256 * 8192
    assert layers + embeddings == llama.num_params
    assert fp8.weight_bytes() == embeddings * 2 + layers * 1
    int4 = replace(llama, weight_dtype=WeightDtype.INT4)  # 4 + 20 / 128 bits
    assert int4.weight_bytes() == embeddings * 2 + layers * 133 // 256
    # gpt-oss: only the experts in MXFP4 (4.25 bits), the rest bf16.
    oss = get_model("gpt-oss-120b")
    assert oss.quant_scope is QuantScope.EXPERTS
    experts = 36 * 128 * 3 * 2880 * 2880
    assert oss.weight_bytes() == (oss.num_params - experts) * 2 + experts * 17 // 32
    assert 60 < oss.weight_bytes() / 2**30 < 62  # the released checkpoint: ~60.8 GiB


def write(tmp_path: Path, config: dict[str, Any]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


DEEPSEEK_V3 = {
    "model_type": "deepseek_v3",
    "num_hidden_layers": 61,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 2048,
    "first_k_dense_replace": 3,
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3"},
}
GPT_OSS_120B = {
    "model_type": "gpt_oss",
    "num_hidden_layers": 36,
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "vocab_size": 201088,
    "max_position_embeddings": 131072,
    "num_local_experts": 128,
    "experts_per_token": 4,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
    "quantization_config": {"quant_method": "mxfp4"},
}
GEMMA_3_27B = {
    "model_type": "gemma3",
    "text_config": {
        "model_type": "gemma3_text",
        "num_hidden_layers": 62,
        "hidden_size": 5376,
        "intermediate_size": 21504,
        "num_attention_heads": 32,
        "num_key_value_heads": 16,
        "head_dim": 128,
        "vocab_size": 262208,
        "max_position_embeddings": 131072,
        "hidden_activation": "gelu_pytorch_tanh",
        "sliding_window": 1024,
        "sliding_window_pattern": 6,
    },
}
QWEN3_NEXT = {
    "model_type": "qwen3_next",
    "num_hidden_layers": 48,
    "hidden_size": 2048,
    "intermediate_size": 5120,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "vocab_size": 151936,
    "max_position_embeddings": 262144,
    "full_attention_interval": 4,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
}
QWEN3_30B_A3B = {
    "model_type": "qwen3_moe",
    "num_hidden_layers": 48,
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 768,
    "sliding_window": None,
}


@pytest.mark.parametrize(
    ("preset", "config"),
    [
        ("deepseek-v3", DEEPSEEK_V3),
        ("gpt-oss-120b", GPT_OSS_120B),
        ("gemma-3-27b", GEMMA_3_27B),
        ("qwen3-next-80b-a3b", QWEN3_NEXT),
        ("qwen3-30b-a3b", QWEN3_30B_A3B),
    ],
)
def test_config_json_of_each_family_loads_as_its_preset(
    tmp_path: Path, preset: str, config: dict[str, Any]
) -> None:
    loaded = load_hf_config(write(tmp_path, config))
    expected = get_model(preset)
    assert loaded.kv_bytes_per_token() == expected.kv_bytes_per_token()
    assert loaded.kinds() == expected.kinds()
    assert (loaded.moe, loaded.mla, loaded.state) == (expected.moe, expected.mla, expected.state)
    assert loaded.sliding_window == expected.sliding_window
    assert loaded.weight_dtype is expected.weight_dtype
    # Gemma ties its embeddings; a config.json that does not say so loads untied.
    untied = replace(expected, tied_embeddings=loaded.tied_embeddings)
    assert loaded.num_params == untied.count_params()


def test_gpt_oss_without_layer_types_alternates_from_a_sliding_layer(tmp_path: Path) -> None:
    config = {k: v for k, v in GPT_OSS_120B.items() if k != "layer_types"}
    loaded = load_hf_config(write(tmp_path, config))
    assert loaded.kinds()[:2] == (LayerKind.SLIDING, LayerKind.FULL)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (
            {"experts_per_token": 200},
            "field 'experts_per_token' (200) exceeds the routed experts 'num_local_experts' "
            "(128); a token routes to at most every expert: set 'experts_per_token' <= 128",
        ),
        ({"sliding_window": 0}, "field 'sliding_window' must be a positive number of tokens"),
        ({"sliding_window": -5}, "got -5; set the window"),
        ({"layer_types": ["full_attention"] * 3}, "one kind per layer (36)"),
        ({"layer_types": ["chunked"] * 36}, "'layer_types' has 'chunked'; valid:"),
        ({"quantization_config": {"quant_method": "bitsandbytes"}}, "remove it and pass"),
    ],
)
def test_bad_config_json_is_one_line_naming_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], needle: str
) -> None:
    path = write(tmp_path, {**GPT_OSS_120B, **change})
    with pytest.raises(InputError) as error:
        load_hf_config(path)
    assert str(path) in str(error.value) and needle in str(error.value)
    result = run_cli(capsys, "kv", "--model", str(path), "--seq-len", "16")
    assert result.exit_code == 2
    assert result.err.count("\n") == 1 and "error:" in result.err and needle in result.err
    assert "Traceback" not in result.err + result.out


def test_kv_command_weight_dtype_flag(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["kv", "--model", "llama-3.1-70b", "--seq-len", "1", "--json"]
    bf16 = json.loads(run_cli(capsys, *base).out)["weight_bytes"]
    fp8 = json.loads(run_cli(capsys, *base, "--weight-dtype", "fp8").out)
    assert (
        fp8["weight_dtype"] == "fp8" and fp8["weight_bytes"] < 0.52 * bf16
    )  # embeddings stay bf16
    bad = run_cli(capsys, *base, "--weight-dtype", "int3")
    assert bad.exit_code == 2 and "--weight-dtype: unknown weight dtype 'int3'" in bad.err

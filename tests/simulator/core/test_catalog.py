"""Catalog figures against docs/facts.md, config.json loading, and the `pagesim kv` contract."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_cli

from pagesim.simulator.core.catalog import (
    CLASSIC_MODELS,
    GIB,
    GPUS,
    MODELS,
    KVDtype,
    custom_gpu,
    get_gpu,
    get_model,
    load_hf_config,
)
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.kv.sizing import kv_report

# KV bytes per token from docs/facts.md (fp16).
FACTS_KV_BYTES = {
    "llama-2-7b": 524_288,
    "llama-2-13b": 819_200,
    "llama-2-70b": 327_680,
    "llama-3-8b": 131_072,
    "llama-3-70b": 327_680,
    "mistral-7b-v0.1": 131_072,
    "qwen2.5-7b": 57_344,
    "qwen2.5-72b": 327_680,
    "opt-13b": 819_200,
    "opt-66b": 2_359_296,
    "opt-175b": 4_718_592,
}


@pytest.mark.parametrize(("name", "expected"), sorted(FACTS_KV_BYTES.items()))
def test_kv_bytes_per_token_matches_facts(name: str, expected: int) -> None:
    assert get_model(name).kv_bytes_per_token(KVDtype.FP16) == expected


def test_every_facts_model_and_gpu_is_a_preset() -> None:
    assert set(CLASSIC_MODELS) == set(FACTS_KV_BYTES)
    assert set(CLASSIC_MODELS) <= set(MODELS)
    facts = {"a100-40gb", "a100-80gb", "h100-sxm", "h200-sxm", "l40s", "l4", "rtx-4090"}
    # And the A40 (NVIDIA's datasheet), which Vidur measured (core/presets/gpus.toml), and the
    # GPUs of 2026 (docs/facts.md, their datasheets cited in gpus.toml).
    of_2026 = {"b200", "gb200", "b300", "mi300x", "mi325x", "mi355x"}
    assert set(GPUS) == facts | {"a40"} | of_2026


def test_parameter_counts_from_shapes_agree_with_published_ones() -> None:
    # Llama-2-7B published 6.74 B: counting from shapes (untied embeddings) gives the same.
    from pagesim.simulator.core.catalog import count_params

    m = get_model("llama-2-7b")
    counted = count_params(
        m.num_layers,
        m.num_heads,
        m.num_kv_heads,
        m.head_dim,
        m.hidden_size,
        m.intermediate_size,
        m.vocab_size,
        m.is_gated_mlp,
    )
    assert abs(counted - m.num_params) / m.num_params < 0.01


def test_dtype_and_tensor_parallel_set_bytes() -> None:
    llama70 = get_model("llama-2-70b")
    assert llama70.kv_bytes_per_token(KVDtype.FP8) == 163_840
    assert llama70.kv_bytes_per_token(KVDtype.FP16, tensor_parallel=8) == 40_960
    # More GPUs than KV heads: each GPU still holds one head.
    assert llama70.kv_heads_per_gpu(16) == 1
    # NVFP4 KV: vLLM packs a 128-value head into 64 bytes of FP4 and 8 of FP8 scales (one per
    # 16 values; vllm/utils/torch_utils.py nvfp4_kv_cache_full_dim): 80 layers x K and V x 8 KV
    # heads x 72 bytes.
    assert llama70.kv_bytes_per_token(KVDtype.NVFP4) == 80 * 2 * 8 * 72 == 92_160
    assert KVDtype.NVFP4.bytes_of(128) == 128 // 2 + 128 // 16


def test_textbook_llama2_13b_numbers() -> None:
    model = get_model("llama-2-13b")
    report = kv_report(
        model,
        [1000, 4096],
        gpu=get_gpu("a100-80gb"),
        memory_utilization=1.0,
        batch_size=10,
        weight_bytes=26 * GIB,
    )
    one_k, four_k = report.sequences
    assert one_k.bytes_per_seq == 819_200_000
    assert four_k.bytes_per_seq == 3_355_443_200
    assert report.bytes_per_block == 13_107_200
    assert four_k.batch_total_bytes / GIB == pytest.approx(57.25)
    assert four_k.batch_fits


def test_kv_command_prints_the_textbook_figures(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(capsys, "kv", "--model", "llama-2-13b", "--seq-len", "1000")
    assert result.exit_code == 0
    assert "819,200,000 B" in result.out
    result = run_cli(
        capsys,
        "kv",
        "--model",
        "llama-2-13b",
        "--seq-len",
        "4096",
        "--gpu",
        "a100-80gb",
        "--batch-size",
        "10",
        "--weights-gib",
        "26",
    )
    assert "3,355,443,200 B" in result.out
    assert "13,107,200 B" in result.out
    assert "57.25 GiB" in result.out
    result = run_cli(capsys, "kv", "--model", "llama-2-70b", "--seq-len", "1", "--json")
    assert json.loads(result.out)["bytes_per_token"] == 327_680


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", "gpt-5", "--seq-len", "10"], "unknown model 'gpt-5'; known models: llama"),
        (["--model", "llama-2-7b", "--seq-len", "10", "--gpu", "tpu"], "unknown GPU 'tpu'"),
        (["--model", "llama-2-7b", "--seq-len", "0"], "--seq-len must be a whole number from 1"),
        (["--model", "llama-2-7b", "--seq-len", "8", "--block-size", "-4"], "--block-size"),
        (["--model", "llama-2-7b", "--seq-len", "8", "--kv-dtype", "int3"], "valid: fp16, bf16"),
        (["--model", "llama-2-7b", "--seq-len", "8", "--batch-size", "0"], "--batch-size"),
        (["--model", "llama-2-7b", "--seq-len", "abc"], "--seq-len"),
    ],
)
def test_kv_bad_input_is_one_clean_line(
    capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    result = run_cli(capsys, "kv", *args)
    assert result.exit_code == 2
    assert needle in result.err
    assert "Traceback" not in result.err + result.out


def _write(tmp_path: Path, content: str) -> Path:
    path = tmp_path / "config.json"
    path.write_text(content)
    return path


def test_hf_config_llama_and_opt_field_names(tmp_path: Path) -> None:
    llama = {
        "model_type": "llama",
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        "max_position_embeddings": 8192,
    }
    spec = load_hf_config(_write(tmp_path, json.dumps(llama)))
    assert spec.kv_bytes_per_token() == 131_072
    assert spec.is_gated_mlp and spec.head_dim == 128 and spec.max_seq_len == 8192
    opt = {
        "model_type": "opt",
        "num_hidden_layers": 40,
        "hidden_size": 5120,
        "num_attention_heads": 40,
        "ffn_dim": 20480,
        "vocab_size": 50272,
        "max_position_embeddings": 2048,
    }
    spec = load_hf_config(_write(tmp_path, json.dumps(opt)))
    assert spec.kv_bytes_per_token() == 819_200 and not spec.is_gated_mlp
    # OPT-13B published 12.85 B parameters.
    assert abs(spec.num_params - 12.85e9) / 12.85e9 < 0.01


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must hold a JSON object"),
        ('{"hidden_size": 4096}', "missing field 'num_hidden_layers'"),
        (
            '{"num_hidden_layers": 0, "hidden_size": 8, "num_attention_heads": 1,'
            ' "intermediate_size": 8, "vocab_size": 8}',
            "'num_hidden_layers' must be a positive integer",
        ),
        (
            '{"num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 3,'
            ' "num_key_value_heads": 2, "intermediate_size": 8, "vocab_size": 8}',
            "not a multiple",
        ),
    ],
)
def test_malformed_config_json_is_an_input_error(tmp_path: Path, content: str, needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        load_hf_config(_write(tmp_path, content))


def test_malformed_config_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "{oops")
    result = run_cli(capsys, "kv", "--model", str(path), "--seq-len", "16")
    assert result.exit_code == 2
    assert str(path) in result.err and "Traceback" not in result.err


def test_custom_gpu_validates() -> None:
    gpu = custom_gpu("mine", 48, 900, 300, 32)
    assert gpu.memory_bytes == 48 * GIB
    with pytest.raises(InputError, match="memory_gib must be > 0"):
        custom_gpu("bad", 0, 900, 300)

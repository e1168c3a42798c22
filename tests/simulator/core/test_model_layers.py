"""Layers of a model as config.json gives them: parameters counted per class of layer (kind x
dense or routed MLP) equal the layer-by-layer sum, in time linear in the layers (repro2 20);
the bounds on layers and on `first_k_dense_replace` (repro2 04); `pagesim kv` on a model
whose every layer keeps state (repro2 02)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from cli_helpers import run_cli
from hypothesis import given
from hypothesis import strategies as st

from pagesim.simulator.core.catalog import get_model, load_hf_config
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.hf_config import MAX_LAYERS
from pagesim.simulator.core.model_spec import LayerKind, ModelSpec, MoESpec, StateSpec

TINY = {
    "model_type": "llama",
    "num_hidden_layers": 4,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "vocab_size": 320,
}
MOE = TINY | {"n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32}


def _naive_params(model: ModelSpec, *, active: bool) -> int:
    """The sum over every layer, one at a time (what count_params did before)."""
    return sum(model.layer_params(i, active=active) for i in range(model.num_layers))


@given(
    kinds=st.lists(st.sampled_from(list(LayerKind)), min_size=1, max_size=12),
    num_dense=st.integers(0, 14),
    is_moe=st.booleans(),
    active=st.booleans(),
)
def test_parameters_by_class_of_layer_equal_the_layer_by_layer_sum(
    kinds: list[LayerKind], num_dense: int, is_moe: bool, active: bool
) -> None:
    base = get_model("llama-2-7b")
    moe = MoESpec(8, 2, 256, 1, 256, num_dense) if is_moe else None
    model = replace(
        base,
        num_layers=len(kinds),
        layer_kinds=tuple(kinds),
        moe=moe,
        state=StateSpec(4, 8, 64, 64, 4),
        sliding_window=128,
    )
    layers = _naive_params(model, active=active)
    embeddings = model.vocab_size * model.hidden_size * 2
    assert model.count_params(active=active) == layers + embeddings
    assert sum(model.layer_classes().values()) == model.num_layers
    for kind in LayerKind:
        assert model.num_layers_of(kind) == kinds.count(kind)


def test_a_config_of_a_million_layers_is_counted_and_one_more_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """repro2 20: counting walked every layer once per layer (10^6 layers ran for minutes)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY | {"num_hidden_layers": MAX_LAYERS}))
    model = load_hf_config(path)
    per_layer = model.layer_params(0)
    assert model.num_params == MAX_LAYERS * per_layer + 2 * 320 * 64
    result = run_cli(capsys, "kv", "--model", str(path), "--seq-len", "100", "--gpu", "h100-sxm")
    assert result.exit_code == 0, result.err
    path.write_text(json.dumps(TINY | {"num_hidden_layers": MAX_LAYERS + 1}))
    result = run_cli(capsys, "kv", "--model", str(path), "--seq-len", "100")
    assert result.exit_code == 2
    assert "field 'num_hidden_layers' is 1,000,001; valid: 1 to 1,000,000" in result.err
    assert "Traceback" not in result.err


@pytest.mark.parametrize("dense", [4, 100, 10**30])
def test_first_k_dense_replace_must_leave_a_moe_layer(tmp_path: Path, dense: int) -> None:
    """repro2 04: 100 dense layers of 4 priced experts on -96 layers (negative MBU); vLLM
    refuses such a model (no MoE layer found)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MOE | {"first_k_dense_replace": dense}))
    with pytest.raises(InputError, match=r"field 'first_k_dense_replace' is .* 4 layers"):
        load_hf_config(path)
    path.write_text(json.dumps(MOE | {"first_k_dense_replace": 3}))
    model = load_hf_config(path)
    assert model.num_dense_mlp_layers == 3
    assert model.layer_classes() == {(LayerKind.FULL, True): 3, (LayerKind.FULL, False): 1}


def test_first_k_dense_replace_beyond_the_layers_is_one_line_in_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config.json").write_text(json.dumps(MOE | {"first_k_dense_replace": 100}))
    (tmp_path / "s.toml").write_text(
        '[model]\nconfig = "config.json"\n[gpu]\npreset = "h100-sxm"\n[workload]\n'
        'num_requests = 2\n[workload.prompt]\nkind = "fixed"\nvalue = 8\n'
        '[workload.output]\nkind = "fixed"\nvalue = 2\n[[systems]]\nname = "v1"\n'
        'policy = "vllm-v1"\n'
    )
    result = run_cli(capsys, "run", str(tmp_path / "s.toml"), "--out", str(tmp_path / "o"))
    assert result.exit_code == 2
    (line,) = result.err.splitlines()
    assert "model.config" in line and "'first_k_dense_replace' is 100" in line
    assert "valid: 0 to 3" in line


def test_kv_of_a_model_whose_every_layer_keeps_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """repro2 02: no per-token KV, so no flat block to divide the budget by (it divided by
    zero); the vLLM V1 layout's blocks hold the state, and a batch holds each one's state."""
    config = TINY | {
        "model_type": "qwen3_next",
        "num_hidden_layers": 8,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "full_attention_interval": 9,  # > 8 layers: none is full attention
        "linear_num_key_heads": 4,
        "linear_num_value_heads": 8,
        "linear_key_head_dim": 64,
        "linear_value_head_dim": 64,
        "linear_conv_kernel_dim": 4,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    args = ("kv", "--model", str(path), "--seq-len", "1000", "--gpu", "h100-sxm")
    result = run_cli(capsys, *args)
    assert result.exit_code == 0, result.err
    assert "no per-token KV: every layer keeps a fixed state" in result.out
    assert "paged " not in result.out
    report = json.loads(run_cli(capsys, *args, "--json").out)
    assert report["bytes_per_token"] == 0 and report["blocks_fit"] is None
    (seq,) = report["sequences"]
    # 8 layers x (conv (4 - 1) x (2 x 256 + 512) + recurrent 8 x 64 x 64) x 2 bytes
    state = 8 * (3 * (2 * 4 * 64 + 8 * 64) + 8 * 64 * 64) * 2
    assert seq["kept_bytes"] == state == seq["batch_bytes"]
    assert seq["seqs_fit_paged"] is None
    assert report["hybrid"]["blocks_fit"] > 0

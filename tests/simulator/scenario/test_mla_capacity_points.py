"""The `mla_capacity` built-in compares three models (issue 17): DeepSeek-V3 with MLA, the same
model with plain MHA (a hypothetical config.json shipped beside the scenario) and
Llama-3.1-405B. KV bytes per token worked out by hand here."""

from __future__ import annotations

from dataclasses import replace

from pagesim.simulator.core.catalog import get_model
from pagesim.simulator.core.hf_config import load_hf_config
from pagesim.simulator.scenario.files import BUILTIN_DIR
from pagesim.simulator.studies.sweep import plan_sweep

HYPOTHETICAL = BUILTIN_DIR / "models" / "deepseek-v3-mha-hypothetical.json"


def test_the_mha_variant_is_deepseek_v3_with_plain_attention() -> None:
    mha = load_hf_config(HYPOTHETICAL)
    v3 = get_model("deepseek-v3")
    # Everything but attention is DeepSeek-V3's (config.json figures, core/model_presets.py).
    same = replace(mha, name=v3.name, head_dim=v3.head_dim, mla=v3.mla, num_params=v3.num_params)
    assert same == v3
    assert (mha.num_kv_heads, mha.head_dim, mha.mla) == (128, 128, None)
    # MHA per token: 61 layers x 2 (K, V) x 128 heads x 128 x 2 B = 3,997,696 B (DeepSeek-V2,
    # arXiv 2405.04434, Table 1: 2 n_h d_h l); MLA's 61 x (512 + 64) x 2 B = 70,272 B.
    assert mha.kv_bytes_per_token() == 61 * 2 * 128 * 128 * 2 == 3_997_696
    assert v3.kv_bytes_per_token() == 70_272
    # Per GPU at TP 8: MHA's heads split 16 per GPU, MLA's latent is whole on every rank.
    assert mha.kv_bytes_per_token(tensor_parallel=8) == 499_712
    assert v3.kv_bytes_per_token(tensor_parallel=8) == 70_272
    # Its attention projections are MHA's: 7168 x 128 x 128 x 4 per layer, larger than MLA's.
    assert mha.attention_params == 7168 * 128 * 128 * 4
    assert mha.num_params > v3.num_params


def test_the_sweep_runs_all_three_models_at_tp_8() -> None:
    points = plan_sweep(BUILTIN_DIR / "mla_capacity.toml")
    names = [p.scenario.model.name for p in points]
    assert names == ["deepseek-v3", "deepseek-v3-mha-hypothetical", "llama-3.1-405b"]
    assert all(p.scenario.tensor_parallel == 8 for p in points)

"""A V1 replica's KV offload tier in CPU memory (simulator/policies/offload.py), as stories with
exact numbers: a prefix evicted from the GPU is hit in the CPU tier and loaded at the link's
price; a full tier evicts its least recently used blocks; v0.11.0 stores decode blocks too,
v0.34.0 prompt blocks only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pagesim.simulator.engine import simulate
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.scenario.load import load_scenario

BLOCK_BYTES = 8 * 2**20  # Llama-2-7B, fp16: 32 layers x 32 heads x 128 x 2 (K, V) x 2 B x 16 tokens


def _run(tmp_path: Path, system: str, output_len: int = 4, num_blocks: int = 65) -> RunResult:
    """Three prompts of 1,024 tokens (64 blocks): A at 0 s, B (other content) at 1 s, A's again
    at 5 s, on a GPU of 65 blocks: B's blocks take every one of A's cached ones."""
    rows = [
        {"timestamp": 0, "input_length": 1024, "output_length": output_len, "hash_ids": [1, 2]},
        {"timestamp": 1000, "input_length": 1024, "output_length": output_len, "hash_ids": [3, 4]},
        {"timestamp": 5000, "input_length": 1024, "output_length": output_len, "hash_ids": [1, 2]},
    ]
    (tmp_path / "trace.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    path = tmp_path / "story.toml"
    path.write_text(
        f"""
name = "story"
[model]
preset = "llama-2-7b"
[gpu]
preset = "a100-80gb"
[workload.mooncake]
trace = "trace.jsonl"
[[systems]]
name = "s"
policy = "vllm-v1"
num_kv_blocks = {num_blocks}
{system}
"""
    )
    return simulate(load_scenario(path), check_invariants=True)


def test_a_prefix_evicted_from_the_gpu_is_hit_in_the_cpu_tier_at_the_links_price(
    tmp_path: Path,
) -> None:
    tier = _run(tmp_path, "[systems.kv_offload]\ncpu_gib = 8\nload_gbps = 1.0")
    third = tier.requests.iloc[2]
    # GPU: nothing of A left. CPU tier: its first 63 blocks (the prompt's last token is always
    # computed, so the 64th block is too), 63 x 8 MiB over 1 GB/s before its first chunk.
    assert tier.summary["prefix_hit_rate"] == 0.0
    assert tier.summary["offload_loaded_blocks"] == 63
    assert third["num_cached_tokens"] == 63 * 16
    assert third["admitted_s"] == pytest.approx(5.0 + 63 * BLOCK_BYTES / 1e9, rel=1e-12)
    assert tier.summary["offload_load_wait_mean_s"] == pytest.approx(63 * BLOCK_BYTES / 1e9)
    assert tier.summary["offload_hit_rate"] == pytest.approx(63 * 16 / (3 * 1024))
    # stored once each: A's 64 prompt blocks and B's; A's third turn found its blocks held
    assert tier.summary["offload_stored_blocks"] == 128
    alone = _run(tmp_path, "")
    assert alone.requests.iloc[2]["num_cached_tokens"] == 0  # recomputed from scratch
    assert "offload_hit_rate" not in alone.summary


def test_a_full_cpu_tier_evicts_its_least_recently_used_blocks(tmp_path: Path) -> None:
    # 0.5 GiB: 64 blocks. B's 64 push out A's, so A's third turn misses in both tiers.
    full = _run(tmp_path, "[systems.kv_offload]\ncpu_gib = 0.5")
    assert full.summary["offload_cpu_blocks"] == 64
    assert full.summary["offload_loaded_blocks"] == 0
    assert full.requests.iloc[2]["num_cached_tokens"] == 0
    # A's third turn is stored again, pushing B's out: 64 evicted twice, 64 stored thrice
    assert full.summary["offload_evicted_blocks"] == 2 * 64
    assert full.summary["offload_stored_blocks"] == 3 * 64


def test_v0_11_stores_decode_blocks_too_and_v0_34_prompt_blocks_only(tmp_path: Path) -> None:
    # 40 output tokens: KV of 1,024 + 39 tokens, 66 full blocks, 2 of them by decodes (a GPU
    # of 200 blocks holds them)
    tier = "[systems.kv_offload]\ncpu_gib = 8"
    old = _run(tmp_path, f'vllm_version = "0.11"\n{tier}', output_len=40, num_blocks=200)
    new = _run(tmp_path, f'vllm_version = "0.34"\n{tier}', output_len=40, num_blocks=200)
    assert new.summary["offload_stored_blocks"] == 2 * 64
    # v0.11: each request's 66 blocks; A's third turn writes its 2 decode blocks (new content)
    assert old.summary["offload_stored_blocks"] == 3 * 66 - 64

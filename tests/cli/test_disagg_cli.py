"""Disaggregated fleets on the command line: a run, and bad input as one `error:` line naming
the file, the field and the fix, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from cli_helpers import run_cli
from sim_helpers import TINY_CONFIG

DISAGG = """
name = "disagg"
[model]
preset = "llama-3-8b"
[gpu]
preset = "h100-sxm"
[workload]
num_requests = 40
[workload.arrival]
kind = "poisson"
rate_per_s = 20
[workload.prompt]
kind = "uniform"
low = 100
high = 600
[workload.output]
kind = "uniform"
low = 10
high = 60
[[systems]]
name = "disagg"
policy = "vllm-v1"
[[systems]]
name = "colocated"
policy = "vllm-v1"
[[systems]]
name = "tiny"
policy = "vllm-v1"
num_kv_blocks = 10
[cluster]
colocated_systems = ["colocated"]
[cluster.decode_router]
kind = "least-kv"
[cluster.link]
preset = "ib-ndr"
[[cluster.pools]]
name = "p"
role = "prefill"
count = 1
[[cluster.pools]]
name = "d"
role = "decode"
count = 2
"""


def test_a_disaggregated_fleet_runs_beside_its_colocated_twin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "disagg.toml").write_text(DISAGG)
    out = tmp_path / "out"
    args = [
        "run",
        "disagg.toml",
        "--out",
        str(out),
        "--no-report",
        "--set",
        "systems[2].num_kv_blocks=4096",
    ]
    result = run_cli(capsys, *args)
    assert result.exit_code == 0, result.err
    disagg = json.loads((out / "disagg" / "summary.json").read_text())["summary"]
    colocated = json.loads((out / "colocated" / "summary.json").read_text())["summary"]
    assert disagg["num_gpus"] == colocated["num_gpus"] == 3
    assert disagg["num_transfers"] == disagg["num_finished"] == 40
    header = (out / "disagg" / "requests.csv").read_text().splitlines()[0].split(",")
    assert header[1:3] == ["replica", "prefill_replica"] and "ttft_transfer_s" in header


def test_a_disaggregated_fleet_speculates_on_both_sides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same EAGLE head on the prefill and the decode pools (the system runs both): its KV
    # travels with the prompt's, one layer more than Llama-3-8B's 32.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "disagg.toml").write_text(DISAGG)
    summaries = {}
    for name, sets in (
        ("plain", []),
        (
            "eagle",
            [
                'systems[0].speculative.method="eagle"',
                "systems[0].speculative.num_speculative_tokens=3",
                "systems[0].speculative.acceptance_rate=0.7",
            ],
        ),
    ):
        out = tmp_path / name
        args = ["run", "disagg.toml", "--out", str(out), "--no-report", "--set"]
        result = run_cli(capsys, *args, "systems[2].num_kv_blocks=4096", *_sets(sets))
        assert result.exit_code == 0, result.err
        summaries[name] = json.loads((out / "disagg" / "summary.json").read_text())["summary"]
    plain, eagle = summaries["plain"], summaries["eagle"]
    assert eagle["num_finished"] == eagle["num_transfers"] == 40
    assert eagle["transfer_bytes_total"] * 32 == plain["transfer_bytes_total"] * 33
    assert eagle["spec_num_draft_tokens"] > 0 and eagle["spec_draft_s"] > 0
    assert eagle["tpot_p50_s"] < plain["tpot_p50_s"]


def _sets(values: list[str]) -> list[str]:
    return [part for value in values for part in ("--set", value)]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["cluster.pools[1].count=0"], "cluster.pools[1].count: a pool needs at least 1 replica"),
        (
            ['cluster.link.preset=""', "cluster.link.bandwidth_gb_s=0"],
            "cluster.link.bandwidth_gb_s: a link with zero bandwidth never delivers a byte",
        ),
        (
            ['cluster.pools[1].system="tiny"'],
            "cluster.pools[1].role: decode pool 'd' with system 'tiny' holds 10 KV blocks of 16 "
            "tokens per replica, fewer than one request of the model's max_seq_len 8192 needs "
            "(512); give it a GPU with more memory",
        ),
        (
            ['cluster.pools[0].role="both"'],
            "cluster.pools: mixes colocated and disaggregated pools",
        ),
        (['cluster.link.preset="nvlink9"'], "cluster.link.preset: unknown link preset 'nvlink9'"),
        (
            ['cluster.pools[1].role="prefill"'],
            "cluster.pools: a disaggregated fleet needs a decode pool",
        ),
        (
            ['model.preset="gpt-oss-20b"'],
            "cluster.pools: pool 'p' runs system 'disagg' on model 'gpt-oss-20b', which has "
            "sliding-window layers, with the hybrid KV-cache manager on; pagesim's disaggregated "
            "fleets move every layer's KV of the whole prompt, as vLLM does with it off: set "
            "hybrid_kv_cache_manager = false on that system",
        ),
        (
            ['model.preset="qwen3-next-80b-a3b"', "model.tensor_parallel=4"],
            "cluster.pools: model 'qwen3-next-80b-a3b' has state (linear-attention) layers",
        ),
        (
            [
                'systems[2].speculative.method="eagle"',
                "systems[2].speculative.num_speculative_tokens=3",
                "systems[2].speculative.acceptance_rate=0.7",
                "systems[2].num_kv_blocks=4096",
                'cluster.pools[1].system="tiny"',
            ],
            "cluster.pools: pool 'd' runs system 'tiny' with speculative method eagle but pool "
            "'p' runs 'disagg' with no model draft; the prefill and decode replicas of a "
            "disaggregated fleet must agree on a model draft",
        ),
        (
            ['systems[0].preemption="swap"', "systems[0].swap_space_gib=4"],
            "cluster.pools: system 'disagg' preempts by swapping",
        ),
    ],
)
def test_bad_disaggregation_input_is_one_error_line_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    needle: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "scenario.toml").write_text(DISAGG)
    sets = [part for arg in args for part in ("--set", arg)]
    result = run_cli(capsys, "validate", "scenario.toml", *sets)
    assert result.exit_code == 2, (result.out, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "scenario.toml" in lines[0]
    assert needle in lines[0], lines[0]
    assert "Traceback" not in result.err + result.out


def test_a_window_model_runs_disaggregated_with_the_hybrid_manager_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # gpt-oss-20b: 24 layers x 2 x 8 KV heads x 64 x 2 bytes = 49,152 bytes a prompt token, all
    # of them sent (the colocated twin keeps its hybrid manager: no KV connector there).
    monkeypatch.chdir(tmp_path)
    (tmp_path / "disagg.toml").write_text(DISAGG)
    sets = [
        'model.preset="gpt-oss-20b"',
        "systems[0].hybrid_kv_cache_manager=false",
        "systems[2].hybrid_kv_cache_manager=false",
        "systems[2].num_kv_blocks=8192",  # a 131,072-token request (gpt-oss's maximum)
    ]
    result = run_cli(capsys, "run", "disagg.toml", "--out", "out", "--no-report", *_sets(sets))
    assert result.exit_code == 0, result.err
    summary = json.loads((tmp_path / "out" / "disagg" / "summary.json").read_text())["summary"]
    requests = pd.read_csv(tmp_path / "out" / "disagg" / "requests.csv")
    assert summary["num_finished"] == summary["num_transfers"] == 40
    assert (requests["transfer_bytes"] == requests["prompt_len"] * 49_152).all()


def test_a_model_of_window_layers_only_is_refused_on_prefill_decode_pools(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # It keeps its window layout even with the hybrid manager off (vLLM unifies a mix only).
    monkeypatch.chdir(tmp_path)
    config = dict(TINY_CONFIG, layer_types=["sliding_attention"] * 2, sliding_window=64)
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "s.toml").write_text(
        DISAGG.replace('preset = "llama-3-8b"', 'config = "config.json"')
    )
    result = run_cli(
        capsys, "validate", "s.toml", "--set", "systems[0].hybrid_kv_cache_manager=false"
    )
    assert result.exit_code == 2, (result.out, result.err)
    assert "cluster.pools: model 'config' has only sliding-window layers" in result.err

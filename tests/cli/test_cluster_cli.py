"""Fleet scenarios on the command line: a run, and bad input as one `error:` line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import MAKES_GIT_WORKTREES, run_cli

FLEET = """
name = "fleet"
[model]
preset = "llama-3-8b"
[gpu]
preset = "a100-80gb"
[workload]
num_requests = 60
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
high = 100
[[systems]]
name = "v1"
policy = "vllm-v1"
[cluster.router]
kind = "least-outstanding"
[[cluster.pools]]
name = "h200"
count = 2
gpu = "h200-sxm"
[[cluster.pools]]
name = "a100"
count = 1
"""

MOONCAKE = """
name = "mooncake"
[model]
preset = "qwen2.5-7b"
[gpu]
preset = "h100-sxm"
[workload.mooncake]
trace = "rows.jsonl"
[[systems]]
name = "v1"
policy = "vllm-v1"
"""

SESSIONS = """
name = "turns"
[model]
preset = "llama-3-8b"
[gpu]
preset = "a100-80gb"
[workload.session_trace]
path = "turns.csv"
[[systems]]
name = "v1"
policy = "vllm-v1"
"""


def test_a_fleet_runs_and_writes_the_replica_of_each_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "fleet.toml"
    scenario.write_text(FLEET)
    result = run_cli(capsys, "run", str(scenario), "--out", str(tmp_path / "out"), "--no-report")
    assert result.exit_code == 0, result.err
    requests = (tmp_path / "out" / "v1" / "requests.csv").read_text().splitlines()
    assert requests[0].split(",")[1] == "replica" and len(requests) == 61
    summary = json.loads((tmp_path / "out" / "v1" / "summary.json").read_text())["summary"]
    assert summary["num_replicas"] == 3 and summary["num_gpus"] == 3
    assert summary["num_finished"] == 60


@pytest.mark.parametrize(
    ("text", "files", "args", "needle"),
    [
        (
            FLEET,
            {},
            ["--set", "cluster.router.kind=nearest"],
            "cluster.router.kind: unknown kind 'nearest'; valid: round-robin, random, "
            "least-outstanding, least-kv, power-of-two, session-affinity, prefix-aware",
        ),
        (
            FLEET,
            {},
            ["--set", "cluster.pools[1].count=0"],
            "cluster.pools[1].count: a pool needs at least 1 replica (got 0)",
        ),
        (
            MOONCAKE,
            {
                "rows.jsonl": '{"timestamp": 0, "input_length": 600, "output_length": 5, '
                '"hash_ids": [1, "two"]}\n'
            },
            [],
            "workload.mooncake.trace: rows.jsonl line 1: hash_ids: expected a list of integers",
        ),
        (
            SESSIONS,
            {
                "turns.csv": "session_id,turn,arrived_at,num_prefill_tokens,num_decode_tokens\n"
                "3,0,10,100,20\n3,1,2,10,20\n"
            },
            [],
            "turn 1 of session 3 arrives at 2 s, before its session starts",
        ),
    ],
)
def test_bad_fleet_input_is_one_error_line_naming_file_field_and_fix_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    files: dict[str, str],
    args: list[str],
    needle: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, content in files.items():
        (tmp_path / name).write_text(content)
    scenario = tmp_path / "scenario.toml"
    scenario.write_text(text)
    monkeypatch.chdir(tmp_path)
    result = run_cli(capsys, "validate", str(scenario), *args)
    assert result.exit_code == 2, (result.out, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "scenario.toml" in lines[0]
    assert needle in lines[0]
    assert "Traceback" not in result.err + result.out


def test_bench_sim_times_a_fleet(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(
        capsys, "bench", "sim", "--requests", "200", "--replicas", "3", "--router", "random"
    )
    assert result.exit_code == 0, result.err
    assert "azure-conv on 3 x llama-2-7b TP1 (random)" in result.out
    assert "200 requests" in result.out


@MAKES_GIT_WORKTREES
def test_bench_sim_compares_a_fleet_against_a_revision(capsys: pytest.CaptureFixture[str]) -> None:
    # HEAD has fleets: both sides run the same 2-replica fleet and agree.
    both = run_cli(
        capsys, "bench", "sim", "--requests", "40", "--replicas", "2", "--against", "HEAD",
        "--repeat", "1",
    )  # fmt: skip
    assert both.exit_code == 0, both.err
    assert "on 2 x llama-2-7b TP1 (round-robin)" in both.out
    assert "CPU time" in both.out and "summaries agree (rel 1e-9)" in both.out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--replicas", "2", "--router", "fastest"], "--router: unknown router 'fastest'"),
        (["--model", "llama-2-70b", "--tensor-parallel", "3"], "--tensor-parallel: 3 does not"),
        (["--replicas", "0"], "--replicas and --tensor-parallel must be >= 1"),
    ],
)
def test_bench_sim_fleet_options_refuse_what_cannot_run(
    capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    result = run_cli(capsys, "bench", "sim", "--requests", "10", *args)
    assert result.exit_code == 2, (result.out, result.err)
    assert needle in result.err and "Traceback" not in result.err

"""Bad `pipeline_parallel` input: one `error:` line naming the field, the problem and the valid
choices, exit 2; a good one runs and shows up resolved."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_helpers import refused, run_cli, tiny_scenario

V1 = tiny_scenario("pp").replace(
    'name = "v0"\npolicy = "vllm-v0"', 'name = "v1"\npolicy = "vllm-v1"'
)


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "v1.toml").write_text(V1)
    (tmp_path / "v0.toml").write_text(tiny_scenario("pp"))
    return tmp_path


@pytest.mark.parametrize(
    ("value", "needles"),
    [
        ("33", ("more than llama-2-7b's 32 decoder layers", "valid: 1..32")),
        ("0", ("must be in [1, 65536], got 0",)),
        ("-2", ("must be in [1, 65536]",)),
        ("1.5", ("expected an integer in [1, 65536], got float 1.5",)),
        ('"2"', ("expected an integer",)),
    ],
)
def test_bad_stage_counts_are_refused(
    folder: Path, capsys: pytest.CaptureFixture[str], value: str, needles: tuple[str, ...]
) -> None:
    result = run_cli(capsys, "validate", "v1.toml", "--set", f"systems.pipeline_parallel={value}")
    refused(result, "v1.toml", "systems[0].pipeline_parallel", *needles)


def test_v0_refuses_stages_and_says_why(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(capsys, "validate", "v0.toml", "--set", "systems.pipeline_parallel=2")
    refused(result, "systems[0].pipeline_parallel", "need policy vllm-v1", "virtual engines")


@pytest.mark.parametrize(
    ("partition", "needle"),
    [
        ("[16, 15]", "sums to 31; llama-2-7b has 32"),
        ("[32]", "has 1 entries"),
        ("[16, -1]", ">= 0"),
    ],
)
def test_bad_partitions_are_refused(
    folder: Path, capsys: pytest.CaptureFixture[str], partition: str, needle: str
) -> None:
    result = run_cli(
        capsys,
        "validate",
        "v1.toml",
        "--set",
        "systems.pipeline_parallel=2",
        "--set",
        f"systems.pipeline_layer_partition={partition}",
    )
    refused(result, "systems[0].pipeline_layer_partition", needle)


def test_a_pipelined_system_runs_and_shows_resolved(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_cli(
        capsys, "scenarios", "show", "v1.toml", "--resolved", "--set", "systems.pipeline_parallel=2"
    )
    assert result.exit_code == 0, result.err
    assert re.search(r"^pipeline_parallel +=  *2 ", result.out, re.MULTILINE), result.out

"""`pagesim capacity` on a disaggregated scenario with [capacity]: prefill x decode counts and
degrees ranked, the answer lines, the folder, a rerun from the cache, bad input as one line."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from cli_helpers import run_cli

from tests.simulator.studies.test_disagg_search import TINY


def write(tmp_path: Path, text: str = TINY) -> Path:
    path = tmp_path / "disagg.toml"
    path.write_text(text)
    return path


def test_the_disaggregated_search_table_answer_files_and_rerun(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario, out = write(tmp_path), tmp_path / "out"
    done = run_cli(capsys, "capacity", str(scenario), "--out", str(out), "--jobs", "1")
    assert done.exit_code == 0, done.err
    lines = done.out.splitlines()
    assert lines[0].split()[:9] == ["#", "system", "roles", "GPU", "P", "TP", "D", "TP", "P"]
    # Worked out in tests/simulator/studies/test_disagg_search.py: 3 colocated TP1 replicas,
    # or 3 prefill + 1 decode.
    assert lines[1].split()[:9] == [
        "1",
        "colocated",
        "colocated",
        "a100-80gb",
        "1",
        "1",
        "1",
        "2",
        "3",
    ]
    assert lines[2].split()[:9] == [
        "2",
        "disagg",
        "disaggregated",
        "a100-80gb",
        "1",
        "1",
        "3",
        "1",
        "4",
    ]
    assert "fewest GPUs: 3 colocated x a100-80gb TP1 = 3 GPUs (colocated)" in done.out
    assert "8 runs simulated, 0 from the cache" in done.out
    ranking = pd.read_csv(out / "capacity.csv")
    assert list(ranking["cost_per_hour"]) == [6.0, 8.0]
    saved = json.loads((out / "capacity.json").read_text())
    assert saved["max_gpus"] == 4 and saved["answer"][0].startswith("fewest GPUs: 3 colocated")
    assert len(pd.read_csv(out / "evaluations.csv")) == 9
    for name in (
        "capacity.html",
        "report.html",
        "plots/ttft_split.png",
        "plots/link_utilization.png",
    ):
        assert (out / name).exists(), name
    again = run_cli(capsys, "capacity", str(scenario), "--out", str(out), "--jobs", "1")
    assert again.exit_code == 0, again.err
    assert "0 runs simulated, 8 from the cache" in again.out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--set", 'capacity.gpus=["h100-sxm"]'],
            "capacity.gpus: not searched for a disaggregated scenario: each pool keeps its own GPU",
        ),
        (
            ["--set", "capacity.decode_tensor_parallel=[5]"],
            "capacity.decode_tensor_parallel: 5 does not divide llama-3-8b's 32 heads",
        ),
        (
            ["--param", "cluster.pools[0].count=1,2"],
            "error: --param cluster.pools[0].count: a fleet search sets the GPU, "
            "tensor-parallel degree, router and pool size itself",
        ),
        (["--set", "capacity.max_gpus=0"], "capacity.max_gpus: "),
    ],
)
def test_bad_disaggregated_search_input_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    done = run_cli(capsys, "capacity", str(write(tmp_path)), "--out", str(tmp_path / "o"), *args)
    assert done.exit_code == 2
    assert message in done.err and len(done.err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()

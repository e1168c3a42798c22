"""The built-in energy_per_token_gpus: `pagesim capacity --objective energy` compares the joules
per output token of A100-80GB and H100 fleets at one SLO; an unknown objective is refused."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from cli_helpers import refused, run_cli


def test_two_gpus_joules_per_token_at_one_slo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "energy"
    args = ("capacity", "energy_per_token_gpus", "--objective", "energy", "--out", str(out))
    done = run_cli(capsys, *args, "--jobs", "1")
    assert done.exit_code == 0, done.err
    ranking = pd.read_csv(out / "capacity.csv")
    # one H100 keeps up at 24 req/s; two A100s are needed, idling half the time
    assert list(ranking["gpu"]) == ["h100-sxm", "a100-80gb"]
    assert list(ranking["replicas"]) == [1, 2]
    joules = list(ranking["energy_per_output_token_j"])
    assert joules[0] < joules[1]
    assert "least energy per output token: the same fleet" in done.out
    assert "J/token" in done.out.splitlines()[0]


def test_an_unknown_objective_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    done = run_cli(capsys, "capacity", "energy_per_token_gpus", "--objective", "watts")
    refused(
        done, "--objective: unknown objective 'watts' for a fleet search; valid: gpus, cost, energy"
    )

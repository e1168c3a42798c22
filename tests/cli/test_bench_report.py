"""`pagesim bench report`: a run's report timed beside its simulation (issue 14 item 10), for
real; how it prints made-up timings is in test_bench_sim.py."""

from __future__ import annotations

import re

import pytest
from cli_helpers import run_cli


def test_bench_report_prints_the_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(capsys, "bench", "report", "textbook_static_vs_continuous")
    assert result.exit_code == 0, result.err
    first, wall = result.out.strip().splitlines()
    found = re.fullmatch(
        r"textbook_static_vs_continuous: simulation [\d.]+ s CPU \(8 requests\); report [\d.]+ s "
        r"CPU = [\d.]+x the simulation \((\d+) plots, \d+ processes\); drawn by one process "
        r"[\d.]+ s CPU",
        first,
    )
    assert found, first
    assert int(found.group(1)) >= 5
    assert wall.startswith("wall s: simulation ") and wall.endswith("CPU time is the measure")

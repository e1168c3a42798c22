"""`pagesim bench report`: a run's report timed beside its simulation (issue 14 item 10)."""

from __future__ import annotations

import re

import pytest
from cli_helpers import run_cli


def test_bench_report_prints_the_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(capsys, "bench", "report", "textbook_static_vs_continuous")
    assert result.exit_code == 0, result.err
    line = result.out.strip().splitlines()[-1]
    found = re.fullmatch(
        r"textbook_static_vs_continuous: simulation [\d.]+ s \(8 requests\); report [\d.]+ s = "
        r"[\d.]+x the simulation \((\d+) plots, \d+ processes\); drawn by one process [\d.]+ s",
        line,
    )
    assert found, line
    assert int(found.group(1)) >= 5

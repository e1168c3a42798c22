"""`pagesim bench report`: each report's CPU time beside its run's (issue 29 item 2)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from cli_helpers import refused, run_cli

from pagesim.reports import report_bench
from pagesim.reports.report_bench import Case, ReportCost, bench_cases, median_cost


def test_bench_report_prints_a_row_per_case(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(
        capsys, "bench", "report", "textbook_static_vs_continuous", "--kind", "run", "--repeat", "1"
    )
    assert result.exit_code == 0, result.err
    lines = result.out.strip().splitlines()
    assert lines[0].startswith("median of 1 round(s), one process per case; 1-minute load")
    assert lines[1].split()[:5] == ["scenario", "kind", "run", "CPU", "s"]
    row = lines[2].split()
    assert row[:2] == ["textbook_static_vs_continuous", "run"]
    assert row[8] in ("yes", "NO")
    assert int(row[-1]) >= 5  # plots
    assert re.fullmatch(r"[01] of 1 reports within budget", lines[-1])
    assert "after: textbook_static_vs_continuous run: run" in result.err


def test_cases_are_runs_and_the_sweeps_there_are() -> None:
    assert bench_cases(["textbook_static_vs_continuous", "fp8_vs_bf16"]) == [
        Case("textbook_static_vs_continuous", "run"),
        Case("fp8_vs_bf16", "run"),
        Case("fp8_vs_bf16", "sweep"),
    ]
    assert bench_cases(["fp8_vs_bf16"], "sweep") == [Case("fp8_vs_bf16", "sweep")]
    every = bench_cases([], "run")
    assert len(every) >= 18 and all(c.kind == "run" for c in every)


def test_a_sweep_of_a_file_without_one_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(capsys, "bench", "report", "textbook_static_vs_continuous", "--kind", "sweep")
    refused(result, "textbook_static_vs_continuous", "no [sweep] table")
    refused(run_cli(capsys, "bench", "report", "--kind", "walk"), "--kind", "run, sweep")


COST = ReportCost("s", "run", 0.5, 2.4, 4.0, 0.9, 1.5, 0.1, 6, 3.0)


def test_the_budget_is_a_third_of_the_run_or_one_second() -> None:
    # The run is what `pagesim run --no-report` costs: startup, simulation and data files.
    assert COST.run_cpu_s == pytest.approx(0.5 + 2.4 + 0.1)
    assert COST.budget_s == 1.0 and COST.is_within_budget
    slow = replace(COST, simulate_cpu_s=8.4, report_cpu_s=3.5)
    assert slow.budget_s == pytest.approx(3.0) and not slow.is_within_budget
    assert slow.report_share == pytest.approx(3.5 / 9.0)


def test_each_figure_is_the_median_of_the_rounds() -> None:
    samples = [
        replace(COST, report_cpu_s=r, num_plots=n) for r, n in ((3.0, 6), (1.0, 7), (2.0, 6))
    ]
    middle = median_cost(samples)
    assert middle.report_cpu_s == 2.0 and middle.num_plots == 7
    assert middle.simulate_cpu_s == 2.4 and middle.scenario == "s"


def test_this_tree_is_byte_compiled_before_any_case_is_timed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As the other revision's tree is, so that neither side's children compile their imports
    (PYTHONDONTWRITEBYTECODE set) and the sides compare alike."""
    done: list[str] = []
    monkeypatch.setattr(report_bench, "compiled", lambda tree: done.append(f"compiled {tree}"))
    monkeypatch.setattr(
        report_bench, "time_case", lambda tree, case, overrides: done.append("timed") or COST
    )
    report_bench.bench_reports([Case("textbook_static_vs_continuous", "run")], repeat=2)
    assert done == [f"compiled {report_bench.THIS_TREE}", "timed", "timed"]

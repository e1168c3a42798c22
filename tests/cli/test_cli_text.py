"""What the CLI tells a new user: which built-ins are sweeps or fleet searches, and how to sweep
a scenario that has no [sweep] table (issue 34, item 8)."""

from __future__ import annotations

import tomllib

import pytest
from cli_helpers import run_cli

from pagesim.simulator.scenario.load import BUILTIN_DIR


def test_scenarios_list_marks_what_each_builtin_is_made_for(
    capsys: pytest.CaptureFixture[str],
) -> None:
    listed = run_cli(capsys, "scenarios", "list")
    assert listed.exit_code == 0, listed.err
    rows = {line.split()[0]: line for line in listed.out.splitlines() if line.strip()}
    assert rows["NAME"].split()[:3] == ["NAME", "MADE", "FOR"]
    for path in sorted(BUILTIN_DIR.glob("*.toml")):
        table = tomllib.loads(path.read_text())
        made_for = rows[path.stem].split()[1 : 1 + 1 + ("sweep" in table) + ("capacity" in table)]
        expected = ["run"] + ["sweep"] * ("sweep" in table) + ["capacity"] * ("capacity" in table)
        assert [m.rstrip(",") for m in made_for] == expected, rows[path.stem]
    assert "run, sweep, capacity" in rows["disaggregated_vs_colocated"]
    assert "run, capacity" in rows["fleet_capacity"] and "run, sweep" in rows["moe_decode"]


def test_sweeping_a_scenario_without_axes_says_how_to_give_them(
    capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    result = run_cli(capsys, "sweep", "router_comparison", "--out", f"{tmp_path}/out")
    assert result.exit_code == 2
    (line,) = [line for line in result.err.splitlines() if line.startswith("error:")]
    assert "router_comparison.toml: sweep: no axes" in line and "--param" in line
    assert "Traceback" not in result.err

"""Golden summaries of the built-in scenarios: rerun, compare, and (explicitly) update.

A golden file is `scenarios/golden/<scenario>.json`: per system, the summary scalars of the base
scenario (sweeps are not expanded). Updating one is a reviewed act:
`pagesim scenarios golden --update` rewrites them and the diff shows what changed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from pagesim.simulator.engine import simulate
from pagesim.simulator.scenario.load import BUILTIN_DIR, load_scenario

GOLDEN_DIR = Path(BUILTIN_DIR) / "golden"
REL_TOL = 1e-9  # same code, same seed: only floating-point noise across platforms


def golden_path(scenario_path: Path) -> Path:
    return GOLDEN_DIR / f"{scenario_path.stem}.json"


def compute_golden(scenario_path: Path) -> dict[str, dict[str, object]]:
    scenario = load_scenario(scenario_path)
    return {system.name: simulate(scenario, system).summary for system in scenario.systems}


def write_golden(scenario_path: Path) -> Path:
    path = golden_path(scenario_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = compute_golden(scenario_path)
    path.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    return path


def compare_golden(scenario_path: Path) -> list[str]:
    """Differences between a rerun and the committed golden file; empty when they agree."""
    path = golden_path(scenario_path)
    if not path.exists():
        return [f"{path}: missing; run `pagesim scenarios golden --update` and review it"]
    expected = json.loads(path.read_text())
    actual = json.loads(json.dumps(compute_golden(scenario_path)))  # same JSON round trip
    problems = []
    for system in sorted(set(expected) | set(actual)):
        if system not in actual or system not in expected:
            problems.append(f"{scenario_path.stem}: system {system!r} only on one side")
            continue
        for key in sorted(set(expected[system]) | set(actual[system])):
            want, got = expected[system].get(key), actual[system].get(key)
            if not same_value(want, got):
                problems.append(
                    f"{scenario_path.stem}/{system}/{key}: golden {want!r}, got {got!r}"
                )
    return problems


def same_value(want: object, got: object) -> bool:
    """Summary values agree: floats to REL_TOL (platform noise), everything else exactly."""
    if isinstance(want, float) and isinstance(got, float | int):
        return math.isclose(want, got, rel_tol=REL_TOL, abs_tol=1e-12)
    return want == got

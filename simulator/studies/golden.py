"""Golden summaries of the built-in scenarios: rerun, compare, and (explicitly) update.

A golden file is `scenarios/golden/<scenario>.json`: per system, the summary scalars of the base
scenario (sweeps are not expanded). Updating one is a reviewed act:
`pagesim scenarios golden --update` rewrites them and the diff shows what changed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

from pagesim.simulator.core.errors import PagesimError
from pagesim.simulator.engine import simulate
from pagesim.simulator.scenario.load import (
    BUILTIN_DIR,
    list_builtin,
    load_scenario,
    resolve_scenario,
)

GOLDEN_DIR = Path(BUILTIN_DIR) / "golden"
REL_TOL = 1e-9  # same code, same seed: only floating-point noise across platforms


def golden_path(scenario_path: Path) -> Path:
    return GOLDEN_DIR / f"{scenario_path.stem}.json"


def compute_golden(scenario_path: Path) -> dict[str, dict[str, float | int | str | None]]:
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


class GoldenMismatch(PagesimError):
    """Reruns differ from their golden summaries: a failed check (exit 1), one line each."""


def check_builtins(on_checked: Callable[[str, list[str]], None] | None = None) -> None:
    """Rerun every built-in scenario against its golden file; `on_checked(name, problems)` hears
    each as it is done. Raises GoldenMismatch listing every problem when any differs."""
    problems = []
    for name, _ in list_builtin():
        found = compare_golden(resolve_scenario(name))
        problems += found
        if on_checked is not None:
            on_checked(name, found)
    if problems:
        raise GoldenMismatch("\n".join(problems))


def update_builtins(on_written: Callable[[Path], None] | None = None) -> None:
    """Rewrite every built-in scenario's golden file (review the diff); `on_written(path)` hears
    each file as it is written."""
    for name, _ in list_builtin():
        path = write_golden(resolve_scenario(name))
        if on_written is not None:
            on_written(path)


def same_value(want: object, got: object) -> bool:
    """Summary values agree: floats to REL_TOL (platform noise), everything else exactly."""
    if isinstance(want, float) and isinstance(got, float | int):
        return math.isclose(want, got, rel_tol=REL_TOL, abs_tol=1e-12)
    return want == got

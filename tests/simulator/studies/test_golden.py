"""Every built-in scenario reruns to its committed golden summary (scenarios/golden/).

A difference means behaviour changed: if intended, run `pagesim scenarios golden --update` and
review the diff of the golden files in the same commit.
"""

from __future__ import annotations

import pytest

from pagesim.simulator.scenario.load import list_builtin, resolve_scenario
from pagesim.simulator.studies.golden import compare_golden

BUILTINS = [name for name, _ in list_builtin()]


def test_there_are_builtins() -> None:
    assert len(BUILTINS) >= 9


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_matches_its_golden_summary(name: str) -> None:
    problems = compare_golden(resolve_scenario(name))
    assert not problems, "\n".join(problems[:20])

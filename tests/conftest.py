"""Hypothesis profiles, and how the suite shares the machine's CPUs.

Hypothesis profiles, chosen by the HYPOTHESIS_PROFILE environment variable:

- `default` (unset): hypothesis's own settings, a fresh random seed each run, so every run of the
  suite explores new cases. Its example database (.hypothesis/) is safe for parallel workers:
  each example is a file written under a temporary name and renamed into place.
- `ci` (`.ci/run` sets it): the same number of examples, derandomized (each test's seed follows
  from its source), so whether main passes depends on main's code, not on the draw; a case found
  by exploration becomes a narrative test.

Parallel workers (pytest-xdist; pyproject's addopts give `-n auto --dist loadgroup`, so the
README's plain `python -m pytest -q` uses them; `-n 0` runs in one process):

- one worker per CPU this process may use, at most MAX_WORKERS (`pytest_xdist_auto_num_workers`);
- tests are handed out one at a time to whichever worker is free, except those in one
  `xdist_group`, which run on one worker, one after another. A test whose fixture is built once
  per module or class (a module-scoped fixture) joins its module's group, so that the fixture is
  built once, not once per worker; tests that must not overlap share a named group
  (cli_helpers.MAKES_GIT_WORKTREES: two `git worktree add` at once can fail), and so must a
  module whose tests read what its earlier tests left in module state
  (`pytestmark = pytest.mark.xdist_group(...)`: test_fast_path.py);
- modules holding a test marked `slow` run first, so that the longest tests start while the
  short ones can still fill the other workers, instead of ending the run on one worker alone.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


# Workers beyond this add start-up (each imports numpy, pandas, matplotlib, simpy: ~0.2 GB)
# more than they shorten a run whose longest tests take a minute or so.
MAX_WORKERS = 8
# Fixture scopes built once per module or class: their tests stay on one worker.
_SHARED_SCOPES = ("module", "class", "package")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: a worker per CPU this process may run on (its affinity: a container's or
    taskset's share, not the host's count), at most MAX_WORKERS."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cpus or 1, MAX_WORKERS))


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the tests' ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group tests that share a module- or class-scoped fixture by module; put the modules
    holding a `slow` test first (each module's tests kept together and in order, so that a
    run in one process builds each module's fixtures once, as before)."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None and _uses_shared_fixture(item):
            item.add_marker(pytest.mark.xdist_group(f"module:{item.nodeid.split('::')[0]}"))
    slow_modules = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow_modules)  # stable


def _uses_shared_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)  # pytest's; absent on non-Python items
    if info is None:
        return False
    return any(
        definition.scope in _SHARED_SCOPES
        for definitions in info.name2fixturedefs.values()
        for definition in definitions
    )

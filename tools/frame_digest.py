#!/usr/bin/env python3
"""A digest of every built-in scenario's frames: the check that a refactor moved no result.

Goldens keep a run's summary; a change of the house (a loop moved, a fast path rehoused) must
also leave every request's and every step's row as it was. For each system of each built-in
(and, with --sweeps, each point of a built-in's [sweep]) this prints one line: the hash of the
summary (its JSON, keys sorted), of the requests frame and of the steps frame (columns, dtypes
and pandas' row hashes, index included). Run it before and after, and `diff` the two outputs;
stderr says how long each scenario took.

It uses only `simulate` and the scenario readers, so it runs unchanged on any revision: to
digest an older one, put a checkout of it first on PYTHONPATH (laid out as installed:
`pagesim/` holding its `simulator/`, as tools/step_trace.py says). Not a test: a whole run of
every built-in takes minutes.

usage: python tools/frame_digest.py [SCENARIO ...] [--sweeps]   (default: every built-in)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time

import pandas as pd

from pagesim.simulator.core.config import Scenario, SystemConfig
from pagesim.simulator.engine import simulate
from pagesim.simulator.scenario.files import list_builtin
from pagesim.simulator.scenario.load import load_scenario, resolve_scenario
from pagesim.simulator.studies.sweep import plan_sweep

HASH_CHARS = 16  # of each SHA-256: enough to tell two frames apart in a diff


def frame_hash(frame: pd.DataFrame) -> str:
    """Columns, dtypes and every row's values (index included)."""
    digest = hashlib.sha256()
    digest.update(repr(list(frame.columns)).encode())
    digest.update(repr([str(t) for t in frame.dtypes]).encode())
    digest.update(pd.util.hash_pandas_object(frame, index=True).to_numpy().tobytes())
    return digest.hexdigest()[:HASH_CHARS]


def run_digest(scenario: Scenario, system: SystemConfig) -> str:
    """summary | requests | steps of one simulated system."""
    result = simulate(scenario, system)
    summary = json.dumps(result.summary, sort_keys=True, default=repr)
    return "|".join(
        [
            hashlib.sha256(summary.encode()).hexdigest()[:HASH_CHARS],
            frame_hash(result.requests),
            frame_hash(result.steps),
        ]
    )


def digest_scenario(name: str, sweeps: bool) -> None:
    scenario = load_scenario(resolve_scenario(name))
    for system in scenario.systems:
        print(f"{name}/{system.name}: {run_digest(scenario, system)}", flush=True)
    if not sweeps or not scenario.sweep:
        return
    for point in plan_sweep(resolve_scenario(name)):
        axes = json.dumps(point.axes, sort_keys=True, default=str)
        digest = run_digest(point.scenario, point.system)
        print(f"{name}/sweep/{axes}/{point.system.name}: {digest}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", help="built-in names or files (default: all)")
    parser.add_argument("--sweeps", action="store_true", help="also each point of a [sweep]")
    args = parser.parse_args()
    names = args.scenarios or [name for name, _ in list_builtin()]
    for name in names:
        started_s = time.perf_counter()
        digest_scenario(name, args.sweeps)
        took_s = time.perf_counter() - started_s
        print(f"# {name} {took_s:.1f}s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()

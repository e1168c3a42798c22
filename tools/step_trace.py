#!/usr/bin/env python3
"""How many of the project's files one engine step runs through: a reader's measure of the house.

A newcomer should be able to follow one engine step of the per-step path (plan, price,
`yield env.timeout`, complete, record) through a handful of files. This script measures it:
`sys.setprofile` records every Python call while `engine.simulate` runs a scenario on the
per-step path (a step hook is given, which turns the decode fast path off, so
every step is its own plan); the calls between one step's end and the next's are that step's.
For each step it counts the distinct project files whose functions ran and the calls from one
project file into another; it prints the median step's figures per system, and the files the
median step touched with their call counts (`--calls`: and which of their functions ran).

It uses only `simulate`'s public arguments, so it runs unchanged on any revision: to measure an
older one, put a checkout of it first on PYTHONPATH (laid out as installed: `pagesim/` holding
its `simulator/`). tests/simulator/test_step_files.py holds the textbook scenario's median step
to at most 8 files with it; other scenarios' figures are for a person to read.

usage: python tools/step_trace.py [SCENARIO] [--system NAME] [--files | --calls]
                                  [--set PATH=VALUE ...]
       (SCENARIO a built-in name or file; default textbook_static_vs_continuous)
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import pagesim.simulator
from pagesim.simulator.engine import simulate
from pagesim.simulator.scenario.load import load_scenario

# The project's files: everything under the folder that holds the simulator (scenarios' TOML
# readers, the CLI, reports), not SimPy, NumPy or the standard library.
ROOT = str(Path(pagesim.simulator.__file__).parent.parent)  # as code objects name them
HERE = __file__


class StepTrace:
    """Per step: the project files whose code ran, and the calls between two project files."""

    def __init__(self) -> None:
        self.files: Counter[str] = Counter()  # file -> calls into it, this step
        self.functions: Counter[tuple[str, str]] = Counter()  # (file, function) -> calls
        self.num_cross_calls = 0
        self.steps: list[tuple[Counter[str], int]] = []
        self.step_functions: list[Counter[tuple[str, str]]] = []

    def end_step(self, now_s: float) -> None:
        """The step hook: the calls since the last step's end were this step's."""
        self.steps.append((self.files, self.num_cross_calls))
        self.step_functions.append(self.functions)
        self.files = Counter()
        self.functions = Counter()
        self.num_cross_calls = 0

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee = frame.f_code.co_filename
        if not callee.startswith(ROOT) or callee == HERE:
            return
        self.files[callee] += 1
        self.functions[callee, frame.f_code.co_name] += 1
        caller = frame.f_back
        if caller is not None:
            source = caller.f_code.co_filename
            if source != callee and source.startswith(ROOT) and source != HERE:
                self.num_cross_calls += 1


def trace(
    scenario_name: str, system_name: str | None, overrides: list[str]
) -> dict[str, StepTrace]:
    scenario = load_scenario(scenario_name, overrides)
    traces = {}
    for system in scenario.systems:
        if system_name is not None and system.name != system_name:
            continue
        recorder = StepTrace()
        sys.setprofile(recorder.profile)
        try:
            simulate(scenario, system, on_step=recorder.end_step)
        finally:
            sys.setprofile(None)
        recorder.steps.pop(0)  # the first step carries the run's setup: not a step's work
        recorder.step_functions.pop(0)
        traces[system.name] = recorder
    return traces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?", default="textbook_static_vs_continuous")
    parser.add_argument("--system", default=None, help="only this system")
    parser.add_argument("--files", action="store_true", help="list the median step's files")
    parser.add_argument(
        "--calls", action="store_true", help="list its files and the functions that ran in each"
    )
    parser.add_argument(
        "--set", action="append", default=[], help="a scenario override, as `pagesim run --set`"
    )
    args = parser.parse_args()
    for name, recorder in trace(args.scenario, args.system, args.set).items():
        steps = recorder.steps
        num_files = [len(files) for files, _ in steps]
        num_cross = [cross for _, cross in steps]
        median_files = statistics.median_low(num_files)
        print(
            f"{name}: {len(steps)} steps; median step: {median_files} files, "
            f"{statistics.median_low(num_cross)} cross-file calls "
            f"(range {min(num_files)}-{max(num_files)} files)"
        )
        if args.files or args.calls:  # a step of the median size, its files by calls into them
            at = next(i for i, (files, _) in enumerate(steps) if len(files) == median_files)
            functions = recorder.step_functions[at]
            for path, count in steps[at][0].most_common():
                print(f"    {count:5d}  {Path(path).relative_to(ROOT)}")
                if args.calls:
                    ran = sorted((name, n) for (file, name), n in functions.items() if file == path)
                    print("           " + ", ".join(f"{name} {n}" for name, n in ran))


if __name__ == "__main__":
    main()

"""Before and after, in one run: time the simulator at another git revision beside this one.

A speed claim is a ratio measured on one machine in one sitting. `compare_revisions` checks the
other revision out into a temporary git worktree and times the same benchmark in fresh
processes, alternating before and after so that a busy machine slows both alike; each side keeps
its best run. Each process reports its own peak memory, and both summaries are compared, since a
faster simulator must also give the same answers.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pagesim.simulator.core.errors import InputError
from pagesim.simulator.studies.golden import same_value

REPO_ROOT = Path(__file__).resolve().parents[2]

# Runs in a fresh interpreter with one revision's tree first on sys.path. It uses only the API
# every revision with `pagesim bench sim` has: the bench scenarios and `simulate`.
_TIMED_RUN = """
import json, resource, sys, time
import importlib
import pagesim
pagesim.__path__.append(sys.path[0])  # the tree's top-level folders as pagesim's subpackages
for bench_name, engine_name in (
    ("pagesim.simulator.studies.bench", "pagesim.simulator.engine"),  # subpackage layout
    ("pagesim.simulator.bench", "pagesim.simulator.engine"),  # one namespace, flat simulator
    ("simulator.bench", "simulator.engine"),  # simulator/ as a top-level package
):
    try:
        bench = importlib.import_module(bench_name)
        simulate = importlib.import_module(engine_name).simulate
        break
    except ImportError:
        continue
sharegpt_scenario, trace_replay_scenario = bench.sharegpt_scenario, bench.trace_replay_scenario
a = json.loads(sys.argv[1])
if a["synthetic"] is not None:
    scenario = sharegpt_scenario(a["synthetic"], a["rate"], a["policy"])
else:
    scenario = trace_replay_scenario(a["trace"], a["requests"], a["policy"])
start = time.perf_counter()
result = simulate(scenario)
wall_s = time.perf_counter() - start
requests = result.requests
print(json.dumps({
    "wall_s": wall_s,
    "num_requests": int(result.summary["num_requests"]),
    "num_tokens": float(requests["output_len"].sum() + requests["prompt_len"].sum()),
    "num_steps": int(result.summary["num_steps"]),
    "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "summary": result.summary,
}))
"""


@dataclass(frozen=True)
class TimedRun:
    """One benchmark run in its own process."""

    wall_s: float
    num_requests: int
    num_tokens: float
    num_steps: int
    peak_rss_mib: float
    summary: dict[str, object]


@dataclass(frozen=True)
class Comparison:
    before: TimedRun  # best (fastest) run of the other revision
    after: TimedRun  # best run of this tree
    revision: str
    num_repeats: int

    @property
    def speedup(self) -> float:
        return self.before.wall_s / self.after.wall_s

    @property
    def memory_ratio(self) -> float:
        return self.after.peak_rss_mib / self.before.peak_rss_mib

    def summary_differences(self) -> list[str]:
        """Summary keys whose values differ as a golden comparison would see it (floats beyond
        `golden.REL_TOL`), or exist on one side only."""
        before, after = self.before.summary, self.after.summary
        out = []
        for key in sorted(set(before) | set(after)):
            if key not in before or key not in after:
                out.append(f"{key} (only {'after' if key in after else 'before'})")
            elif not same_value(before[key], after[key]):
                out.append(f"{key}: {before[key]!r} -> {after[key]!r}")
        return out


def timed_run(root: Path, args: dict[str, object]) -> TimedRun:
    """Run the benchmark described by `args` with the simulator found under `root`."""
    # `-S`: no site processing, so no installed pagesim (an editable install's import hook
    # would serve this tree's modules to the other revision); the dependencies come from the
    # site-packages folders named after the revision's tree, which wins.
    path = os.pathsep.join([str(root), *site.getsitepackages()])
    env = os.environ | {"PYTHONPATH": path, "PYTHONSAFEPATH": "1"}
    done = subprocess.run(
        [sys.executable, "-S", "-c", _TIMED_RUN, json.dumps(args)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise InputError(f"the benchmark failed under {root}: {last}")
    return TimedRun(**json.loads(done.stdout.strip().splitlines()[-1]))


def compare_revisions(revision: str, args: dict[str, object], num_repeats: int) -> Comparison:
    """Time `args` at git `revision` (before) and in this tree (after), alternating."""
    if num_repeats < 1:
        raise InputError(f"--repeat must be at least 1, got {num_repeats}")
    with tempfile.TemporaryDirectory(prefix="pagesim-bench-") as folder:
        worktree = Path(folder) / "before"
        _git("worktree", "add", "--detach", str(worktree), revision)
        try:
            runs: dict[str, list[TimedRun]] = {"before": [], "after": []}
            for _ in range(num_repeats):
                runs["before"].append(timed_run(worktree, args))
                runs["after"].append(timed_run(REPO_ROOT, args))
        finally:
            _git("worktree", "remove", "--force", str(worktree))
    return Comparison(
        before=min(runs["before"], key=lambda r: r.wall_s),
        after=min(runs["after"], key=lambda r: r.wall_s),
        revision=revision,
        num_repeats=num_repeats,
    )


def _git(*args: str) -> None:
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, check=False
        )
    except FileNotFoundError:
        raise InputError("--against needs git on the PATH") from None
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or ["failed"])[-1]
        raise InputError(f"--against: git {args[0]} {args[1]}: {detail}")

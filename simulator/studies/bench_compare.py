"""Before and after, in one run: time the simulator at another git revision beside this one.

A speed claim is a ratio measured on one machine in one sitting. `compare_revisions` checks the
other revision out into a temporary git worktree and times the same benchmark in fresh
processes, alternating before and after so that a busy machine slows both alike; each side keeps
its best run (least CPU time: wall time swings with the machine's load). Each process reports
its own peak memory, and both summaries are compared, since a faster simulator must also give
the same answers.
"""

from __future__ import annotations

import compileall
import json
import os
import site
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pagesim.simulator.core.errors import InputError
from pagesim.simulator.studies import bench, timing
from pagesim.simulator.studies.golden import same_value
from pagesim.simulator.studies.timing import BenchSpec, TimedRun

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMING_SCRIPT = Path(timing.__file__).resolve()  # run by path in each child: see its docstring
# Folders of a tree that hold no module a run imports (hidden ones too: .git, .venv, .tox)
_NOT_COMPILED = frozenset(("tests", "build", "dist", "venv", "env", "node_modules", "__pycache__"))
ChildMode = Literal["time", "setup"]  # timing.py's: time the simulation, or stop before it


@dataclass(frozen=True)
class Comparison:
    before: TimedRun  # best (least CPU time) run of the other revision
    after: TimedRun  # best run of this tree
    revision: str
    num_repeats: int
    spec: BenchSpec  # as asked (a trace file by the path given)
    # Every run's CPU seconds, in the order they ran (before, after, before, after, ...): the
    # spread says how far one sitting's machine swings; each before/after pair ran back to back.
    before_cpu_s: tuple[float, ...] = ()
    after_cpu_s: tuple[float, ...] = ()

    @property
    def speedup(self) -> float:
        return self.before.wall_s / self.after.wall_s

    @property
    def cpu_speedup(self) -> float:
        return self.before.cpu_s / self.after.cpu_s

    @property
    def paired_cpu_speedups(self) -> list[float]:
        """Each back-to-back pair's CPU-time ratio, before / after, in run order."""
        return [b / a for b, a in zip(self.before_cpu_s, self.after_cpu_s, strict=True)]

    @property
    def median_paired_cpu_speedup(self) -> float:
        """The median of `paired_cpu_speedups` (the mean of the middle two for an even count):
        a drift of the machine's speed over the sitting moves both runs of a pair alike."""
        ratios = sorted(self.paired_cpu_speedups)
        if not ratios:
            return self.cpu_speedup
        middle = len(ratios) // 2
        return ratios[middle] if len(ratios) % 2 else (ratios[middle - 1] + ratios[middle]) / 2

    @property
    def memory_ratio(self) -> float:
        return self.after.peak_rss_mib / self.before.peak_rss_mib

    def summary_differences(self) -> list[str]:
        """Summary keys whose values differ (`summary_differences`)."""
        return summary_differences(self.before.summary, self.after.summary)


def timed_run(root: Path, spec: BenchSpec) -> TimedRun:
    """Time `spec` in a fresh interpreter with the simulator of the tree at `root`."""
    return parse_run(run_child(root, spec).stdout)


def parse_run(output: str) -> TimedRun:
    """The run a timing child printed (its last line, JSON)."""
    return TimedRun(**json.loads(output.strip().splitlines()[-1]))


def run_child(
    root: Path,
    spec: BenchSpec,
    mode: ChildMode = "time",
    wrapper: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the benchmark child (timing.py, `mode` "time" or "setup") with the simulator of the
    tree at `root`, under `wrapper` (a command such as valgrind) and these extra environment
    variables; InputError naming the tree if it fails."""
    # `-S`: no site processing, so no installed pagesim (an editable install's import hook
    # would serve this tree's modules to the other revision); the dependencies come from the
    # site-packages folders named after the revision's tree, which wins. PYTHONSAFEPATH keeps
    # the script's own folder (this tree's simulator/studies) off sys.path.
    path = os.pathsep.join([str(root), *site.getsitepackages()])
    child_env = os.environ | {"PYTHONPATH": path, "PYTHONSAFEPATH": "1"} | (env or {})
    command = [sys.executable, "-S", str(TIMING_SCRIPT), str(root), json.dumps(asdict(spec))]
    done = subprocess.run(
        [*wrapper, *command, mode],
        cwd=root,
        env=child_env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise InputError(f"the benchmark failed under {root}: {last}")
    return done


def compare_revisions(revision: str, spec: BenchSpec, num_repeats: int) -> Comparison:
    """Time `spec` at git `revision` (before) and in this tree (after), alternating."""
    if num_repeats < 1:
        raise InputError(f"--repeat must be at least 1, got {num_repeats}")
    runs: dict[str, list[TimedRun]] = {"before": [], "after": []}
    with revision_tree(revision, spec) as (worktree, timed):
        compile_tree(REPO_ROOT)
        for _ in range(num_repeats):
            runs["before"].append(timed_run(worktree, timed))
            runs["after"].append(timed_run(REPO_ROOT, timed))
    return Comparison(
        before=min(runs["before"], key=lambda r: r.cpu_s),
        after=min(runs["after"], key=lambda r: r.cpu_s),
        revision=revision,
        num_repeats=num_repeats,
        spec=spec,
        before_cpu_s=tuple(r.cpu_s for r in runs["before"]),
        after_cpu_s=tuple(r.cpu_s for r in runs["after"]),
    )


@contextmanager
def revision_tree(revision: str, spec: BenchSpec) -> Iterator[tuple[Path, BenchSpec]]:
    """Git `revision` checked out into a temporary worktree (removed after), and `spec` as
    each run's child reads it (a trace file by its absolute path: each child runs in its own
    tree's root)."""
    timed = checked_spec(spec)  # a bad --policy, --requests or --synthetic: said before git runs
    with worktree_at(revision) as worktree:
        yield worktree, timed


@contextmanager
def worktree_at(revision: str) -> Iterator[Path]:
    """Git `revision` checked out into a temporary worktree, byte-compiled (removed after)."""
    with tempfile.TemporaryDirectory(prefix="pagesim-bench-") as folder:
        worktree = Path(folder) / "before"
        _git("worktree", "add", "--detach", str(worktree), revision)
        try:
            compile_tree(worktree)
            yield worktree
        finally:
            _git("worktree", "remove", "--force", str(worktree))


def compile_tree(root: Path) -> None:
    """Byte-compile the tree's modules (tests and build outputs aside) into its __pycache__
    folders first, so that no run compiles them: a fresh worktree has none, and where
    PYTHONDONTWRITEBYTECODE is set no import writes them, so the other revision's every run
    would compile what it imports (lazily imported modules inside the timed simulation). The
    folders skipped are named relative to the tree, whatever folder holds it."""
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [
            name for name in subfolders if name not in _NOT_COMPILED and not name.startswith(".")
        ]
        for name in files:
            if name.endswith(".py"):  # for the children's optimization level: plain .pyc
                compileall.compile_file(os.path.join(folder, name), quiet=2, optimize=0)


def checked_spec(spec: BenchSpec) -> BenchSpec:
    """`spec` as a child reads it, its scenario built once here (InputError if it cannot be): a
    trace file by its absolute path, since each child runs in its own tree's root."""
    spec.scenario(bench)
    if Path(spec.trace).is_file():
        return replace(spec, trace=str(Path(spec.trace).resolve()))
    return spec


def summary_differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Summary keys whose values differ as a golden comparison would see it (floats beyond
    `golden.REL_TOL`), or exist on one side only."""
    out = []
    for key in sorted(set(before) | set(after)):
        if key not in before or key not in after:
            out.append(f"{key} (only {'after' if key in after else 'before'})")
        elif not same_value(before[key], after[key]):
            out.append(f"{key}: {before[key]!r} -> {after[key]!r}")
    return out


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

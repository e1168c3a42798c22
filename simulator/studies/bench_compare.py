"""Before and after, in one run: time the simulator at another git revision beside this one.

A speed claim is a ratio measured on one machine in one sitting. `compare_revisions` checks the
other revision out into a temporary git worktree and times the same benchmark in fresh
processes, alternating before and after so that a busy machine slows both alike; each side keeps
its best run (least CPU time: wall time swings with the machine's load). Each process reports
its own peak memory, and both summaries are compared, since a faster simulator must also give
the same answers. `time_this_tree` times this tree alone the same way (`pagesim bench sim`
without --against). What the runs say, and how surely, is bench_spread.py's.
"""

from __future__ import annotations

import compileall
import json
import os
import site
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pagesim.simulator.core.errors import InputError
from pagesim.simulator.studies import bench, timing
from pagesim.simulator.studies.bench_spread import Runs, SpeedRatio, load_average
from pagesim.simulator.studies.golden import same_value
from pagesim.simulator.studies.timing import BenchSpec, TimedRun

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMING_SCRIPT = Path(timing.__file__).resolve()  # run by path in each child: see its docstring
# Folders of a tree that hold no module a run imports (hidden ones too: .git, .venv, .tox)
_NOT_COMPILED = frozenset(("tests", "build", "dist", "venv", "env", "node_modules", "__pycache__"))
ChildMode = Literal["time", "setup"]  # timing.py's: time the simulation, or stop before it
WORKTREE_TRIES = 3  # `_add_worktree`
MAX_REPEATS = 20  # runs per side: a sitting long enough; more is a typo


@dataclass(frozen=True)
class Sitting:
    """This tree's runs of `spec`, one process each, and the load average before each run and
    after the last."""

    spec: BenchSpec  # as asked (a trace or scenario file by the path given)
    runs: Runs
    load_averages: tuple[float, ...] = ()


@dataclass(frozen=True)
class Comparison:
    """Git `revision` (before) and this tree (after), timed alternately in one sitting."""

    speed: SpeedRatio
    revision: str
    spec: BenchSpec  # as asked (a trace or scenario file by the path given)
    load_averages: tuple[float, ...] = ()  # before each pair and after the last

    @property
    def num_repeats(self) -> int:
        return len(self.speed.after.runs)

    def summary_differences(self) -> list[str]:
        """Summary keys whose values differ between the sides' best runs
        (`summary_differences`)."""
        return summary_differences(self.speed.before.best.summary, self.speed.after.best.summary)


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
    # site-packages folders named after the revision's tree, which wins: this interpreter's,
    # and those its .pth files or the user's site added to sys.path. PYTHONSAFEPATH keeps the
    # script's own folder (this tree's simulator/studies) off sys.path.
    path = os.pathsep.join([str(root), *package_folders()])
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


def package_folders() -> list[str]:
    """The folders installed packages come from: site-packages of this interpreter and any
    other on sys.path (a .pth line's, the user's), none of them a source tree."""
    folders = list(site.getsitepackages())
    for entry in sys.path:
        if Path(entry).name in ("site-packages", "dist-packages") and entry not in folders:
            folders.append(entry)
    return folders


def compare_revisions(revision: str, spec: BenchSpec, num_repeats: int) -> Comparison:
    """Time `spec` at git `revision` (before) and in this tree (after), alternating."""
    check_repeats(num_repeats)
    runs: dict[str, list[TimedRun]] = {"before": [], "after": []}
    loads = []
    with revision_tree(revision, spec) as (worktree, timed):
        compile_tree(REPO_ROOT)
        for _ in range(num_repeats):
            loads.append(load_average())
            runs["before"].append(timed_run(worktree, timed))
            runs["after"].append(timed_run(REPO_ROOT, timed))
        loads.append(load_average())
    speed = SpeedRatio(Runs(tuple(runs["before"])), Runs(tuple(runs["after"])))
    return Comparison(speed, revision, spec, tuple(x for x in loads if x is not None))


def time_this_tree(spec: BenchSpec, num_repeats: int) -> Sitting:
    """Time `spec` `num_repeats` times with this tree, each run in a fresh process (as
    `compare_revisions` times each side: no run finds another's caches warm)."""
    check_repeats(num_repeats)
    timed = checked_spec(spec)
    compile_tree(REPO_ROOT)
    runs, loads = [], []
    for _ in range(num_repeats):
        loads.append(load_average())
        runs.append(timed_run(REPO_ROOT, timed))
    loads.append(load_average())
    return Sitting(spec, Runs(tuple(runs)), tuple(x for x in loads if x is not None))


def check_repeats(num_repeats: int) -> None:
    if not 1 <= num_repeats <= MAX_REPEATS:
        raise InputError(f"--repeat must be from 1 to {MAX_REPEATS}, got {num_repeats}")


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
        worktree = _add_worktree(Path(folder), revision)
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
    if spec.scenario_file is not None:
        return replace(spec, scenario_file=str(Path(spec.scenario_file).resolve()))
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


def _add_worktree(folder: Path, revision: str) -> Path:
    """`revision` checked out under `folder`. Tried three times: `git worktree add` reads every
    worktree of the repository, and one that another `add` is creating at that moment makes it
    fail ("failed to read .git/worktrees/<name>/commondir"; seen with six at once)."""
    for attempt in range(WORKTREE_TRIES):
        worktree = folder / f"before{attempt}"  # a failed try may leave its folder behind
        try:
            _git("worktree", "add", "--detach", str(worktree), revision)
            return worktree
        except InputError:
            if attempt == WORKTREE_TRIES - 1:
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


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

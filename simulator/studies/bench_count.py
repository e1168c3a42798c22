"""The simulator's CPU instructions, counted: a speed measure that does not swing with the machine.

Wall and CPU times on a shared machine move by a tenth or more from one sitting to the next, so a
small speed change hides in them (`bench_compare.py` alternates runs to see through some of it).
An instruction count does not move: valgrind's cachegrind (`--cache-sim=no`: counting only)
runs the same benchmark child as `--against` does, with Python's string hashing fixed and the
BLAS libraries on one thread (`COUNT_ENV`), each tree's modules compiled first, and reports the
instructions executed: the same tree gives the same count to a few thousand instructions in
~1.5 G. The simulation's count is the whole run's minus that of a run that stops just before
`simulate` (the imports and the scenario built); so it holds what `simulate` does (the trace is
read inside it, and a fleet imports its cluster modules there: ~20 M) and the child's report of
it (~2 M: token sums, JSON), the same code on both sides of a comparison. Instructions are not
time: cache misses, which pagesim's fleets meet often, cost time without instructions, so a
speed claim still needs a timed comparison; counts rank changes too small for timing to see.
Valgrind slows a run some 50 times: count a few thousand requests (`--requests`), not a trace.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pagesim.simulator.core.errors import InputError
from pagesim.simulator.studies.bench_compare import (
    REPO_ROOT,
    ChildMode,
    checked_spec,
    compile_tree,
    parse_run,
    revision_tree,
    run_child,
    summary_differences,
)
from pagesim.simulator.studies.timing import BenchSpec, TimedRun

# Counting only (no cache simulation), no output file; valgrind's own report (its "I refs" line)
# goes to a log file (`--log-file`), the child's stderr stays the child's (its error, if any).
VALGRIND = ("valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null")
# str hashes, hence dict and set orders, alike every run; the BLAS libraries on one thread (their
# worker threads spin for a varying while: ~100 M instructions at NumPy's import, and the count
# moved by ~0.3% run to run; on one thread it repeats to a few thousand instructions)
COUNT_ENV = {
    "PYTHONHASHSEED": "0",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
_I_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


@dataclass(frozen=True)
class CountedRun:
    """One tree's counts: the whole run's instructions and the setup's (all but simulating),
    and the run's own report (its summary; its times, under valgrind, mean nothing)."""

    run_instructions: int
    setup_instructions: int
    run: TimedRun

    @property
    def instructions(self) -> int:
        """The simulation's: the run's minus the setup's."""
        return self.run_instructions - self.setup_instructions


@dataclass(frozen=True)
class CountComparison:
    """Counts of git `revision` (before; None when only this tree was counted) and this tree."""

    before: CountedRun | None
    after: CountedRun
    revision: str | None
    spec: BenchSpec

    @property
    def ratio(self) -> float:
        """After over before, of the simulation's instructions (below 1: fewer)."""
        assert self.before is not None
        return self.after.instructions / self.before.instructions

    def summary_differences(self) -> list[str]:
        """Summary keys whose values differ between the sides (`summary_differences`)."""
        assert self.before is not None
        return summary_differences(self.before.run.summary, self.after.run.summary)


def instructions_of(report: str) -> int:
    """The instruction count in valgrind's report (its last "I refs" line)."""
    found = _I_REFS.findall(report)
    if not found:
        raise InputError("--instructions: valgrind printed no instruction count ('I refs')")
    return int(found[-1].replace(",", ""))


def counted(root: Path, spec: BenchSpec, mode: ChildMode) -> tuple[int, str]:
    """The instructions of one child run (`mode`) of `spec` with the tree at `root`, under
    valgrind, and the child's output."""
    with tempfile.TemporaryDirectory(prefix="pagesim-count-") as folder:
        log = Path(folder) / "valgrind.log"
        done = run_child(root, spec, mode, (*VALGRIND, f"--log-file={log}"), COUNT_ENV)
        report = log.read_text() if log.is_file() else ""
    return instructions_of(report), done.stdout


def counted_run(root: Path, spec: BenchSpec) -> CountedRun:
    """Count `spec`'s instructions with the simulator of the tree at `root` (compiled already:
    `compile_tree`; else the count includes compiling modules, some in the setup and the
    lazily imported ones in the simulation)."""
    setup, _ = counted(root, spec, "setup")
    whole, output = counted(root, spec, "time")
    return CountedRun(whole, setup, parse_run(output))


def count_instructions(spec: BenchSpec, revision: str | None = None) -> CountComparison:
    """This tree's count of `spec`, and with `revision` that revision's too."""
    if shutil.which(VALGRIND[0]) is None:
        raise InputError(
            "--instructions needs valgrind on the PATH (Debian and Ubuntu: apt-get install "
            "valgrind); without it, compare times with --against and --repeat"
        )
    if revision is None:
        checked = checked_spec(spec)
        compile_tree(REPO_ROOT)
        return CountComparison(None, counted_run(REPO_ROOT, checked), None, spec)
    with revision_tree(revision, spec) as (worktree, checked):  # the worktree compiled
        compile_tree(REPO_ROOT)
        before = counted_run(worktree, checked)
        after = counted_run(REPO_ROOT, checked)
    return CountComparison(before, after, revision, spec)

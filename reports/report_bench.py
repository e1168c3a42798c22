"""`pagesim bench report`: what writing a report adds to its run, per scenario, against the
project's budget for it: at most a third of the run's CPU time, or 1 s, whichever is larger
(docs/reports.md, "What a report costs").

Each case (a scenario's run, or its sweep) is timed in a fresh interpreter (reports/
bench_child.py says exactly what each figure covers), so that every case pays the same imports;
`repeat` rounds go through every case in turn, and each figure is the median over the rounds.
With `against`, another git revision's tree is timed the same way, alternating with this one
case by case, so that a machine busy with other work slows both sides alike.

The run's CPU time is that of `pagesim run --no-report`: the interpreter, its imports, the
simulation and the data files it writes (for a sweep, every point in one process). The report's
is everything `pagesim run` (or `sweep`) does beyond that: importing the plotting code, the plots
(any worker processes that draw them included) and the page. (Before 7 December 2026 the data
files counted in the report's time, and `--no-report` imported the plotting code too.)
"""

from __future__ import annotations

import json
import os
import site
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from pathlib import Path

from pagesim.reports import bench_child
from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.scenario.files import list_builtin
from pagesim.simulator.scenario.load import load_scenario, resolve_scenario

CHILD_SCRIPT = Path(bench_child.__file__).resolve()  # run by path: see its docstring
THIS_TREE = Path(__file__).resolve().parents[1]
KINDS = ("run", "sweep", "all")
BUDGET_SHARE = 1 / 3  # of the run's CPU time (the budget docs/reports.md states)
MIN_BUDGET_S = 1.0  # ... or this, whichever is larger


@dataclass(frozen=True)
class Case:
    scenario: str  # a built-in's name or a scenario file
    kind: str  # "run" or "sweep"


@dataclass(frozen=True)
class ReportCost:
    """One case's figures (CPU and wall seconds; bench_child.py defines each)."""

    scenario: str
    kind: str
    startup_cpu_s: float
    simulate_cpu_s: float
    run_wall_s: float
    report_cpu_s: float
    report_wall_s: float
    data_cpu_s: float
    num_plots: int
    load_1min: float  # the machine's 1-minute load average when the case started

    @property
    def run_cpu_s(self) -> float:
        """What `pagesim run --no-report` costs: startup, simulation and data files."""
        return self.startup_cpu_s + self.simulate_cpu_s + self.data_cpu_s

    @property
    def budget_s(self) -> float:
        """The most the report may cost: a third of the run, or 1 s."""
        return max(BUDGET_SHARE * self.run_cpu_s, MIN_BUDGET_S)

    @property
    def report_share(self) -> float:
        """The report's CPU time over the run's."""
        return self.report_cpu_s / self.run_cpu_s if self.run_cpu_s > 0 else float("inf")

    @property
    def is_within_budget(self) -> bool:
        return self.report_cpu_s <= self.budget_s


@dataclass(frozen=True)
class ReportBench:
    after: list[ReportCost]  # this tree, a median per case
    before: list[ReportCost] | None  # `revision`'s, case by case, when asked
    revision: str | None
    num_repeats: int
    load_1min: tuple[float, float]  # the lowest and highest load average seen at a case's start


def bench_cases(names: Sequence[str], kind: str = "all") -> list[Case]:
    """The cases to time: every built-in when `names` is empty; a run of each (`kind` run or
    all) and its sweep (sweep or all; with all, only for scenarios with a [sweep] table)."""
    if kind not in KINDS:
        raise InputError(f"--kind: unknown kind {kind!r}; valid: {choices_text(KINDS)}")
    chosen = list(names) or [name for name, _ in list_builtin()]
    found = []
    for name in chosen:
        has_sweep = bool(load_scenario(resolve_scenario(name)).sweep)
        if kind == "sweep" and not has_sweep:
            raise InputError(f"{name!r}: --kind sweep, but the scenario has no [sweep] table")
        if kind in ("run", "all"):
            found.append(Case(name, "run"))
        if kind in ("sweep", "all") and has_sweep:
            found.append(Case(name, "sweep"))
    return found


def time_case(tree: Path, case: Case, overrides: Sequence[str] = ()) -> ReportCost:
    """Time `case` in a fresh interpreter with the code of the tree at `tree`."""
    # `-S` and PYTHONSAFEPATH, as `bench sim --against` runs its children: no installed
    # pagesim's import hook (it would serve this tree to another revision), nor this script's
    # folder, on sys.path; the tree comes first, then the dependencies.
    path = os.pathsep.join([str(tree), *site.getsitepackages()])
    env = os.environ | {"PYTHONPATH": path, "PYTHONSAFEPATH": "1"}
    args = [str(tree), case.scenario, case.kind, json.dumps(list(overrides))]
    done = subprocess.run(
        [sys.executable, "-S", str(CHILD_SCRIPT), *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise InputError(f"{case.scenario} ({case.kind}) failed under {tree}: {last}")
    return ReportCost(**json.loads(done.stdout.strip().splitlines()[-1]))


def median_cost(samples: Sequence[ReportCost]) -> ReportCost:
    """Each figure's median over `samples` (of one case)."""
    medians = {
        f.name: statistics.median(getattr(s, f.name) for s in samples)
        for f in fields(ReportCost)
        if f.name not in ("scenario", "kind")
    }
    medians["num_plots"] = max(s.num_plots for s in samples)
    return replace(samples[0], **medians)


def bench_reports(
    cases: Sequence[Case],
    overrides: Sequence[str] = (),
    repeat: int = 3,
    against: str | None = None,
    on_cost: Callable[[str, ReportCost], None] | None = None,
) -> ReportBench:
    """Time every case `repeat` times (rounds through all of them), here and, with `against`,
    at that git revision too, alternating; `on_cost(side, cost)` hears of each as it ends."""
    if repeat < 1:
        raise InputError(f"--repeat must be at least 1, got {repeat}")
    for case in cases:  # a bad scenario or --set fails here, before any timing
        load_scenario(resolve_scenario(case.scenario), list(overrides))
    samples: dict[str, dict[Case, list[ReportCost]]] = {"before": {}, "after": {}}
    with _revision(against) as before_tree:
        compiled(THIS_TREE)  # as the other revision's tree is: no child compiles what it imports
        for _ in range(repeat):
            for case in cases:
                trees = [("before", before_tree)] if before_tree is not None else []
                for side, tree in [*trees, ("after", THIS_TREE)]:
                    cost = time_case(tree, case, overrides)
                    samples[side].setdefault(case, []).append(cost)
                    if on_cost is not None:
                        on_cost(side, cost)
    every = [c for side in samples.values() for costs in side.values() for c in costs]
    loads = [c.load_1min for c in every]
    return ReportBench(
        after=[median_cost(samples["after"][case]) for case in cases],
        before=[median_cost(samples["before"][case]) for case in cases] if against else None,
        revision=against,
        num_repeats=repeat,
        load_1min=(min(loads), max(loads)),
    )


def compiled(tree: Path) -> None:
    """Byte-compile `tree`'s modules first, as `bench sim` does (bench_compare.compile_tree says
    why): where PYTHONDONTWRITEBYTECODE is set, a tree without bytecode has each fresh child
    compile every module it imports, in its run and in its report (about 0.15 and 0.04 s of CPU for
    azure_conv_v0_vs_chunked, 7 December 2026), which an installed pagesim never does and the
    other revision's tree, compiled when it is checked out, did not either."""
    from pagesim.simulator.studies.bench_compare import compile_tree

    compile_tree(tree)


@contextmanager
def _revision(revision: str | None) -> Iterator[Path | None]:
    if revision is None:
        yield None
        return
    from pagesim.simulator.studies.bench_compare import worktree_at

    with worktree_at(revision) as tree:
        yield tree

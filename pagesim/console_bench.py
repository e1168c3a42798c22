"""How `pagesim bench sim` prints: what was timed, then the CPU time (the measure: it moves by
a few per cent on a busy machine) and any ratio, and only then the wall time, always as the range
its runs covered beside the machine's load, never as a ratio of its own.

Each function returns the lines; `pagesim.cli_bench` prints them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pagesim.console import Column, table_lines
from pagesim.simulator.studies.bench_spread import Runs, Verdict, median, times_text

if TYPE_CHECKING:
    from pagesim.simulator.studies.bench_compare import Comparison, Sitting
    from pagesim.simulator.studies.bench_count import CountComparison

# One row per side: the best run's CPU time (its rates per CPU second: the steady figures), the
# range of every run's CPU and wall times, and the largest peak RSS of its runs.
SPEED_COLUMNS: list[Column] = [
    ("side", "", ""),
    ("cpu_best_s", "CPU s", ".2f"),
    ("cpu_runs", "CPU s runs", ""),
    ("wall_runs", "wall s runs", ""),
    ("requests", "req/CPU s", ",.0f"),
    ("tokens", "tok/CPU s", ",.0f"),
    ("steps", "steps/CPU s", ",.0f"),
    ("rss_mib", "RSS MiB", ",.0f"),
]


def sitting_lines(sitting: Sitting) -> list[str]:
    """`pagesim bench sim`: what ran, its CPU time and rates, its wall times and the load."""
    best = sitting.runs.best
    count = len(sitting.runs.runs)
    return [
        f"{sitting.spec.title}: {best.num_requests} requests, simulated "
        f"{best.summary['duration_s']:.0f} s, {best.num_steps:,} steps; {count} "
        f"run{'s' if count > 1 else ''}, one process each",
        *table_lines([_row("this tree", sitting.runs)], SPEED_COLUMNS),
        _wall_line(sitting.load_averages, None),
    ]


def comparison_lines(comparison: Comparison) -> list[str]:
    """`pagesim bench sim --against`: the CPU-time ratio and how surely the runs say it, each
    side's times, the wall times beside the load, then memory and whether the answers agree."""
    speed = comparison.speed
    return [
        f"{comparison.spec.title}: {comparison.revision} (before) vs this tree (after), "
        f"{comparison.num_repeats} alternating runs each, one process per run",
        _cpu_line(comparison),
        *table_lines([_row("before", speed.before), _row("after", speed.after)], SPEED_COLUMNS),
        _wall_line(comparison.load_averages, speed.paired_wall_ratios),
        f"peak RSS after/before x{speed.memory_ratio:.2f}; "
        + agreement(comparison.summary_differences()),
    ]


def instruction_lines(counts: CountComparison) -> list[str]:
    """`pagesim bench sim --instructions`: the simulation's instructions (setup subtracted), per
    side, their ratio, and with --against whether the summaries agree."""
    spec = counts.spec
    if counts.before is None:
        sides = [("this tree", counts.after)]
    else:
        sides = [
            (f"{counts.revision} (before)", counts.before),
            ("this tree (after)", counts.after),
        ]
    lines = [
        f"{spec.title}: instructions of the simulation (valgrind cachegrind, one BLAS thread, "
        f"PYTHONHASHSEED=0; setup subtracted), {counts.after.run.num_steps:,} steps"
    ]
    for name, side in sides:
        lines.append(
            f"  {name}: {side.instructions:,} ({side.instructions / 1e9:.3f} G; the whole run "
            f"{side.run_instructions / 1e9:.3f} G, setup {side.setup_instructions / 1e9:.3f} G)"
        )
    if counts.before is None:
        return lines
    lines.append(
        f"after/before: {counts.ratio:.4f} ({counts.ratio - 1:+.2%} instructions); "
        + agreement(counts.summary_differences())
    )
    return lines


def agreement(differences: list[str]) -> str:
    """Whether two runs' summaries agree (golden.REL_TOL), else the first keys that differ."""
    if not differences:
        return "summaries agree (rel 1e-9)"
    return f"summaries differ in {len(differences)} keys: " + "; ".join(differences[:5])


def _cpu_line(comparison: Comparison) -> str:
    """The claim: this tree's CPU time against the revision's, and what the pairs say of it."""
    speed = comparison.speed
    ratio = speed.cpu_ratio
    best = f"best runs {speed.before.best.cpu_s:.2f} s -> {speed.after.best.cpu_s:.2f} s"
    pairs = ", ".join(f"{r:.2f}x" for r in speed.paired_cpu_ratios)
    verdict = speed.verdict
    if verdict is Verdict.ONE_PAIR:
        return (
            f"CPU time: this tree {times_text(ratio)} ({best}; one pair: --repeat 3 shows the "
            "noise)"
        )
    if verdict is Verdict.WITHIN_NOISE:
        return (
            f"CPU time: no difference beyond the noise ({best}, {times_text(ratio)}; back-to-back "
            f"pairs before/after {pairs}; the sides' runs overlap or the pairs disagree)"
        )
    return (
        f"CPU time: this tree {times_text(ratio)} ({best}; every back-to-back pair agrees, "
        f"before/after {pairs}, median {speed.median_paired_cpu_ratio:.2f}x)"
    )


def _row(side: str, runs: Runs) -> dict[str, object]:
    best = runs.best
    return {
        "side": side,
        "cpu_best_s": best.cpu_s,
        "cpu_runs": runs.cpu.range_text(),
        "wall_runs": runs.wall.range_text(),
        "requests": best.num_requests / best.cpu_s,
        "tokens": best.num_tokens / best.cpu_s,
        "steps": best.num_steps / best.cpu_s,
        "rss_mib": runs.peak_rss_mib,
    }


def _wall_line(load_averages: Sequence[float], paired_ratios: Sequence[float] | None) -> str:
    """Why the wall times are not the measure: the machine's load over the sitting, and (two
    sides) how far the pairs' wall ratios ranged."""
    cpus = os.cpu_count() or 1
    if load_averages:
        low, high = f"{min(load_averages):.1f}", f"{max(load_averages):.1f}"
        where = f"1-minute load average {low}" + (f"-{high}" if high != low else "")
    else:
        where = "load average unknown"
    ratios = ""
    if paired_ratios:
        ratios = (
            f"; back-to-back pairs' wall ratios {min(paired_ratios):.2f}x-"
            f"{max(paired_ratios):.2f}x, median {median(list(paired_ratios)):.2f}x"
        )
    return (
        f"wall time swings with the machine's load ({where} on {cpus} CPUs{ratios}): "
        "CPU time is the measure"
    )

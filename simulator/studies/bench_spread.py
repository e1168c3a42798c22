"""Several timed runs of one benchmark, and the ratio of two such sets: the figures `pagesim
bench sim` leads with and the spread it prints beside them.

On a machine shared with other work, wall time swings with the load (once, the same code
timed "1.43x faster" by wall time, 0.96x by CPU time), while the CPU time moves less: so
a speed claim is a CPU-time ratio, and wall time is shown only as the range its runs covered.
Before/after runs alternate; each back-to-back pair's ratio shows how far the machine drifted,
and the claim says "faster" or "slower" only when every pair agrees and the two sides' CPU times
do not overlap (`SpeedRatio.verdict`).
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass

from pagesim.simulator.studies.timing import TimedRun


def median(values: tuple[float, ...] | list[float]) -> float:
    """The middle value (the mean of the middle two for an even count)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("the median of no values")
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def load_average() -> float | None:
    """The machine's 1-minute load average (None where the system has none): the runs' wall
    times mean little beside a load above the CPU count."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


@dataclass(frozen=True)
class Spread:
    """Seconds of several runs, in the order they ran."""

    values_s: tuple[float, ...]

    @property
    def best_s(self) -> float:
        return min(self.values_s)

    @property
    def worst_s(self) -> float:
        return max(self.values_s)

    @property
    def median_s(self) -> float:
        return median(self.values_s)

    def range_text(self) -> str:
        """ "42.10-47.30" (lowest-highest), or one run's "42.10 (1 run)"."""
        if len(self.values_s) == 1:
            return f"{self.values_s[0]:.2f} (1 run)"
        return f"{self.best_s:.2f}-{self.worst_s:.2f}"


@dataclass(frozen=True)
class Runs:
    """One side's timed runs of a benchmark (one process each), in the order they ran."""

    runs: tuple[TimedRun, ...]

    def __post_init__(self) -> None:
        if not self.runs:
            raise ValueError("Runs needs at least one run")

    @property
    def best(self) -> TimedRun:
        """The run with the least CPU time (the one least disturbed by the machine)."""
        return min(self.runs, key=lambda r: r.cpu_s)

    @property
    def cpu(self) -> Spread:
        return Spread(tuple(r.cpu_s for r in self.runs))

    @property
    def wall(self) -> Spread:
        return Spread(tuple(r.wall_s for r in self.runs))

    @property
    def peak_rss_mib(self) -> float:
        return max(r.peak_rss_mib for r in self.runs)


class Verdict(enum.Enum):
    """What the CPU times say (`SpeedRatio.verdict`); with one pair, nothing to judge the
    noise by."""

    FASTER = "faster"
    SLOWER = "slower"
    WITHIN_NOISE = "within the noise"
    ONE_PAIR = "one pair"


@dataclass(frozen=True)
class SpeedRatio:
    """Before over after, from alternating runs: above 1, after is faster."""

    before: Runs
    after: Runs

    @property
    def cpu_ratio(self) -> float:
        """The best runs' CPU times, before / after."""
        return self.before.best.cpu_s / self.after.best.cpu_s

    @property
    def paired_cpu_ratios(self) -> list[float]:
        """Each back-to-back pair's CPU-time ratio, before / after, in run order."""
        return [b.cpu_s / a.cpu_s for b, a in zip(self.before.runs, self.after.runs, strict=True)]

    @property
    def median_paired_cpu_ratio(self) -> float:
        """The median of `paired_cpu_ratios`: a drift of the machine's speed over the sitting
        moves both runs of a pair alike."""
        return median(self.paired_cpu_ratios)

    @property
    def paired_wall_ratios(self) -> list[float]:
        return [b.wall_s / a.wall_s for b, a in zip(self.before.runs, self.after.runs, strict=True)]

    @property
    def verdict(self) -> Verdict:
        """FASTER when every pair's ratio is above 1 and every run after took less CPU time
        than every run before (the two sides' ranges apart); SLOWER likewise; else the noise
        covers the difference."""
        pairs = self.paired_cpu_ratios
        if len(pairs) < 2:
            return Verdict.ONE_PAIR
        before, after = self.before.cpu, self.after.cpu
        if all(r > 1 for r in pairs) and after.worst_s < before.best_s:
            return Verdict.FASTER
        if all(r < 1 for r in pairs) and before.worst_s < after.best_s:
            return Verdict.SLOWER
        return Verdict.WITHIN_NOISE

    @property
    def memory_ratio(self) -> float:
        """Peak RSS, after / before (the largest of each side's runs)."""
        return self.after.peak_rss_mib / self.before.peak_rss_mib


def times_text(ratio: float) -> str:
    """A before/after ratio as people say it: "2.31x faster", "1.04x slower", "1.00x"."""
    if round(ratio, 2) == 1:
        return "1.00x"
    return f"{ratio:.2f}x faster" if ratio > 1 else f"{1 / ratio:.2f}x slower"

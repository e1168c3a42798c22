"""The fitted all-reduce (latency + ring bytes / bandwidth per call, core/hardware.py) against
Vidur's measured NCCL all-reduce medians, at the message sizes the error table's steps send; a
part of `pagesim calibrate error-table` (step_errors.py)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from pagesim.calibration.roofline_fit import GpuMeasurements, nearby_allreduce_s
from pagesim.calibration.vidur_layout import VIDUR_GPUS

# The error table's grid of step sizes (step_errors.py uses them too).
DECODE_BATCHES = (1, 8, 64, 256)
PREFILLS = (128, 512, 2048, 4096)


def abs_stats(errors: list[float]) -> str:
    if not errors:
        return "–"
    a = np.abs(errors)
    return f"{100 * np.median(a):.0f}% / {100 * a.max():.0f}%"


def pct(x: float) -> str:
    return f"{100 * x:+.0f}%"


ALLREDUCE_TARGET = 0.15  # issue 13: within 15% of the measured medians


@dataclass(frozen=True)
class AllReducePoint:
    node: str
    num_workers: int
    size_bytes: int
    tokens: int
    hidden: int
    nearby_s: np.ndarray  # the measured medians near the size
    after_s: float
    before_s: float

    @property
    def measured_s(self) -> float:
        return float(np.median(self.nearby_s))

    @property
    def error(self) -> float:
        return self.after_s / self.measured_s - 1

    @property
    def is_noisy(self) -> bool:
        """More than a quarter of the nearby measurements lie outside the target around their own
        median: no single curve of the size can meet the target there."""
        off = np.abs(self.nearby_s / self.measured_s - 1) > ALLREDUCE_TARGET
        return bool(off.mean() > 0.25)


def allreduce_points(measurements: list[GpuMeasurements]) -> list[AllReducePoint]:
    """Per call, at the message sizes of the grid's steps (Llama-2-7B and -70B widths)."""
    points = []
    for data in measurements:
        node = VIDUR_GPUS[data.gpu.name].node
        if data.all_reduce is None or node is None:
            continue
        for t in (2, 4, 8):
            link = data.gpu.interconnect.at(t)
            for tokens in (*DECODE_BATCHES, *PREFILLS):
                for hidden in (4096, 8192):
                    size = tokens * hidden * 2
                    nearby = nearby_allreduce_s(data.all_reduce, t, size)
                    if not len(nearby):
                        continue
                    ring = 2 * (t - 1) / t
                    after = link.allreduce_latency_s + ring * size / link.allreduce_bw_bps
                    points.append(
                        AllReducePoint(
                            node, t, size, tokens, hidden, nearby, after, ring * size / 300e9
                        )
                    )
    return points


def allreduce_table(points: list[AllReducePoint]) -> list[str]:
    lines = [
        "| node | GPUs | message | tokens (hidden 4096 / 8192) | measured median | nearby "
        "medians, p10–p90 | after fit | error | before (300 GB/s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in points:
        p10, p90 = np.percentile(p.nearby_s, [10, 90]) * 1e6
        lines.append(
            f"| {p.node} | {p.num_workers} | {p.size_bytes / 1024:,.0f} KiB | {p.tokens} × "
            f"{p.hidden} | {1e6 * p.measured_s:.0f} µs | {p10:.0f}–{p90:.0f} µs | "
            f"{1e6 * p.after_s:.0f} µs | {pct(p.error)} | {1e6 * p.before_s:.1f} µs |"
        )
    return lines


def allreduce_summary(points: list[AllReducePoint]) -> list[str]:
    """Per node and GPU count: how many sizes meet the target, and how many of those that miss
    are sizes where the measurements themselves spread beyond it."""
    lines = [
        "| node | GPUs | sizes | within 15% | median / worst error | misses where the nearby "
        "measurements spread beyond ±15% |",
        "|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, int], list[AllReducePoint]] = defaultdict(list)
    for p in points:
        groups[(p.node, p.num_workers)].append(p)
    for (node, t), group in groups.items():
        misses = [p for p in group if abs(p.error) > ALLREDUCE_TARGET]
        lines.append(
            f"| {node} | {t} | {len(group)} | "
            f"{len(group) - len(misses)} | {abs_stats([p.error for p in group])} | "
            f"{sum(p.is_noisy for p in misses)} of {len(misses)} |"
        )
    return lines

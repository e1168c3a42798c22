"""The all-reduce part of `pagesim calibrate fit-roofline`: per node and GPU count, the measured
medians at half-octave knots (8 KiB to 4 MiB, made non-decreasing in size) and `latency + ring
bytes / bus bw` fitted to the larger messages; over all counts, one curve over every size (for
counts nobody measured).

*The measured median at a size* is defined once, here, and used by the fit, the knots and the
error table alike: the median of the file's single-node medians within a factor 1.5 of the size
(narrowed to stay symmetric where the file ends, so that the last sizes are not biased towards
smaller ones), or of the 5 nearest where fewer than 3 lie so close.
"""

from __future__ import annotations

import math

import numpy as np

from pagesim.calibration.minimize import nelder_mead
from pagesim.calibration.vidur_csv import CollectiveTable
from pagesim.simulator.core.hardware import ALLREDUCE_KNOT_BYTES, Interconnect

ALLREDUCE_SIZES = (
    8 * 1024,
    64 * 1024 * 1024,
)  # bytes: 1 token of a 4096-wide model .. 4096 of 8192
NEARBY = 1.5  # the neighbourhood of a size: within this factor


def nearby_allreduce_s(table: CollectiveTable, num_workers: int, size_bytes: float) -> np.ndarray:
    """The measured medians (seconds) near `size_bytes` (module docstring); the files are noisy
    at small sizes, so a neighbourhood, not one row."""
    sizes, times = table.single_node(num_workers)
    if not len(sizes):
        return np.empty(0)
    # Symmetric in log size: a window that runs past the file's last size on one side is cut to
    # the same width on the other (at 64 MiB, the file's end, only the nearest rows remain).
    width = min(NEARBY, float(sizes.max()) / size_bytes, size_bytes / float(sizes.min()))
    near = np.flatnonzero((sizes >= size_bytes / width) & (sizes <= size_bytes * width))
    if len(near) < 3:
        near = np.argsort(np.abs(np.log(sizes / size_bytes)), kind="stable")[:5]
    return np.asarray(times[near], dtype=float)


def measured_allreduce_s(table: CollectiveTable, num_workers: int, size_bytes: float) -> float:
    """The measured median at `size_bytes`: the median of the nearby medians."""
    near = nearby_allreduce_s(table, num_workers, size_bytes)
    return float(np.median(near)) if len(near) else math.nan


def allreduce_bins(
    table: CollectiveTable, low: float = ALLREDUCE_SIZES[0]
) -> list[tuple[int, float, float]]:
    """(workers, median size, median time) of half-octave size bins from `low` to 64 MiB."""
    found = []
    hi = ALLREDUCE_SIZES[1]
    edges = 2.0 ** np.arange(math.log2(low), math.log2(hi) + 0.51, 0.5)
    for workers in sorted(set(table.num_workers.tolist())):
        sizes, times = table.single_node(workers)
        if not len(sizes):
            continue
        bins = np.digitize(sizes, edges)
        for b in range(1, len(edges)):
            inside = bins == b
            if inside.any():
                found.append(
                    (workers, float(np.median(sizes[inside])), float(np.median(times[inside])))
                )
    return found


def fit_link(bins: list[tuple[int, float, float]]) -> tuple[float, float]:
    """(latency s, bus bandwidth B/s) minimising the squared log error over `bins`."""
    workers = np.array([b[0] for b in bins])
    sizes = np.array([b[1] for b in bins])
    times = np.array([b[2] for b in bins])
    ring = 2 * (workers - 1) / workers

    def objective(x: np.ndarray) -> float:
        predicted = math.exp(x[0]) * 1e-6 + ring * sizes / (math.exp(x[1]) * 1e9)
        return float(np.mean(np.log(predicted / times) ** 2))

    best, _ = nelder_mead(objective, np.array([math.log(30.0), math.log(150.0)]))
    return math.exp(best[0]) * 1e-6, math.exp(best[1]) * 1e9


def non_decreasing(values: list[float]) -> list[float]:
    """The least-squares non-decreasing fit to `values` (pool adjacent violators): each run that
    falls is replaced by its mean."""
    blocks: list[list[float]] = []  # [mean, count]
    for v in values:
        blocks.append([v, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m2, n2), (m1, n1) = blocks.pop(), blocks.pop()
            blocks.append([(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2])
    return [m for m, n in blocks for _ in range(int(n))]


def knots_s(table: CollectiveTable, num_workers: int) -> tuple[float, ...]:
    """The measured medians at ALLREDUCE_KNOT_BYTES (seconds), made non-decreasing in size by
    `non_decreasing` on their logarithms (least squares in log time, as the other fits here):
    the files' medians fall with size in places (runs of rows at one speed, then another:
    allreduce_errors.py), and a simulator whose larger message cost less than a smaller one
    would price more work below less."""
    medians = [measured_allreduce_s(table, num_workers, s) for s in ALLREDUCE_KNOT_BYTES]
    return tuple(math.exp(v) for v in non_decreasing([math.log(m) for m in medians]))


def fit_interconnect(table: CollectiveTable, name: str, source: str) -> Interconnect:
    """Per GPU count measured: the knots, and (latency, bandwidth) over the messages above the
    last knot; over all counts and sizes, one (latency, bandwidth) (the default)."""
    bins = allreduce_bins(table)
    latency, bandwidth = fit_link(bins)
    counts = sorted({b[0] for b in bins})
    large = allreduce_bins(table, low=ALLREDUCE_KNOT_BYTES[-1])
    by_workers = tuple((n, *fit_link([b for b in large if b[0] == n])) for n in counts)
    small = tuple((n, knots_s(table, n)) for n in counts)
    return Interconnect(name, latency, bandwidth, source, True, by_workers, small)

"""The all-reduce part of `pagesim calibrate fit-roofline`: per node and GPU count, the measured
medians at half-octave knots (8 KiB to 4 MiB, as measured: they fall with size where NCCL's
measured regimes do) and `latency + ring bytes / bus bw` fitted to the larger messages; over all
counts, one curve over every size (for counts nobody measured).

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


def knots_s(table: CollectiveTable, num_workers: int) -> tuple[float, ...]:
    """The measured medians at ALLREDUCE_KNOT_BYTES (seconds), as measured: **not** made
    non-decreasing in size. Vidur's files show size regimes, not noise. On 4 A100s
    (network/a100_dgx/all_reduce.csv) the medians are ~21 us up to 98 KiB (10 of 13 rows at
    <= 26 us), 60-64 us at each of the 26 rows from 106 to 306 KiB (23 with a minimum >= 56 us),
    and ~23 us again at 338-546 KiB (26 of 27 rows with a minimum of 20-23 us): runs of
    neighbouring sizes at one speed, then another, as NCCL's per-size choice of algorithm and
    protocol behaves. A larger message may therefore cost less, and the simulator prices it so
    (tests/simulator/execution/test_allreduce.py works this example); above the last knot the
    fitted curve is non-decreasing."""
    return tuple(measured_allreduce_s(table, num_workers, s) for s in ALLREDUCE_KNOT_BYTES)


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

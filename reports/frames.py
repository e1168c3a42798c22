"""Display arithmetic on RunResult frames: time buckets, CDFs, batch-slot lanes, file-safe names.

Nothing here re-simulates: it averages, sorts and samples recorded numbers so that a plot of a
10^6-row steps frame stays fast and a page stays readable.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

MAX_BUCKETS = 400  # time buckets per plotted series: about one per horizontal pixel pair
MAX_CDF_POINTS = 1000


def numeric(frame: pd.DataFrame, column: str) -> np.ndarray:
    """A column as float64 [rows]: text or empty cells (a frame read back from CSV) become NaN,
    and a missing column is all NaN."""
    if column not in frame:
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)


def bucket_edges(steps: pd.DataFrame, max_buckets: int = MAX_BUCKETS) -> np.ndarray:
    """Edges [num_buckets + 1] (s) spanning the steps; one bucket per step when there are few.

    Empty frame: an empty array.
    """
    if steps.empty:
        return np.empty(0)
    start = numeric(steps, "start_s")
    end = start + np.nan_to_num(numeric(steps, "duration_s"))
    t0, t1 = float(np.nanmin(start)), float(np.nanmax(end))
    if len(steps) <= max_buckets:
        edges = np.append(np.sort(start), t1)
        return np.maximum.accumulate(edges)
    if t1 <= t0:
        t1 = t0 + 1e-9
    return np.linspace(t0, t1, max_buckets + 1)


def _integral_at(a: np.ndarray, b: np.ndarray, v: np.ndarray, x: np.ndarray) -> np.ndarray:
    """∫ f up to each x, where f = v[i] on [a[i], b[i]) (sorted, disjoint) and 0 elsewhere."""
    if len(a) == 0:
        return np.zeros_like(x)
    cum = np.cumsum(v * (b - a))
    xp = np.empty(2 * len(a))
    fp = np.empty(2 * len(a))
    xp[0::2], xp[1::2] = a, b
    fp[0::2], fp[1::2] = cum - v * (b - a), cum
    xp = np.maximum.accumulate(xp)  # guards against float noise where steps touch
    steps: np.ndarray = np.interp(x, xp, fp, left=0.0, right=float(cum[-1]))
    return steps


def _sorted_steps(steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(order, start [n], duration [n]) with steps sorted by start."""
    start = numeric(steps, "start_s")
    order = np.argsort(start, kind="stable")
    return order, start[order], np.nan_to_num(numeric(steps, "duration_s")[order])


def _per_replica(steps: pd.DataFrame, columns: Sequence[str]) -> list[pd.DataFrame]:
    """Each replica's steps (a fleet's replicas step side by side, each on its own timeline,
    which the bucket arithmetic below needs disjoint); the frame itself for one replica. Only
    the step times and `columns` are split (a fleet's step table has dozens of others)."""
    if "replica" not in steps or steps.empty or steps["replica"].nunique() <= 1:
        return [steps]
    wanted = [
        c for c in dict.fromkeys(["replica", "start_s", "duration_s", *columns]) if c in steps
    ]
    return [rows for _, rows in steps[wanted].groupby("replica", sort=True)]


def state_means(
    steps: pd.DataFrame, columns: Sequence[str], edges: np.ndarray
) -> dict[str, np.ndarray]:
    """Time-weighted mean of state columns (KV slots, queue lengths) in each bucket; a fleet's
    replicas' means added up (its KV slots are theirs together).

    A step's recorded state holds from its start to the next step's start (the last one for its
    own duration). Buckets no step covers are NaN; in a fleet, a replica with no step in a bucket
    adds nothing to it.
    """
    parts = [_state_means(rows, columns, edges) for rows in _per_replica(steps, columns)]
    if len(parts) == 1:
        return parts[0]
    out = {}
    for c in columns:
        stack = np.vstack([part[c] for part in parts])
        covered = np.isfinite(stack).any(axis=0)
        out[c] = np.where(covered, np.nansum(stack, axis=0), np.nan)
    return out


def _state_means(
    steps: pd.DataFrame, columns: Sequence[str], edges: np.ndarray
) -> dict[str, np.ndarray]:
    if steps.empty or len(edges) < 2:
        return {c: np.empty(0) for c in columns}
    order, a, duration = _sorted_steps(steps)
    b = np.append(a[1:], a[-1] + duration[-1])
    covered = np.diff(_integral_at(a, b, np.ones_like(a), edges))
    out = {}
    with np.errstate(invalid="ignore", divide="ignore"):
        for c in columns:
            v = np.nan_to_num(numeric(steps, c)[order])
            out[c] = np.where(covered > 0, np.diff(_integral_at(a, b, v, edges)) / covered, np.nan)
    return out


def activity_means(
    steps: pd.DataFrame, columns: Sequence[str], edges: np.ndarray
) -> dict[str, np.ndarray]:
    """Time-weighted mean of per-step rates (utilizations) in each bucket; idle time counts as 0.
    A fleet's is the mean over its replicas (four replicas each 50% busy are 50% busy, not 200%).
    """
    parts = [_activity_means(rows, columns, edges) for rows in _per_replica(steps, columns)]
    if len(parts) == 1:
        return parts[0]
    return {c: np.mean(np.vstack([part[c] for part in parts]), axis=0) for c in columns}


def _activity_means(
    steps: pd.DataFrame, columns: Sequence[str], edges: np.ndarray
) -> dict[str, np.ndarray]:
    if steps.empty or len(edges) < 2:
        return {c: np.empty(0) for c in columns}
    order, a, duration = _sorted_steps(steps)
    b = a + duration
    width = np.diff(edges)
    out = {}
    with np.errstate(invalid="ignore", divide="ignore"):
        for c in columns:
            v = np.nan_to_num(numeric(steps, c)[order])
            out[c] = np.where(width > 0, np.diff(_integral_at(a, b, v, edges)) / width, np.nan)
    return out


def cumulative_counts(
    steps: pd.DataFrame, columns: Sequence[str], edges: np.ndarray
) -> dict[str, np.ndarray]:
    """Per-step counts summed over the steps that started at or before each edge [len(edges)].

    A missing column counts as zero.
    """
    start = numeric(steps, "start_s")
    order = np.argsort(start, kind="stable")
    index = np.searchsorted(start[order], edges, side="right")
    out = {}
    for c in columns:
        counts = np.nan_to_num(numeric(steps, c)[order])
        out[c] = np.concatenate([[0.0], np.cumsum(counts)])[index]
    return out


def cdf_points(values: np.ndarray, max_points: int = MAX_CDF_POINTS) -> tuple[np.ndarray, ...]:
    """(x, F(x)) of the empirical CDF of the finite values, at most `max_points` points."""
    x = np.asarray(values, dtype=float).ravel()
    x = np.sort(x[np.isfinite(x)])
    if len(x) == 0:
        return np.empty(0), np.empty(0)
    if len(x) <= max_points:
        return x, np.arange(1, len(x) + 1) / len(x)
    q = np.linspace(0.0, 1.0, max_points)
    return np.quantile(x, q), q


def assign_lanes(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Batch-slot lane of each interval: the lowest lane free at its start (interval coloring).

    Returns int lanes [n] in the input order; a lane freed at t can be reused by a start at t.
    """
    lanes = np.zeros(len(start), dtype=int)
    busy: list[tuple[float, int]] = []  # (end, lane)
    free: list[int] = []
    num_lanes = 0
    for i in np.argsort(start, kind="stable"):
        while busy and busy[0][0] <= start[i]:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lane = heapq.heappop(free)
        else:
            lane, num_lanes = num_lanes, num_lanes + 1
        lanes[i] = lane
        heapq.heappush(busy, (float(end[i]), lane))
    return lanes


def finished(requests: pd.DataFrame) -> pd.DataFrame:
    """Finished requests, after warm-up when the frame says which ones are in the window."""
    if requests.empty or "status" not in requests:
        return requests.iloc[0:0]
    mask = requests["status"].astype(str) == "finished"
    if "in_window" in requests:
        mask &= requests["in_window"].eq(True)
    return requests[mask]


def as_number(value: object) -> float | None:
    """`value` as a float when it is a finite int or float (not a bool), else None."""
    if isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool):
        number = float(value)
        return number if math.isfinite(number) else None
    return None


_UNSAFE = re.compile(r"[^a-z0-9._-]+")


def slugify(name: str, max_len: int = 60) -> str:
    """A file-system-safe folder name for a system name (lowercase ASCII, dashes)."""
    slug = _UNSAFE.sub("-", name.lower()).strip("-.")[:max_len].strip("-.")
    return slug or "system"


def unique_slugs(names: Sequence[str], reserved: Iterable[str] = ()) -> list[str]:
    """Slugs for `names`, distinct from each other and from `reserved` (suffix -2, -3, …)."""
    taken = set(reserved)
    slugs = []
    for name in names:
        base = slugify(name)
        slug, n = base, 1
        while slug in taken:
            n += 1
            slug = f"{base}-{n}"
        taken.add(slug)
        slugs.append(slug)
    return slugs

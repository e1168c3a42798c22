"""Parallel, resumable sweeps: many (scenario, system) points on a process pool or a Ray cluster.

A sweep plans its points (`plan_sweep`: `points.make_points` over `expand_sweep`'s variants),
takes every point it can from the cache (`point_cache`), has an executor (`executors`) simulate
the rest, caching each as it arrives, and merges the summaries into one table. Points with the
same key (see `points`) are simulated once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from pagesim.simulator.core.config import Scenario
from pagesim.simulator.core.errors import InputError, PagesimError
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.scenario.load import expand_sweep
from pagesim.simulator.studies.executors import PointExecutor, SweepError
from pagesim.simulator.studies.point_cache import CACHE_DIR, PointCache
from pagesim.simulator.studies.points import (
    Evaluate,
    Point,
    PointOutcome,
    PointTask,
    evaluate_point,
    make_points,
)

# --- running many points -------------------------------------------------------------------


@dataclass(frozen=True)
class PointRecord:
    point: Point
    summary: dict[str, Any]
    is_cached: bool
    wall_s: float


@dataclass
class PointsRun:
    records: list[PointRecord]  # in the order of the points given
    frames: dict[str, RunResult] = field(default_factory=dict)  # key -> frames asked for
    num_cached: int = 0
    num_computed: int = 0
    wall_s: float = 0.0

    def table(self) -> pd.DataFrame:
        """One row per point: axis values, system, summary keys (and the extra metrics)."""
        rows = [r.point.axes | {"system": r.point.system.name} | r.summary for r in self.records]
        return pd.DataFrame(rows)


def run_points(
    points: Sequence[Point],
    executor: PointExecutor,
    *,
    cache: PointCache | None = None,
    use_cache: bool = True,
    frames_for: Sequence[str] = (),
    on_record: Callable[[PointRecord], None] | None = None,
    evaluate: Evaluate = evaluate_point,
) -> PointsRun:
    """Every point's summary, from the cache when it has one, else simulated by `executor`
    (and then cached at once). Points with the same key are simulated once. `frames_for` names
    keys whose per-request and per-step frames are needed too. `on_record` sees each record as
    it arrives (cached ones first), e.g. for a progress bar; an exception it raises stops the run
    with everything finished so far cached. Failed points are all reported at the end: an
    InputError when each failure was the input's, a SweepError otherwise."""
    start = time.perf_counter()
    want_frames = set(frames_for)
    by_key: dict[str, list[Point]] = {}
    for point in points:
        by_key.setdefault(point.key, []).append(point)
    found: dict[str, PointRecord] = {}
    frames: dict[str, RunResult] = {}
    tasks: list[PointTask] = []
    for key, same in by_key.items():
        summary = cache.summary(key) if cache is not None and use_cache else None
        framed = None
        if cache is not None and summary is not None and key in want_frames:
            framed = cache.frames(key)
        if summary is None or (key in want_frames and framed is None):
            tasks.append(PointTask(key, same[0].scenario, same[0].system, key in want_frames))
            continue
        if framed is not None:
            frames[key] = framed
        found[key] = PointRecord(same[0], summary, is_cached=True, wall_s=0.0)
        if on_record is not None:
            for point in same:
                on_record(replace(found[key], point=point))
    failures: list[tuple[Point, PointOutcome]] = []
    outcomes = executor.run(tasks, evaluate) if tasks else iter(())
    try:
        for outcome in outcomes:
            same = by_key[outcome.key]
            if outcome.summary is None:
                failures.append((same[0], outcome))
                continue
            if cache is not None:
                cache.put(same[0], outcome)
            if outcome.result is not None:
                frames[outcome.key] = outcome.result
            found[outcome.key] = PointRecord(same[0], outcome.summary, False, outcome.wall_s)
            if on_record is not None:
                for point in same:
                    on_record(replace(found[outcome.key], point=point))
    finally:
        close = getattr(outcomes, "close", None)
        if close is not None:
            close()
    if failures:
        raise _failure(failures, len(found), cache)
    records = [replace(found[p.key], point=p) for p in points]
    num_computed = len(tasks)
    return PointsRun(
        records, frames, len(by_key) - num_computed, num_computed, time.perf_counter() - start
    )


def _failure(
    failures: list[tuple[Point, PointOutcome]], num_done: int, cache: PointCache | None
) -> PagesimError:
    lines = [f"{point.label}: {outcome.error}" for point, outcome in failures[:5]]
    more = f" (and {len(failures) - 5} more)" if len(failures) > 5 else ""
    kept = f"; the {num_done} finished points are cached in {cache.folder}" if cache else ""
    text = f"{len(failures)} sweep point(s) failed{more}{kept}: " + " | ".join(
        line.replace("\n", " ") for line in lines
    )
    if all(outcome.is_input_error for _, outcome in failures):
        return InputError(text)
    return SweepError(text)


# --- a whole sweep -------------------------------------------------------------------------


@dataclass
class SweepRun:
    """A finished sweep: the merged table, and the frames of the point asked for in detail."""

    table: pd.DataFrame
    detail_results: list[RunResult]  # every system at the detail point; none unless asked
    detail_scenario: Scenario  # the detail point's scenario (the last point's without one)
    first_scenario: Scenario
    points: PointsRun
    detail_axes: dict[str, object] = field(default_factory=dict)  # the detail point's values

    @property
    def detail_label(self) -> str | None:
        """'path = value, ...' of the detail point, or None without one."""
        if not self.detail_results:
            return None
        return ", ".join(f"{k} = {v}" for k, v in self.detail_axes.items()) or "the point"


def select_detail(points: Sequence[Point], text: str | None) -> list[Point]:
    """The points (one per system) of the variant `text` names: `first`, `last`, or
    `path=value[,path=value]` matching its axis values; none for None. InputError listing the
    points there are when nothing matches."""
    if text is None:
        return []
    variants = list(dict.fromkeys(id(p.scenario) for p in points))
    if text in ("first", "last"):
        chosen = variants[0 if text == "first" else -1]
        return [p for p in points if id(p.scenario) == chosen]
    wanted: dict[str, str] = {}
    for part in text.split(","):
        path, sep, value = part.partition("=")
        if not sep or not path.strip():
            raise InputError(f"--detail {text!r}: expected first, last or path=value[,path=value]")
        wanted[path.strip()] = value.strip()
    found = [p for p in points if _matches(p.axes, wanted)]
    if not found:
        there = "; ".join(
            dict.fromkeys(", ".join(f"{k}={v}" for k, v in p.axes.items()) for p in points)
        )
        raise InputError(f"--detail {text!r}: no such point; the points: {there}")
    chosen = id(found[0].scenario)
    return [p for p in points if id(p.scenario) == chosen]


def _matches(axes: dict[str, object], wanted: dict[str, str]) -> bool:
    for path, value in wanted.items():
        if path not in axes:
            return False
        have = axes[path]
        try:
            if float(value) != float(have):  # type: ignore[arg-type]
                return False
        except (TypeError, ValueError):
            if str(have) != value.strip("'\""):
                return False
    return True


def plan_sweep(
    scenario: str | Path, overrides: Sequence[str] = (), params: Sequence[str] = ()
) -> list[Point]:
    """The points of a sweep (see `expand_sweep`: the file's [sweep] unless `params` are given)."""
    return make_points(expand_sweep(scenario, overrides, params=params))


def run_sweep(
    points: Sequence[Point],
    out: Path,
    executor: PointExecutor,
    *,
    use_cache: bool = True,
    on_record: Callable[[PointRecord], None] | None = None,
    evaluate: Evaluate = evaluate_point,
    detail: Sequence[Point] = (),
) -> SweepRun:
    """Run `points` (from `plan_sweep`), cached under `out/cache`; the `detail` points (from
    `select_detail`) keep their frames for the report's per-system plots."""
    detail_keys = [p.key for p in detail]
    cache = PointCache(Path(out) / CACHE_DIR)
    cache.prepare()  # a cache that cannot be written fails here, before anything is simulated
    run = run_points(
        points,
        executor,
        cache=cache,
        use_cache=use_cache,
        frames_for=detail_keys,
        on_record=on_record,
        evaluate=evaluate,
    )
    results = [run.frames[key] for key in detail_keys]
    shown = detail[0] if detail else points[-1]
    return SweepRun(run.table(), results, shown.scenario, points[0].scenario, run, shown.axes)

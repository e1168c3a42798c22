"""Parallel, resumable sweeps: many (scenario, system) points on a process pool or a Ray cluster.

A *point* is one `simulate(scenario, system)` call on a fully resolved scenario. Its cache key is
the SHA-256 of what decides its result and nothing else:

    describe_scenario(scenario with only this system, no [sweep], no source path)
    + the pagesim version + the bytes of every file the scenario reads (trace, profile, CSVs)
    + the bytes of the simulator's own source (simulator/*.py)

so renaming the scenario file or adding a value to a sweep axis keeps every cached point, while
changing any resolved value (a default, a preset, a trace row) makes a new one, and so does
changing the simulator's code without bumping the version (a stale result is worse than a rerun).
The cache is a folder of small JSON files, `<key>.json` (the summary and a few extra metrics), plus
`<key>/requests.csv, steps.csv, summary.json` for the few points whose frames a report draws.
Files are written whole and renamed into place, so a sweep killed at any instant leaves only
complete entries, and a rerun simulates just the points without one.

Only the driver touches the cache; workers receive a point and return its outcome (errors
included, as text: a worker never raises), so a remote Ray cluster needs no shared disk, only
the same pagesim install and the scenario's input files at the same paths. Every simulation
seeds its own RNG from the scenario, so which worker runs a point, and in what order, does not
change its result.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from pagesim import __version__
from pagesim.simulator.core.config import Scenario, SystemConfig
from pagesim.simulator.core.errors import InputError, PagesimError, choices_text
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.scenario.load import describe_scenario, expand_sweep

CACHE_DIR = "cache"  # under a sweep's --out folder


class ExecutorKind(Enum):
    LOCAL = "local"  # a process pool on this machine (in-process with one job)
    RAY = "ray"  # tasks on a Ray cluster: a local one started here, or --address


class SweepError(PagesimError):
    """A sweep could not finish: a worker died or a point failed for a reason not the input's."""


# --- points and their keys -----------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    """One simulation of a sweep: `system` of the resolved `scenario`, at axis values `axes`."""

    axes: dict[str, object]
    scenario: Scenario
    system: SystemConfig
    key: str

    @property
    def label(self) -> str:
        where = ", ".join(f"{k}={v}" for k, v in self.axes.items())
        return f"{self.system.name}" + (f" at {where}" if where else "")


def _input_files(scenario: Scenario) -> list[Path]:
    w = scenario.workload
    paths = [w.trace_path, w.prompt.path, w.output.path, scenario.execution.profile_path]
    return sorted({Path(p) for p in paths if p is not None})


@functools.lru_cache(maxsize=64)
def _file_digest(path: str, _mtime_ns: int, _size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


SIMULATOR_ROOT = Path(__file__).resolve().parents[1]  # the pagesim.simulator package


@functools.lru_cache(maxsize=1)
def _code_digest() -> str:
    """Every source file of the simulator package, subpackages included, with its path."""
    digest = hashlib.sha256()
    for path in sorted(SIMULATOR_ROOT.rglob("*.py")):
        name = path.relative_to(SIMULATOR_ROOT).as_posix()
        digest.update(name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def point_key(scenario: Scenario, system: SystemConfig) -> str:
    """SHA-256 (hex) of the resolved point: see the module docstring for what it covers."""
    alone = replace(scenario, systems=(system,), sweep=(), source=None)
    digest = hashlib.sha256(f"pagesim {__version__} {_code_digest()}\n".encode())
    digest.update(describe_scenario(alone).encode())
    for path in _input_files(scenario):
        try:
            stat = path.stat()
            digest.update(
                f"{path}:{_file_digest(str(path), stat.st_mtime_ns, stat.st_size)}".encode()
            )
        except OSError:
            digest.update(f"{path}:missing".encode())  # simulate() will say what is wrong
    return digest.hexdigest()


def make_points(variants: Sequence[tuple[dict[str, object], Scenario]]) -> list[Point]:
    """Every (variant, system) pair of `expand_sweep`'s output, in order."""
    return [
        Point(axes, variant, system, point_key(variant, system))
        for axes, variant in variants
        for system in variant.systems
    ]


# --- one point, in a worker ----------------------------------------------------------------


@dataclass(frozen=True)
class PointTask:
    key: str
    scenario: Scenario
    system: SystemConfig
    keep_frames: bool = False


@dataclass(frozen=True)
class PointOutcome:
    """What a worker sends back. `error` is set instead of `summary` when the point failed."""

    key: str
    summary: dict[str, Any] | None = None
    result: RunResult | None = None  # the frames, when the task asked for them
    error: str | None = None
    is_input_error: bool = False
    wall_s: float = 0.0


def extra_metrics(result: RunResult) -> dict[str, float | int]:
    """Per-point figures the summary lacks, used by the capacity search
    (simulator.studies.capacity_search).

    slo_share: in-window requests that finished meeting the SLO / in-window requests offered
    (rejected and unfinished ones count as misses). queue_delay_p99_s: 99th percentile of the
    wait from arrival to first admission over in-window requests; one never admitted waits
    forever (inf). num_gpus: tensor-parallel GPUs of the replica.
    """
    window = result.requests[result.requests["in_window"].astype(bool)]
    offered = len(window)
    met = int(window["meets_slo"].astype(bool).sum())
    waits = (window["admitted_s"] - window["arrival_s"]).to_numpy(dtype=float)
    waits = np.where(np.isnan(waits), math.inf, waits)
    p99 = float(np.percentile(waits, 99, method="higher")) if offered else 0.0
    return {
        "slo_share": met / offered if offered else 0.0,
        "queue_delay_p99_s": p99,
        "num_gpus": int(result.provenance.get("tensor_parallel", 1)),  # type: ignore[call-overload]
    }


def evaluate_point(task: PointTask) -> PointOutcome:
    """Simulate one point; never raises (errors come back as text, picklable everywhere)."""
    from pagesim.simulator.engine import simulate

    start = time.perf_counter()
    try:
        result = simulate(task.scenario, task.system)
        summary = dict(result.summary) | extra_metrics(result)
    except InputError as exc:
        return PointOutcome(task.key, error=str(exc), is_input_error=True)
    except Exception as exc:  # a bug: keep the traceback's text for the report
        tail = "".join(traceback.format_exception(exc)[-3:]).strip()
        return PointOutcome(task.key, error=f"{type(exc).__name__}: {exc}\n{tail}")
    wall_s = time.perf_counter() - start
    return PointOutcome(task.key, summary, result if task.keep_frames else None, wall_s=wall_s)


Evaluate = Callable[[PointTask], PointOutcome]


# --- executors -----------------------------------------------------------------------------


class PointExecutor(Protocol):
    def run(self, tasks: Sequence[PointTask], evaluate: Evaluate) -> Iterator[PointOutcome]:
        """Outcomes in completion order; raises SweepError when a worker dies."""
        ...

    def close(self) -> None: ...


class SerialExecutor:
    """In this process, one point after another (`--jobs 1`)."""

    def run(self, tasks: Sequence[PointTask], evaluate: Evaluate) -> Iterator[PointOutcome]:
        for task in tasks:
            yield evaluate(task)

    def close(self) -> None:
        pass


class ProcessExecutor:
    """A pool of `jobs` worker processes, forked from a clean fork server (not from a driver that
    may hold threads), kept for the executor's life so a search's rounds reuse warm workers."""

    def __init__(self, jobs: int) -> None:
        import multiprocessing

        if "forkserver" in multiprocessing.get_all_start_methods():
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(
                ["pagesim.simulator.studies.sweep", "pagesim.simulator.engine"]
            )
            _start_fork_server()
        else:  # Windows
            context = multiprocessing.get_context("spawn")
        self._pool = ProcessPoolExecutor(max_workers=jobs, mp_context=context)

    def run(self, tasks: Sequence[PointTask], evaluate: Evaluate) -> Iterator[PointOutcome]:
        futures: dict[Future[PointOutcome], PointTask] = {
            self._pool.submit(evaluate, task): task for task in tasks
        }
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    try:
                        yield future.result()
                    except BrokenProcessPool:
                        raise SweepError(
                            "a worker process died (killed, out of memory or crashed) while "
                            f"simulating one of {len(done) + len(pending)} unfinished points"
                        ) from None
        finally:
            for future in pending:
                future.cancel()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _start_fork_server() -> None:
    """Start the fork server with a safe sys.path, if it is not running yet.

    The server is `python -c ...`, which puts the current folder first on sys.path, and it imports
    the preloaded modules before it learns the driver's path: started from the folder holding a
    clone named `pagesim` (a namespace package there) or from a folder with its own `pagesim/`,
    it would import that in place of the installed package, and every worker would inherit it.
    PYTHONSAFEPATH (Python 3.11's -P), in the environment the server inherits, leaves the folder
    out; workers then take the driver's sys.path as usual.
    """
    from multiprocessing import forkserver

    saved = os.environ.get("PYTHONSAFEPATH")
    os.environ["PYTHONSAFEPATH"] = "1"
    try:
        forkserver.ensure_running()
    finally:
        if saved is None:
            del os.environ["PYTHONSAFEPATH"]
        else:
            os.environ["PYTHONSAFEPATH"] = saved


class RayExecutor:
    """Ray tasks: on the cluster at `address`, or on a local Ray started here with `jobs` CPUs
    (and shut down by `close`). Each task is tried once: a crash is reported, not retried."""

    def __init__(self, jobs: int | None, address: str | None) -> None:
        try:
            import ray
        except ImportError:
            raise InputError(
                "--executor ray: the ray package is not installed; "
                "pip install 'pagesim[ray]' (or pip install ray)"
            ) from None
        self._ray = ray
        self._owns = not ray.is_initialized()
        if self._owns:
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address is None:
                kwargs["num_cpus"] = jobs or os.cpu_count() or 1
            try:
                ray.init(address=address, **kwargs)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                raise InputError(
                    f"--address {address!r}: cannot join a Ray cluster: {exc}"
                ) from None
        self._pending: list[Any] = []

    def run(self, tasks: Sequence[PointTask], evaluate: Evaluate) -> Iterator[PointOutcome]:
        ray = self._ray
        remote = ray.remote(max_retries=0, num_cpus=1)(evaluate)
        refs = {remote.remote(task): task for task in tasks}
        self._pending = list(refs)
        while self._pending:
            done, self._pending = ray.wait(self._pending, num_returns=1)
            for ref in done:
                try:
                    yield ray.get(ref)
                except ray.exceptions.RayError as exc:
                    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc)
                    raise SweepError(
                        f"a Ray worker failed while simulating {refs[ref].system.name!r} "
                        f"(key {refs[ref].key[:12]}): {first}"
                    ) from None

    def close(self) -> None:
        for ref in self._pending:
            self._ray.cancel(ref, force=True)
        self._pending = []
        if self._owns:
            self._ray.shutdown()


def make_executor(
    kind: str | ExecutorKind = ExecutorKind.LOCAL,
    jobs: int | None = None,
    address: str | None = None,
) -> PointExecutor:
    """`--executor`, `--jobs` and `--address` as an executor; InputError on bad values."""
    if isinstance(kind, str):
        try:
            kind = ExecutorKind(kind)
        except ValueError:
            valid = choices_text(k.value for k in ExecutorKind)
            raise InputError(f"--executor: unknown executor {kind!r}; valid: {valid}") from None
    if jobs is not None and jobs < 1:
        raise InputError(f"--jobs: must be at least 1, got {jobs}")
    if address is not None and kind is not ExecutorKind.RAY:
        raise InputError("--address: only with --executor ray")
    if kind is ExecutorKind.RAY:
        return RayExecutor(jobs, address)
    jobs = jobs or os.cpu_count() or 1
    return SerialExecutor() if jobs == 1 else ProcessExecutor(jobs)


# --- the cache -----------------------------------------------------------------------------


class PointCache:
    """`<folder>/<key>.json` per point (and `<key>/` frames for some); see the module docstring."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def summary(self, key: str) -> dict[str, Any] | None:
        try:
            payload = json.loads((self.folder / f"{key}.json").read_text())
        except (OSError, ValueError):
            return None  # absent, or torn by something other than us: simulate it again
        summary = payload.get("summary") if isinstance(payload, dict) else None
        return summary if isinstance(summary, dict) else None

    def frames(self, key: str) -> RunResult | None:
        try:
            return RunResult.read(self.folder / key)
        except (OSError, ValueError, KeyError):
            return None

    def put(self, point: Point, outcome: PointOutcome) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        if outcome.result is not None:
            staging = Path(tempfile.mkdtemp(dir=self.folder, prefix=".frames-"))
            outcome.result.write(staging)
            shutil.rmtree(self.folder / point.key, ignore_errors=True)
            os.replace(staging, self.folder / point.key)
        payload = {
            "key": point.key,
            "pagesim_version": __version__,
            "scenario": point.scenario.name,
            "system": point.system.name,
            "axes": point.axes,
            "wall_s": outcome.wall_s,
            "summary": outcome.summary,
        }
        text = json.dumps(payload, indent=1, default=str) + "\n"
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".point-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, self.folder / f"{point.key}.json")


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
        framed = cache.frames(key) if summary is not None and key in want_frames else None
        if summary is None or (key in want_frames and framed is None):
            tasks.append(PointTask(key, same[0].scenario, same[0].system, key in want_frames))
            continue
        if framed is not None:
            frames[key] = framed
        found[key] = PointRecord(same[0], summary, is_cached=True, wall_s=0.0)
        for point in same if on_record is not None else ():
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
            for point in same if on_record is not None else ():
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
    """A finished sweep: the merged table, and the frames of its last point for the report."""

    table: pd.DataFrame
    last_results: list[RunResult]
    last_scenario: Scenario
    first_scenario: Scenario
    points: PointsRun


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
) -> SweepRun:
    """Run `points` (from `plan_sweep`), cached under `out/cache`; the last variant's points keep
    their frames for the report's per-system plots."""
    last = points[-1].scenario
    last_keys = [p.key for p in points if p.scenario is last]
    run = run_points(
        points,
        executor,
        cache=PointCache(Path(out) / CACHE_DIR),
        use_cache=use_cache,
        frames_for=last_keys,
        on_record=on_record,
        evaluate=evaluate,
    )
    results = [run.frames[key] for key in last_keys]
    return SweepRun(run.table(), results, last, points[0].scenario, run)

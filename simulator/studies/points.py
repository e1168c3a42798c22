"""Sweep points: one `simulate(scenario, system)` call each, its cache key, and its evaluation.

A point's cache key is the SHA-256 of what decides its result and nothing else:

    describe_scenario(scenario with only this system, no [sweep], no source path, no [report])
    + the pagesim version + the bytes of every file the scenario reads (trace, profile, CSVs)
    + the bytes of the simulator's own source (simulator/*.py)

so renaming the scenario file or adding a value to a sweep axis keeps every cached point, while
changing any resolved value (a default, a preset, a trace row) makes a new one, and so does
changing the simulator's code without bumping the version (a stale result is worse than a rerun).

`evaluate_point` is what a worker runs: it returns the point's outcome, errors included as text
(a worker never raises). Every simulation seeds its own RNG from the scenario, so which worker
runs a point, and in what order, does not change its result.
"""

from __future__ import annotations

import functools
import hashlib
import math
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from pagesim import __version__
from pagesim.simulator.core.config import ReportConfig, Scenario, SystemConfig
from pagesim.simulator.core.defaults import resolve_system
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.scenario.load import describe_scenario
from pagesim.simulator.studies.backlog import backlog_figures


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
    resolved = resolve_system(system, scenario.model, scenario.gpu, scenario.tensor_parallel)
    alone = replace(
        scenario, systems=(resolved.system,), sweep=(), source=None, report=ReportConfig()
    )
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


def extra_metrics(result: RunResult) -> dict[str, float | int | None]:
    """Per-point figures the summary lacks, used by the capacity search
    (simulator.studies.capacity_search) and by a sweep's findings (the arrival window's
    backlog: simulator.studies.backlog).

    slo_share: in-window requests that finished meeting the SLO / in-window requests offered
    (rejected and unfinished ones count as misses). queue_delay_p99_s: 99th percentile of the
    wait from arrival to first admission over in-window requests; one never admitted waits
    forever (inf). num_gpus: the run's GPUs (a fleet's summary counts them; one replica: its
    tensor-parallel degree). num_tokens_served: prompt + output tokens of the finished requests
    (the fleet search's cost per million tokens).
    """
    window = result.requests[result.requests["in_window"].astype(bool)]
    offered = len(window)
    met = int(window["meets_slo"].astype(bool).sum())
    waits = (window["admitted_s"] - window["arrival_s"]).to_numpy(dtype=float)
    waits = np.where(np.isnan(waits), math.inf, waits)
    p99 = float(np.percentile(waits, 99, method="higher")) if offered else 0.0
    num_gpus = result.summary.get("num_gpus", result.provenance.get("tensor_parallel", 1))
    assert isinstance(num_gpus, int), "the engine records GPU counts as ints"
    requests = result.requests
    finished = (requests["status"] == "finished").to_numpy()
    served = requests["prompt_len"].to_numpy()[finished].sum()
    served += requests["num_output_tokens"].to_numpy()[finished].sum()
    return {
        "slo_share": met / offered if offered else 0.0,
        "queue_delay_p99_s": p99,
        "num_gpus": num_gpus,
        "num_tokens_served": int(served),
    } | backlog_figures(result.requests)


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

"""Fidelity, measured: simulate a scenario, execute the same scenario for real, compare.

    predicted run  = simulate(scenario)                                  (profile or roofline)
    measured run   = simulate(scenario, execution_factory=PlanExecutor)  (same seed, same arrivals)

Measured durations move the clock, and the clock moves the schedule, so the two runs do not
execute the same plans. Two comparisons follow from that:

(a) step time on the *same* plans: every plan the executor runs is also priced by the predicting
    model (its shadow); per step, error = (predicted - measured) / measured of compute_s (swap
    and copy times are analytic in both runs). Reported: median and p90 of |error| and the bias
    (mean signed error), in percent.
(b) request level, run against run: TTFT, TPOT and E2E at p50 and p95 over finished requests
    (after warm-up), error = (simulated - measured) / measured, in percent.

Held-out honesty: the profile that predicts is calibrated on its own synthetic grid (uniform and
skewed decode mixes, token counts, whole prompts), never on the scenario's steps. The result names
the grid, the share of executed steps inside its measured range, and the share that coincide
with a grid point.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pagesim.calibration.executor import (
    ExecutorConfig,
    PlanExecutor,
    blas_threads,
    measured_factory,
)
from pagesim.simulator.core.config import ExecutionKind, Policy, Scenario, SystemConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.engine import simulate
from pagesim.simulator.execution.factory import make_execution_model
from pagesim.simulator.execution.profile import ProfileExtrapolationWarning
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.scenario.load import load_scenario, resolve_scenario

BACKENDS = ("numpy", "cupy")
PAGED = (Policy.VLLM_V0, Policy.VLLM_V1)
REQUEST_METRICS = ("ttft", "tpot", "e2e")
QUANTILES = (("p50", 0.5), ("p95", 0.95))
STEP_CSV = "fidelity_steps.csv"
RESULT_JSON = "fidelity.json"


@dataclass(frozen=True, slots=True)
class StepError:
    """Step-time error of the predicting model on the executed plans, in percent."""

    num_steps: int
    median_abs_pct: float
    p90_abs_pct: float
    bias_pct: float  # mean of (predicted - measured) / measured: > 0 over-predicts
    median_bias_pct: float


@dataclass(frozen=True, slots=True)
class RequestError:
    metric: str  # ttft | tpot | e2e
    quantile: str  # p50 | p95
    simulated_s: float
    measured_s: float
    pct_error: float  # (simulated - measured) / measured x 100


@dataclass(frozen=True, slots=True)
class HeldOut:
    """Where the prediction came from, and how the scenario's steps sit against its grid."""

    predictor: str  # "profile" | "roofline"
    profile_path: str | None
    calibration: str  # how the profile was made ("calibrate --quick (numpy)", "given", ...)
    grid: dict[str, object]  # the calibration grid's axes (profile only)
    fraction_inside_range: float | None  # executed steps the profile priced without extrapolating
    fraction_on_grid_points: float | None  # executed steps equal to a calibration grid point
    scenario: str  # the scenario run (name, workload, requests)


@dataclass(frozen=True)
class FidelityResult:
    scenario: str
    system: str
    backend: str
    device: str
    layer_subset: str
    step_error: StepError
    request_errors: tuple[RequestError, ...]
    held_out: HeldOut
    steps: pd.DataFrame  # one row per executed step: measured and predicted compute_s
    simulated: RunResult
    measured: RunResult
    executor: dict[str, object]  # the executor's describe()
    wall_s: float
    files: dict[str, str] = field(default_factory=dict)
    host_timing: dict[str, object] = field(default_factory=dict)  # see `host_timing`

    def request_error(self, metric: str, quantile: str) -> RequestError:
        return next(e for e in self.request_errors if e.metric == metric and e.quantile == quantile)

    def to_dict(self) -> dict[str, object]:
        """JSON-safe figures (no frames)."""
        return {
            "scenario": self.scenario,
            "system": self.system,
            "backend": self.backend,
            "device": self.device,
            "layer_subset": self.layer_subset,
            "step_error": asdict(self.step_error),
            "request_errors": [asdict(e) for e in self.request_errors],
            "held_out": asdict(self.held_out),
            "executor": self.executor,
            "wall_s": self.wall_s,
            "files": self.files,
            "host_timing": self.host_timing,
        }


def pick_system(scenario: Scenario, name: str | None) -> SystemConfig:
    """The named system, or the scenario's first paged one."""
    if name is not None:
        for system in scenario.systems:
            if system.name == name:
                return system
        names = ", ".join(s.name for s in scenario.systems)
        raise InputError(f"scenario {scenario.name!r} has no system {name!r}; systems: {names}")
    for system in scenario.systems:
        if system.policy in PAGED:
            return system
    raise InputError(
        f"scenario {scenario.name!r} has no paged system (vllm-v0 or vllm-v1): the measured "
        "executor runs block tables, and static/orca reserve contiguous regions"
    )


def with_profile(scenario: Scenario, profile: Path) -> Scenario:
    execution = replace(scenario.execution, kind=ExecutionKind.PROFILE, profile_path=profile)
    return replace(scenario, execution=execution)


def check_fidelity(
    scenario: str | Path,
    overrides: Sequence[str] = (),
    *,
    out: Path,
    profile: Path | None = None,
    calibrate_quick: bool = False,
    backend: str = "numpy",
    num_layers: int | None = None,
    num_requests: int | None = None,
    system_name: str | None = None,
    cuda_graphs: bool = False,
    progress: Callable[[str], None] | None = None,
) -> FidelityResult:
    """`pagesim validate-fidelity`: check the options, load the scenario (a file or a built-in
    name) and `run_fidelity`, the profile's extrapolation warnings silenced (the result counts
    the steps outside its measured range)."""
    if backend not in BACKENDS:
        raise InputError(f"--backend: unknown backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if profile is not None and calibrate_quick:
        raise InputError("give either --profile or --calibrate-quick, not both")
    if profile is not None and not profile.is_file():
        raise InputError(f"--profile: no such file {profile}")
    loaded = load_scenario(resolve_scenario(scenario), list(overrides))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProfileExtrapolationWarning)
        return run_fidelity(
            loaded,
            system_name,
            profile=profile,
            calibrate_quick=calibrate_quick,
            backend=backend,
            num_layers=num_layers,
            num_requests=num_requests,
            out=out,
            progress=progress,
            cuda_graphs=cuda_graphs,
        )


def run_fidelity(
    scenario: Scenario,
    system_name: str | None = None,
    *,
    profile: Path | None = None,
    calibrate_quick: bool = False,
    backend: str = "numpy",
    num_layers: int | None = None,
    num_requests: int | None = None,
    out: Path | None = None,
    executor_config: ExecutorConfig | None = None,
    progress: Callable[[str], None] | None = None,
    cuda_graphs: bool = False,
) -> FidelityResult:
    """Simulate and execute `scenario` (one system) on the same seed; compare step and request
    times. Writes `fidelity_steps.csv` and `fidelity.json` (and the calibrated profile) to `out`.

    `cuda_graphs` replays decode-only steps from CUDA graphs (ignored when `executor_config` is
    given: its own `cuda_graphs` holds); a profile calibrated here then takes its per-step floor
    from the same mode. `progress` also gets the executor's running figures every 500 steps."""
    say = progress or (lambda _: None)
    started = time.perf_counter()
    if profile is not None and calibrate_quick:
        raise InputError("give either a profile or --calibrate-quick, not both")
    system = pick_system(scenario, system_name)
    if system.policy not in PAGED:
        raise InputError(
            f"system {system.name!r} is {system.policy.value}: the measured executor runs paged "
            "policies only (vllm-v0, vllm-v1); static and orca reserve contiguous regions with "
            "no block table to execute"
        )
    if num_requests is not None:
        if num_requests < 1:
            raise InputError(f"--requests must be >= 1, got {num_requests}")
        scenario = replace(scenario, workload=replace(scenario.workload, num_requests=num_requests))
    config = executor_config or ExecutorConfig(
        backend=backend, num_layers=num_layers, cuda_graphs=cuda_graphs
    )
    calibration = "the scenario's own execution model"
    if calibrate_quick:
        from pagesim.calibration.run import calibrate

        folder = out if out is not None else Path(".")
        # On the CPU the profile is measured with the executor's BLAS thread count.
        threads = config.cpu_threads if config.backend == "numpy" else None
        with blas_threads(threads):
            profile = calibrate(
                scenario.model,
                config.backend,
                quick=True,
                out=folder / "profile.json",
                block_size=system.block_size,
                progress=say,
                floor_mode="cuda-graph" if config.cuda_graphs else "eager",
            )
        calibration = f"calibrate --quick ({config.backend}), made for this check"
    elif profile is not None:
        calibration = f"given profile {profile}"
    if profile is not None:
        scenario = with_profile(scenario, Path(profile))

    say(f"simulating {scenario.name} / {system.name}")
    simulated = simulate(scenario, system)
    sink: list[PlanExecutor] = []
    mode = "CUDA graphs for decode steps" if config.cuda_graphs else "eager"
    say(f"executing {scenario.name} / {system.name} on {config.backend} ({mode})")
    factory = measured_factory(config, make_execution_model, sink, progress=say)
    measured = simulate(scenario, system, execution_factory=factory)
    (executor,) = sink
    steps = steps_frame(executor)
    predictor = str(simulated.provenance["execution_model"].get("kind"))  # type: ignore[union-attr]
    held_out = _held_out(scenario, predictor, profile, calibration, steps, measured)
    described = executor.describe()
    result = FidelityResult(
        scenario=scenario.name,
        system=system.name,
        backend=config.backend,
        device=str(described.get("device")),
        layer_subset=str(described.get("layer_subset")),
        step_error=step_error(steps),
        request_errors=request_errors(simulated, measured),
        held_out=held_out,
        steps=steps,
        simulated=simulated,
        measured=measured,
        executor={k: v for k, v in described.items() if k != "device_provenance"},
        wall_s=round(time.perf_counter() - started, 2),
        host_timing=host_timing(steps),
    )
    if out is not None:
        result = write_fidelity(result, out)
    return result


def steps_frame(executor: PlanExecutor) -> pd.DataFrame:
    """Per executed step: its shape, measured and predicted compute_s, and the error."""
    frame = pd.DataFrame([asdict(r) for r in executor.records])
    if frame.empty:
        return frame
    measured = frame["measured_compute_s"]
    predicted = frame["predicted_compute_s"].astype(float)
    frame["pct_error"] = (predicted - measured) / measured * 100.0
    return frame


HOST_BOUND_SHARE = 0.8  # a step whose host issue time is >= 80% of its event time


def host_timing(steps: pd.DataFrame) -> dict[str, object]:
    """The host's view of the executed steps: medians of the event time, the host's issue time
    and wall time, and the share of steps whose host issue took >= 80% of the event time (the
    GPU was mostly waiting for Python), per mode (eager / graph)."""
    if steps.empty or "host_s" not in steps:
        return {}
    figures: dict[str, object] = {}
    for mode, group in steps.groupby("mode"):
        measured = group["measured_compute_s"].to_numpy(dtype=float)
        host = group["host_s"].to_numpy(dtype=float)
        figures[str(mode)] = {
            "num_steps": len(group),
            "median_measured_s": float(np.median(measured)),
            "median_host_s": float(np.median(host)),
            "median_wall_s": float(np.median(group["wall_s"].to_numpy(dtype=float))),
            "share_host_bound": float(np.mean(host >= HOST_BOUND_SHARE * measured)),
        }
    return figures


def step_error(steps: pd.DataFrame) -> StepError:
    if steps.empty:
        nan = math.nan
        return StepError(0, nan, nan, nan, nan)
    errors = steps["pct_error"].to_numpy(dtype=float)
    errors = errors[np.isfinite(errors)]
    if not len(errors):
        return StepError(0, math.nan, math.nan, math.nan, math.nan)
    absolute = np.abs(errors)
    return StepError(
        len(errors),
        float(np.median(absolute)),
        float(np.percentile(absolute, 90)),
        float(errors.mean()),
        float(np.median(errors)),
    )


def _finished(result: RunResult) -> pd.DataFrame:
    requests = result.requests
    return requests[(requests["status"] == "finished") & requests["in_window"].astype(bool)]


def request_errors(simulated: RunResult, measured: RunResult) -> tuple[RequestError, ...]:
    sim, real = _finished(simulated), _finished(measured)
    errors = []
    for metric in REQUEST_METRICS:
        column = f"{metric}_s"
        sim_values = sim[column].to_numpy(dtype=float)
        real_values = real[column].to_numpy(dtype=float)
        for name, q in QUANTILES:
            s = _quantile(sim_values, q)
            m = _quantile(real_values, q)
            pct = (s - m) / m * 100.0 if m > 0 else math.nan
            errors.append(RequestError(metric, name, s, m, pct))
    return tuple(errors)


def _quantile(values: np.ndarray, q: float) -> float:
    finite = values[np.isfinite(values)]
    return float(np.quantile(finite, q)) if len(finite) else math.nan


def _held_out(
    scenario: Scenario,
    predictor: str,
    profile: Path | None,
    calibration: str,
    steps: pd.DataFrame,
    measured: RunResult,
) -> HeldOut:
    workload = scenario.workload
    source = workload.trace_name or f"{workload.prompt.kind.value} prompts"
    text = (
        f"{scenario.name}: {source}, {int(measured.summary.get('num_requests') or 0)} requests, "
        f"{len(steps)} executed steps, seed {scenario.seed}"
    )
    if predictor != "profile" or profile is None:
        return HeldOut(predictor, None, calibration, {}, None, None, text)
    data = json.loads(Path(profile).read_text())
    grid = _grid_axes(data.get("grid", {}))
    inside = steps["is_inside_range"].dropna() if not steps.empty else pd.Series([], dtype=bool)
    fraction_inside = float(inside.astype(bool).mean()) if len(inside) else None
    on_grid = [_on_grid(row, grid) for row in steps.itertuples(index=False)]
    fraction_on = float(np.mean(on_grid)) if on_grid else None
    return HeldOut(predictor, str(profile), calibration, grid, fraction_inside, fraction_on, text)


def _grid_axes(grid: dict[str, Any]) -> dict[str, object]:
    decode = grid.get("decode", [])
    prefill = grid.get("prefill", [])
    return {
        "decode_num_seqs": sorted({p["num_seqs"] for p in decode}),
        "decode_mean_context": sorted({p["mean_context"] for p in decode}),
        "decode_mixes": sorted({p["mix"] for p in decode}),
        "gemm_tokens": sorted(
            set(grid.get("gemm_tokens", [])) | set(grid.get("gemm_held_out", []))
        ),
        "prefill_seqs_x_len": sorted({(p[0], p[1]) for p in _prefill_points(prefill)}),
    }


def _prefill_points(prefill: list[Any]) -> list[tuple[int, int]]:
    points = []
    for p in prefill:
        if isinstance(p, dict):
            points.append((int(p["num_seqs"]), int(p["prompt_len"])))
        else:
            points.append((int(p[0]), int(p[1])))
    return points


def _on_grid(row: Any, grid: dict[str, Any]) -> bool:
    """The step equals a calibration point: its token count is a GEMM grid point, its decode
    batch a uniform (num_seqs, context) point, its prefill a (prompts, length) point."""
    tokens = row.num_prefill_tokens + row.num_decode_tokens
    if tokens not in grid["gemm_tokens"]:
        return False
    if row.num_decode_seqs:
        n = row.num_decode_seqs
        if n not in grid["decode_num_seqs"] or row.decode_kv_tokens % n:
            return False
        if row.decode_kv_tokens // n not in grid["decode_mean_context"]:
            return False
    if row.num_prefill_seqs:
        n = row.num_prefill_seqs
        if row.num_prefill_tokens % n:
            return False
        length = row.num_prefill_tokens // n
        if (n, length) not in grid["prefill_seqs_x_len"] or row.prefill_sq != n * length**2:
            return False
    return True


def write_fidelity(result: FidelityResult, out: Path) -> FidelityResult:
    """Per-step CSV, the figures as JSON, and both runs' data, under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    steps_csv = out / STEP_CSV
    result.steps.to_csv(steps_csv, index=False)
    result.simulated.write(out / "simulated")
    result.measured.write(out / "measured")
    files = {"steps_csv": str(steps_csv), "json": str(out / RESULT_JSON)}
    if result.held_out.profile_path is not None:
        files["profile"] = result.held_out.profile_path
    result = replace(result, files=files)
    (out / RESULT_JSON).write_text(json.dumps(result.to_dict(), indent=2, default=str) + "\n")
    return result

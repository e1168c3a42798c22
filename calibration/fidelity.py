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

This module runs the check and writes its files; the figures are computed in `fidelity_errors`
and `held_out`.

The same idea in the reports layer: reports/fidelity.py renders a FidelityResult.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import pandas as pd

from pagesim.calibration.executor import (
    ExecutorConfig,
    PlanExecutor,
    blas_threads,
    measured_factory,
)
from pagesim.calibration.fidelity_errors import (
    RequestError,
    StepError,
    host_timing,
    request_errors,
    step_error,
)
from pagesim.calibration.held_out import HeldOut, held_out_of
from pagesim.simulator.core.config import ExecutionKind, Policy, Scenario, SystemConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.engine import simulate
from pagesim.simulator.execution.factory import make_execution_model
from pagesim.simulator.execution.profile import ProfileExtrapolationWarning
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.scenario.load import load_scenario, resolve_scenario

BACKENDS = ("numpy", "cupy")
PAGED = (Policy.VLLM_V0, Policy.VLLM_V1)
STEP_CSV = "fidelity_steps.csv"
RESULT_JSON = "fidelity.json"


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
    model_info = simulated.provenance["execution_model"]
    assert isinstance(model_info, dict), "the engine records the model's describe() as a dict"
    predictor = str(model_info.get("kind"))
    held_out = held_out_of(scenario, predictor, profile, calibration, steps, measured)
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

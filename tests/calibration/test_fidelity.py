"""Fidelity on the CPU: the real executor over the scheduler's block tables, the comparison, the
report and the command. Error values are not asserted (CPU timings are noisy), only computed.

GPU tests are marked `gpu` and skip with a reason where CuPy or a GPU is absent.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
import typer
from gpu_helpers import gpu_skip_reason
from sim_helpers import poisson_workload, system, tiny_scenario, write_tiny_config
from typer.testing import CliRunner

from pagesim.calibration.executor import (
    ExecutorConfig,
    ExecutorReadError,
    PlanExecutor,
    measured_factory,
)
from pagesim.calibration.fidelity import FidelityResult, pick_system, run_fidelity
from pagesim.calibration.step_inputs import StepInputs
from pagesim.cli_calibration import validate_fidelity
from pagesim.reports.fidelity import write_fidelity_report
from pagesim.simulator.core.config import (
    Policy,
    PreemptionPolicy,
    PrefixGroup,
    Scenario,
    SystemConfig,
)
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.plan import StepPlan
from pagesim.simulator.core.request import SamplingKind
from pagesim.simulator.core.scheduler import Scheduler
from pagesim.simulator.engine import simulate
from pagesim.simulator.execution.profile import ProfileExtrapolationWarning
from pagesim.simulator.metrics.result import RunResult


@pytest.fixture(scope="module")
def fidelity(tmp_path_factory: pytest.TempPathFactory) -> tuple[FidelityResult, Path]:
    out = tmp_path_factory.mktemp("fidelity")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProfileExtrapolationWarning)
        result = run_fidelity(tiny_scenario(out), calibrate_quick=True, out=out)
    return result, out


def test_every_error_figure_is_computed(fidelity: tuple[FidelityResult, Path]) -> None:
    result, _ = fidelity
    e = result.step_error
    assert e.num_steps == len(result.steps) > 50
    for value in (e.median_abs_pct, e.p90_abs_pct, e.bias_pct, e.median_bias_pct):
        assert math.isfinite(value)
    assert {(r.metric, r.quantile) for r in result.request_errors} == {
        (m, q) for m in ("ttft", "tpot", "e2e") for q in ("p50", "p95")
    }
    for error in result.request_errors:
        assert math.isfinite(error.pct_error) and error.measured_s > 0, error
    eager = result.host_timing["eager"]
    assert eager["num_steps"] == len(result.steps)  # type: ignore[index]
    assert 0 <= eager["share_host_bound"] <= 1 and eager["median_host_s"] > 0  # type: ignore[index]


def test_per_step_table_has_both_columns(fidelity: tuple[FidelityResult, Path]) -> None:
    result, out = fidelity
    table = result.steps
    assert table["measured_compute_s"].gt(0).all() and table["predicted_compute_s"].gt(0).all()
    written = (out / "fidelity_steps.csv").read_text().splitlines()
    assert "measured_compute_s" in written[0] and "predicted_compute_s" in written[0]
    assert len(written) == len(table) + 1
    # The measured run's steps are the executed ones, each as long as measured (+ analytic swaps).
    steps = result.measured.steps
    assert len(steps) == len(table)
    assert steps["compute_s"].tolist() == pytest.approx(table["measured_compute_s"].tolist())


def test_measured_run_is_labelled_and_held_out_stated(
    fidelity: tuple[FidelityResult, Path],
) -> None:
    result, out = fidelity
    execution = result.measured.provenance["execution_model"]
    assert execution["kind"] == "measured" and execution["device"] == "cpu"  # type: ignore[index]
    assert execution["layer_subset"] == "all layers"  # type: ignore[index]
    assert result.simulated.provenance["execution_model"]["kind"] == "profile"  # type: ignore[index]
    held = result.held_out
    assert held.predictor == "profile" and held.grid["gemm_tokens"]
    assert held.fraction_inside_range is not None and 0 <= held.fraction_inside_range <= 1
    assert held.fraction_on_grid_points is not None and 0 <= held.fraction_on_grid_points <= 1
    assert "tiny_fidelity" in held.scenario and "requests" in held.scenario
    saved = json.loads((out / "fidelity.json").read_text())
    assert saved["step_error"]["num_steps"] == result.step_error.num_steps
    assert (out / "profile.json").is_file() and (out / "measured" / "steps.csv").is_file()


def test_report_files_are_written(fidelity: tuple[FidelityResult, Path]) -> None:
    result, out = fidelity
    html = write_fidelity_report(result, out / "report")
    text = html.read_text()
    assert (out / "report" / "fidelity_scatter.png").stat().st_size > 5000
    assert "data:image/png;base64," in text and "median |error|" in text
    assert "Held-out honesty" in text and "CPU (NumPy) figures" in text


def _run_poisoned(scenario: Scenario, shift_reads: bool = False) -> tuple[PlanExecutor, RunResult]:
    executors: list[PlanExecutor] = []
    make = measured_factory(ExecutorConfig(poison_unmapped=True, warmup_steps=1), sink=executors)

    def factory(sc: Scenario, sy: SystemConfig, scheduler: Scheduler) -> PlanExecutor:
        executor = make(sc, sy, scheduler)
        if shift_reads:  # decode attention reads each table one block off: outside the tables
            build = executor._inputs

            def shifted(plan: StepPlan) -> StepInputs:
                inputs = build(plan)
                inputs.decode_tables = (inputs.decode_tables + 1) % executor.kv.num_blocks
                return inputs

            executor._inputs = shifted  # type: ignore[method-assign]
        return executor

    result = simulate(scenario, execution_factory=factory, check_invariants=True)
    return executors[0], result


@pytest.mark.parametrize(
    ("policy", "sampling", "num_seqs"),
    [
        (Policy.VLLM_V0, SamplingKind.PARALLEL, 2),
        (Policy.VLLM_V0, SamplingKind.BEAM, 3),
        (Policy.VLLM_V1, SamplingKind.PARALLEL, 3),  # child requests: no forks, prefix hits
    ],
)
def test_executor_reads_exactly_the_mapped_blocks(
    tmp_path: Path, policy: Policy, sampling: SamplingKind, num_seqs: int
) -> None:
    """Unmapped blocks hold NaN before every step; swaps, copy-on-write forks (V0) or child
    requests sharing prompt blocks (V1) and prefix hits all happen, and every step's output stays
    finite."""
    scenario = tiny_scenario(tmp_path, 60)
    prefix = (PrefixGroup(32, 0.8),)
    workload = replace(
        poisson_workload(60, 400.0, 48, 24, prefix_groups=prefix, sampling=sampling),
        num_seqs=num_seqs,
    )
    paged = system(
        policy,
        "paged",
        num_kv_blocks=40,
        # V0 refuses a token cap below the model's length (1,024 here), as vLLM V0 does.
        max_num_batched_tokens=64 if policy is Policy.VLLM_V1 else 1024,
        swap_space_gib=0.01,
        preemption=PreemptionPolicy.SWAP,
        enable_prefix_cache=True,
    )
    scenario = replace(scenario, workload=workload, systems=(paged,))
    executor, result = _run_poisoned(scenario)
    steps = result.steps
    assert executor.num_poisoned_blocks > 0
    assert steps["num_swap_out_blocks"].sum() > 0 and steps["num_swap_in_blocks"].sum() > 0
    if policy is Policy.VLLM_V0:
        assert steps["num_cow_copies"].sum() > 0
    else:  # V1 has no copy-on-write: its samples share the prompt through the prefix cache
        assert steps["num_cow_copies"].sum() == 0 and result.summary["prefix_hit_rate"] > 0
    assert result.summary["num_finished"] == 60


def test_a_read_outside_the_tables_is_caught(tmp_path: Path) -> None:
    with pytest.raises(ExecutorReadError):
        _run_poisoned(tiny_scenario(tmp_path, 40), shift_reads=True)


def test_layer_subset_is_scaled_and_stated(tmp_path: Path) -> None:
    executors: list[PlanExecutor] = []
    factory = measured_factory(ExecutorConfig(num_layers=1, warmup_steps=1), sink=executors)
    result = simulate(tiny_scenario(tmp_path, 20), execution_factory=factory)
    (executor,) = executors
    assert executor.describe()["layer_subset"] == "first 1 of 2 layers, time x 2; LM head once"
    for record in executor.records:
        expected = 2 * record.measured_layers_s + record.measured_lm_head_s
        assert record.measured_compute_s == pytest.approx(expected)
    assert result.provenance["execution_model"]["num_layers_executed"] == 1  # type: ignore[index]


def test_contiguous_policies_and_bad_settings_are_refused(tmp_path: Path) -> None:
    scenario = tiny_scenario(tmp_path, 5)
    static = replace(scenario, systems=(system(Policy.ORCA, "orca", num_kv_blocks=128),))
    with pytest.raises(InputError, match="paged"):
        simulate(static, execution_factory=measured_factory())
    with pytest.raises(InputError, match="no paged system"):
        pick_system(static, None)
    with pytest.raises(InputError, match="paged policies only"):
        run_fidelity(static, "orca")
    with pytest.raises(InputError, match="--layers"):
        simulate(scenario, execution_factory=measured_factory(ExecutorConfig(num_layers=3)))
    with pytest.raises(InputError, match="host memory"):
        simulate(scenario, execution_factory=measured_factory(ExecutorConfig(max_host_bytes=1)))
    with pytest.raises(InputError, match="backend"):
        simulate(scenario, execution_factory=measured_factory(ExecutorConfig(backend="tpu")))


def test_roofline_prediction_states_no_grid(tmp_path: Path) -> None:
    result = run_fidelity(tiny_scenario(tmp_path, 30), num_layers=1)
    assert result.held_out.predictor == "roofline" and result.held_out.fraction_inside_range is None
    assert result.step_error.num_steps == len(result.steps) and math.isfinite(
        result.step_error.median_abs_pct
    )


def test_chunk_attention_is_the_tail_of_causal_attention() -> None:
    """A chunk of n queries over c cached + new keys equals the last n rows of whole-prompt
    causal attention (GQA: 4 query heads over 2 KV heads)."""
    import numpy as np

    from pagesim.calibration.attention_reference import numpy_prefill_attention
    from pagesim.calibration.forward import HostForward

    rng = np.random.default_rng(1)
    c, n, heads, kv_heads, dim = 40, 9, 4, 2, 64
    q = rng.standard_normal((c, heads, dim), dtype=np.float32)
    k = rng.standard_normal((c, kv_heads, dim), dtype=np.float32)
    v = rng.standard_normal((c, kv_heads, dim), dtype=np.float32)
    device = HostForward.__new__(HostForward)  # only the attention math: no arrays allocated
    device.config = ExecutorConfig()
    device.heads, device.kv_heads, device.head_dim = heads, kv_heads, dim
    device.scale = 1.0 / math.sqrt(dim)
    whole = numpy_prefill_attention(q[None], k[None], v[None])[0]
    chunk = device._prefill(q[-n:], k, v)
    np.testing.assert_allclose(chunk, whole[-n:], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(device._prefill(q, k, v), whole, rtol=1e-5, atol=1e-5)


SCENARIO_TOML = """
name = "tiny_fidelity_cli"
seed = 0
[model]
config = "config.json"
[gpu]
preset = "a100-80gb"
[workload]
num_requests = 200
[workload.arrival]
kind = "poisson"
rate_per_s = 400.0
[workload.prompt]
kind = "lognormal"
mean = 48
cv = 1.0
[workload.output]
kind = "lognormal"
mean = 24
cv = 1.0
[[systems]]
name = "orca"
policy = "orca"
[[systems]]
name = "v1"
policy = "vllm-v1"
num_kv_blocks = 128
max_num_batched_tokens = 64
swap_space_gib = 0.01
"""


def _cli() -> typer.Typer:
    app = typer.Typer()
    app.command("validate-fidelity")(validate_fidelity)
    app.command("noop")(lambda: None)  # two commands: typer keeps the subcommand name
    return app


def test_cli_validate_fidelity(tmp_path: Path) -> None:
    write_tiny_config(tmp_path)
    path = tmp_path / "tiny.toml"
    path.write_text(SCENARIO_TOML)
    out = tmp_path / "out"
    args = ["validate-fidelity", str(path), "--out", str(out), "--calibrate-quick"]
    result = CliRunner().invoke(_cli(), [*args, "--requests", "40"])
    assert result.exit_code == 0, result.output
    assert "median |err|" in result.output and "E2E" in result.output
    assert (out / "fidelity.html").is_file() and (out / "fidelity_steps.csv").is_file()
    assert (out / "fidelity_scatter.png").is_file()
    summary = json.loads((out / "fidelity.json").read_text())
    assert summary["system"] == "v1"  # the first paged system


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--backend", "tpu"], "--backend"),
        (["--profile", "missing.json"], "--profile"),
        (["--profile", "p.json", "--calibrate-quick"], "not both"),
        (["--system", "orca"], "paged policies only"),
        (["--layers", "0"], "--layers"),
    ],
)
def test_cli_errors_are_input_errors(tmp_path: Path, extra: list[str], message: str) -> None:
    write_tiny_config(tmp_path)
    path = tmp_path / "tiny.toml"
    path.write_text(SCENARIO_TOML)
    (tmp_path / "p.json").write_text("{}")
    args = ["validate-fidelity", str(path), "--out", str(tmp_path / "o"), "--requests", "3"]
    result = CliRunner().invoke(
        _cli(), args + [e.replace("p.json", str(tmp_path / "p.json")) for e in extra]
    )
    assert isinstance(result.exception, InputError), result.output
    assert message in str(result.exception)


# ---------------------------------------------------------------- GPU (CuPy)


GPU_REASON = gpu_skip_reason()


@pytest.mark.gpu
@pytest.mark.skipif(GPU_REASON is not None, reason=GPU_REASON or "")
def test_gpu_executor_reads_exactly_the_mapped_blocks(tmp_path: Path) -> None:
    scenario = tiny_scenario(tmp_path, 60, preemption=PreemptionPolicy.SWAP, num_kv_blocks=48)
    executors: list[PlanExecutor] = []
    config = ExecutorConfig(backend="cupy", poison_unmapped=True, warmup_steps=2)
    result = simulate(scenario, execution_factory=measured_factory(config, sink=executors))
    (executor,) = executors
    assert executor.num_poisoned_blocks > 0 and result.summary["num_finished"] == 60
    described = executor.describe()
    assert described["timer"] == "cuda-events" and described["device"] != "cpu"


@pytest.mark.gpu
@pytest.mark.skipif(GPU_REASON is not None, reason=GPU_REASON or "")
def test_gpu_executor_in_graph_mode_reads_exactly_the_mapped_blocks(tmp_path: Path) -> None:
    """CUDA-graph replays of decode steps, with unmapped blocks poisoned before every step."""
    scenario = tiny_scenario(tmp_path, 60, preemption=PreemptionPolicy.SWAP, num_kv_blocks=48)
    executors: list[PlanExecutor] = []
    config = ExecutorConfig(backend="cupy", poison_unmapped=True, warmup_steps=2, cuda_graphs=True)
    result = simulate(scenario, execution_factory=measured_factory(config, sink=executors))
    (executor,) = executors
    described = executor.describe()
    assert described["graph_error"] is None and described["num_graph_steps"] > 0
    assert result.summary["num_finished"] == 60
    graph_steps = [r for r in executor.records if r.mode == "graph"]
    assert all(r.measured_compute_s > 0 and r.wall_s >= r.host_s for r in graph_steps)


@pytest.mark.gpu
@pytest.mark.skipif(GPU_REASON is not None, reason=GPU_REASON or "")
def test_gpu_fidelity_loop(tmp_path: Path) -> None:
    """A short loop on the GPU (roofline prediction, one layer executed): seconds, not minutes."""
    result = run_fidelity(tiny_scenario(tmp_path, 40), backend="cupy", num_layers=1, out=tmp_path)
    assert result.backend == "cupy" and result.step_error.num_steps == len(result.steps) > 0
    assert math.isfinite(result.step_error.median_abs_pct)
    assert result.executor["layer_subset"] == "first 1 of 2 layers, time x 2; LM head once"
    assert write_fidelity_report(result, tmp_path).is_file()

"""The `pagesim` command as a person uses it: run, sweep, report, validate, scenarios, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

TEXTBOOK = "textbook_static_vs_continuous"


def test_run_writes_a_report_and_prints_a_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    result = run_cli(capsys, "run", TEXTBOOK, "--out", str(out), "--seed", "3")
    assert result.exit_code == 0, result.err
    assert "report:" in result.out and "static" in result.out and "continuous" in result.out
    html = (out / "report.html").read_text()
    assert "<img" in html and "data:image/png;base64," in html
    summary = (out / "summary.csv").read_text().splitlines()
    assert len(summary) == 1 + 2  # header + two systems
    assert json.loads((out / "overrides.json").read_text()) == ["seed=3"]
    # Re-render from the saved data.
    (out / "report.html").unlink()
    again = run_cli(capsys, "report", str(out))
    assert again.exit_code == 0 and (out / "report.html").exists()


def test_run_without_report_writes_data_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "data"
    result = run_cli(capsys, "run", TEXTBOOK, "--out", str(out), "--no-report")
    assert result.exit_code == 0, result.err
    assert not (out / "report.html").exists()
    assert sorted(p.name for p in out.glob("*/summary.json")) == ["summary.json"] * 2


def test_sweep_over_one_axis(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep"
    result = run_cli(
        capsys,
        "sweep",
        TEXTBOOK,
        "--param",
        "systems.max_num_seqs=4,8",
        "--out",
        str(out),
    )
    assert result.exit_code == 0, result.err
    table = (out / "sweep.csv").read_text().splitlines()
    assert len(table) == 1 + 2 * 2  # two points x two systems
    assert (out / "report.html").exists()


def test_validate_and_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    listed = run_cli(capsys, "scenarios", "list")
    assert listed.exit_code == 0 and TEXTBOOK in listed.out
    shown = run_cli(capsys, "scenarios", "show", TEXTBOOK)
    assert "[[systems]]" in shown.out
    valid = run_cli(capsys, "validate", TEXTBOOK)
    assert valid.exit_code == 0 and "valid" in valid.out


def test_scenarios_show_resolved_names_every_value_and_its_source(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Era defaults appear with the vLLM source they stand for; values the scenario (or --set)
    gives say "scenario"; the capacity is the one a run gets."""
    shown = run_cli(
        capsys,
        "scenarios",
        "show",
        "azure_conv_v0_vs_chunked",
        "--resolved",
        "--set",
        "systems[1].max_num_seqs=64",
    )
    assert shown.exit_code == 0, shown.err
    v0, v1, _ = shown.out.split("\n[")[1:]
    assert v0.startswith("v0]  # vLLM V0 engine")
    assert "watermark              = 0.01        # vLLM V0 core/block_manager" in v0
    assert "max_num_batched_tokens = 8192        # scenario" in v0
    assert "max_num_seqs               = 64          # scenario" in v1
    assert "enable_prefix_cache        = False       # scenario" in v1
    assert "preemption                 = 'recompute'  # vLLM V1 preempts by recompute only" in v1
    # The release a V1 system follows, and its defaults' sources (core/vllm_eras.py)
    assert "vllm_version               = '0.34'      # the newest vLLM release on PyPI" in v1
    assert "scheduler_reserve_full_isl = True        # vLLM v0.34.0 config/scheduler.py" in v1
    # vLLM V1's hybrid KV-cache manager: a V1 knob only
    assert "hybrid_kv_cache_manager    = True" in v1 and "hybrid_kv_cache_manager" not in v0
    # 28,433 blocks at 256 sequences; fewer sequences, a smaller sampler reserve, more blocks:
    assert "# KV cache: 28,527 blocks of 16 tokens" in v1
    # The host overhead is the era's too, priced by the execution model (execution/overhead.py).
    assert "# host overhead per step (execution.step_overhead_s): 1.18 ms + 0.1 ms" in v0
    # vLLM v0.34.0 runs V1 with async scheduling by default (core/vllm_eras.py)
    assert "1 ms + 0 ms x sequences, overlapped with the GPU step but 0.16 ms" in v1


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["run", "no_such_scenario"], "no_such_scenario"),
        (["run", TEXTBOOK, "--set", "systems.policy=vlm"], "valid:"),
        (["run", TEXTBOOK, "--set", "workload.num_requests=-1"], "num_requests"),
        (["validate", TEXTBOOK, "--set", "gpu.preset=tpu"], "unknown GPU 'tpu'"),
        (["report", "/nonexistent/run"], "/nonexistent/run"),
        (["sweep", TEXTBOOK, "--param", "nonsense"], "nonsense"),
        (["calibrate", "--model", "llama-2-7b", "--out", "x.json", "--backend", "tpu"], "tpu"),
    ],
)
def test_bad_input_is_one_clean_message_and_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    result = run_cli(capsys, *args)
    assert result.exit_code == 2, (result.out, result.err)
    assert needle in result.err
    assert "Traceback" not in result.err + result.out


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.one_of(
        st.binary(max_size=300),
        st.text(max_size=300),
        st.lists(
            st.sampled_from(
                [
                    "[model]\npreset = 'llama-2-7b'\n",
                    "[gpu]\npreset = 'a100-80gb'\n",
                    "[[systems]]\nname = 'a'\npolicy = 'vllm-v1'\n",
                    "[[systems]]\nname = 'a'\npolicy = 'orca'\n",
                    "[workload]\nnum_requests = 3\n",
                    "[workload.arrival]\nkind = 'poisson'\nrate_per_s = -1\n",
                    "[workload.prompt]\nkind = 'fixed'\nvalue = 'ten'\n",
                    "name = 7\n",
                    "seed = true\n",
                    "[slo]\nttft_s = 0\n",
                    "[sweep]\naxes = 3\n",
                    "bogus = 1\n",
                    "[model\n",
                ]
            ),
            max_size=8,
        ).map("".join),
    )
)
def test_fuzzed_scenario_files_never_traceback(
    tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str], content: object
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "scenario.toml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(str(content))
    result = run_cli(capsys, "validate", str(path))
    assert "Traceback" not in result.err + result.out
    if result.exit_code != 0:
        assert result.exit_code == 2
        assert result.err.startswith("error: ") or "Error" in result.err
        assert str(path) in result.err or "scenario.toml" in result.err


def test_help_shows_the_table_names_in_brackets(capsys: pytest.CaptureFixture[str]) -> None:
    # typer renders help as rich markup, where a bare [sweep] is a style tag and vanishes.
    assert "the file's [sweep]" in run_cli(capsys, "sweep", "--help").out
    capacity = run_cli(capsys, "capacity", "--help").out
    assert "scenario's [slo]" in capacity and "meet the [slo]" in capacity


def test_calibrate_on_cpu_then_run_a_scenario_priced_by_the_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {
        "model_type": "llama",
        "num_hidden_layers": 2,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "max_position_embeddings": 2048,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    profile = tmp_path / "tiny.json"
    made = run_cli(
        capsys,
        "calibrate",
        "--model",
        str(tmp_path / "config.json"),
        "--backend",
        "numpy",
        "--quick",
        "--out",
        str(profile),
    )
    assert made.exit_code == 0, made.err
    assert json.loads(profile.read_text())["provenance"]["device"] == "cpu"
    scenario = tmp_path / "tiny.toml"
    scenario.write_text(
        """
name = "tiny-on-cpu-profile"
[model]
config = "config.json"
[gpu]
preset = "l4"
[execution]
kind = "profile"
profile = "tiny.json"
[workload]
num_requests = 20
[workload.arrival]
kind = "poisson"
rate_per_s = 5.0
[workload.prompt]
kind = "uniform"
low = 8
high = 64
[workload.output]
kind = "uniform"
low = 4
high = 32
[[systems]]
name = "v1"
policy = "vllm-v1"
"""
    )
    out = tmp_path / "run"
    result = run_cli(capsys, "run", str(scenario), "--out", str(out))
    assert result.exit_code == 0, result.err
    assert (out / "plots" / "calibration.png").exists()
    html = (out / "report.html").read_text()
    assert "Calibration" in html and "cpu" in html
    summary = json.loads((out / "v1" / "summary.json").read_text())
    assert summary["summary"]["num_finished"] == 20
    assert summary["provenance"]["execution_model"]["kind"] == "profile"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bench", "kernel", "--shapes", "2xq"], "--shapes: '2xq' is not SEQSxCONTEXT"),
        (["bench", "kernel", "--partition-sweep", "128,x"], "--partition-sweep: 'x'"),
        (["bench", "kernel", "--dtype", "fp8"], "KV dtypes must be among fp16, bf16"),
        (
            ["calibrate", "--model", "llama-2-7b", "--out", "x.json", "--floor-mode", "lazy"],
            "floor mode must be one of eager, cuda-graph",
        ),
        (
            ["calibrate", "--model", "llama-2-7b", "--out", "x.json", "--flush", "none"],
            "flush",
        ),
    ],
)
def test_gpu_command_options_are_checked_before_any_gpu_is_needed(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    result = run_cli(capsys, *args)
    assert result.exit_code == 2, result.err
    assert message in result.err and "Traceback" not in result.err

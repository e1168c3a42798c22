"""Repro 14 of the first round of bad inputs (profile_validate_and_inf), pinned: a profile is read
and checked whenever a scenario names one (`validate` and roofline runs included); a coefficient
that would price a run to infinity is refused; a profile of another, faster GPU runs but says so,
on stderr and at the top of the report. Built-in profiles are found by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_cli, tiny_scenario
from profile_helpers import synthetic_profile

from pagesim.simulator.core.catalog import get_model

SCENARIO = tiny_scenario("repro")


def _scenario(tmp_path: Path, profile: object | bytes, kind: str = "profile") -> Path:
    path = tmp_path / "p.json"
    if isinstance(profile, bytes):
        path.write_bytes(profile)
    else:
        path.write_text(json.dumps(profile))
    toml = tmp_path / "s.toml"
    toml.write_text(SCENARIO + f'[execution]\nkind = "{kind}"\nprofile = "p.json"\n')
    return toml


def _one_error(result: object, *words: str) -> None:
    assert result.exit_code == 2  # type: ignore[attr-defined]
    lines = result.err.strip().splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    for word in words:
        assert word in lines[0], (word, lines[0])


@pytest.mark.parametrize("kind", ["profile", "roofline"])
def test_validate_and_run_read_the_profile_whenever_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    toml = _scenario(tmp_path, bytes(range(256)), kind)
    _one_error(run_cli(capsys, "validate", str(toml)), "execution.profile", "p.json")
    out = tmp_path / "out"
    _one_error(run_cli(capsys, "run", str(toml), "--no-report", "--out", str(out)), "p.json")
    assert not out.exists()


def test_a_coefficient_that_prices_to_infinity_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = synthetic_profile(get_model("llama-2-7b"), device="a100-80gb")
    profile["decode_attention"]["coef"]["a_s"] = 1e308  # x 32 layers = inf
    toml = _scenario(tmp_path, profile)
    _one_error(
        run_cli(capsys, "validate", str(toml)),
        "field 'decode_attention.coef.a_s' must be a finite number from 0 to 1",
        "got 1e+308",
    )


def test_a_profile_faster_than_its_gpu_runs_with_warnings_on_stderr_and_in_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The synthetic profile's numbers are an H200-like fit; said to be measured on an A100, it
    beats the A100's datasheet: MBU far above 100% (a broken profile)."""
    toml = _scenario(tmp_path, synthetic_profile(get_model("llama-2-7b"), device="a100-80gb"))
    out = tmp_path / "out"
    result = run_cli(capsys, "run", str(toml), "--out", str(out))
    assert result.exit_code == 0, result.err
    warnings = [line for line in result.err.splitlines() if line.startswith("warning: v0: ")]
    assert any("at MBU" in w and "faster than this GPU can run" in w for w in warnings)
    assert any("over the run" in w for w in warnings)
    summary = json.loads((out / "v0" / "summary.json").read_text())
    assert summary["summary"]["mbu"] > 1
    assert len(summary["provenance"]["warnings"]) == 2
    page = (out / "report.html").read_text()
    assert "Warning (v0): the profile prices a" in page
    assert "step_cost_sources" in page and "pagesim kernel profile" in page


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_profile_of_another_catalog_gpu_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """A profile measured on an H200 would price the scenario's A100 at the H200's speed: the
    run refuses it, as it refuses another model's or degree's, and so does validate."""
    toml = _scenario(tmp_path, synthetic_profile(get_model("llama-2-7b"), device="NVIDIA H200"))
    args = ["--out", str(tmp_path / "out"), "--no-report"] if command == "run" else []
    _one_error(
        run_cli(capsys, command, str(toml), *args),
        "execution.profile",
        "measured on 'NVIDIA H200', but the replicas run on 'a100-80gb'",
        'execution.kind = "roofline"',
    )


def test_the_same_gpus_profile_runs_without_warnings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    toml = tmp_path / "s.toml"
    model = 'preset = "llama-2-70b"\ntensor_parallel = 2'
    builtin = '[execution]\nkind = "profile"\nprofile = "builtin:vidur-llama-2-70b-a100-80gb-tp2"\n'
    toml.write_text(SCENARIO.replace('preset = "llama-2-7b"', model) + builtin)
    result = run_cli(capsys, "run", str(toml), "--no-report", "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.err
    assert "warning:" not in result.err


def test_an_unknown_builtin_profile_lists_the_shipped_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    toml = tmp_path / "s.toml"
    toml.write_text(SCENARIO + '[execution]\nprofile = "builtin:vidur-llama-2-70b-a100-tp2"\n')
    _one_error(
        run_cli(capsys, "validate", str(toml)),
        "execution.profile: no built-in profile 'vidur-llama-2-70b-a100-tp2'",
        "vidur-llama-2-70b-a100-80gb-tp2",
    )


def test_a_shipped_profile_of_another_model_is_refused_naming_file_and_key(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 13: a profile whose model shapes are not the scenario's model: one line, exit 2."""
    result = run_cli(capsys, "validate", "measured_vs_roofline", "--set", "model.preset=llama-2-7b")
    _one_error(
        result,
        "execution.profile",
        "vidur-llama-2-70b-a100-80gb-tp2.json",
        "hidden_size 8192 (model has 4096)",
    )

"""`pagesim deploy` prints each system's vLLM command lines; `pagesim run` puts them in the
report and in vllm_commands.sh; a release it does not know is one `error:` line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import refused, run_cli


def test_deploy_prints_the_serve_and_bench_commands_of_each_system(
    capsys: pytest.CaptureFixture[str],
) -> None:
    done = run_cli(capsys, "deploy", "swap_vs_recompute")
    assert done.exit_code == 0, done.err
    assert done.out.count("vllm serve facebook/opt-13b") == 2  # both V0 systems
    assert "--preemption-mode swap" in done.out and "--preemption-mode recompute" in done.out
    assert "python benchmarks/benchmark_serving.py" in done.out
    newer = run_cli(capsys, "deploy", "vllm_v1_on_h200", "--vllm-version", "v0.11.0")
    assert newer.exit_code == 0, newer.err
    assert "vLLM v0.11.0" in newer.out and "vllm bench serve" in newer.out


def test_an_unknown_release_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    done = run_cli(capsys, "deploy", "swap_vs_recompute", "--vllm-version", "0.12")
    assert refused(done, "--vllm-version: unknown vLLM release '0.12'; valid: 0.11, 0.33, 0.34")


def test_a_run_report_carries_the_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    done = run_cli(capsys, "run", "textbook_static_vs_continuous", "--out", str(out))
    assert done.exit_code == 0, done.err
    commands = (out / "vllm_commands.sh").read_text()
    assert "# static: no vLLM equivalent" in commands
    assert "vllm serve meta-llama/Llama-2-7b-hf" in commands
    assert "Deploy on vLLM" in (out / "report.html").read_text()
    again = run_cli(capsys, "report", str(out))  # re-rendered from report.json
    assert again.exit_code == 0, again.err
    assert (out / "vllm_commands.sh").read_text() == commands

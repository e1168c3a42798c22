"""A model with sliding-window layers on a policy without vLLM V1's hybrid KV-cache manager:
one `error:` line naming the file, the field and the fix, exit 2 (not a traceback, not a run
that allocates every layer for every token)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import run_cli, tiny_scenario


def gpt_oss_scenario() -> str:
    """The tiny scenario (one vllm-v0 system) on gpt-oss-20b and an H100."""
    text = tiny_scenario("hybrid").replace('preset = "llama-2-7b"', 'preset = "gpt-oss-20b"')
    return text.replace('preset = "a100-80gb"', 'preset = "h100-sxm"')


@pytest.mark.parametrize(
    ("policy", "extra", "needle", "field"),
    [
        ("vllm-v0", "", "only vllm_v1 has the hybrid KV-cache manager", "policy"),
        ("orca", "", "only vllm_v1 has the hybrid KV-cache manager", "policy"),
        (
            "vllm-v1",
            'preemption = "swap"\nswap_space_gib = 1\n',
            "preempts by recompute only",
            "preemption",
        ),
        (
            "vllm-v1",
            'speculative = { method = "ngram", num_speculative_tokens = 2, '
            "acceptance_rate = 0.5 }\n",
            "lookahead slots are laid out for one block table per sequence",
            "speculative",
        ),
        (
            "vllm-v0",
            "hybrid_kv_cache_manager = false\n",
            "the hybrid KV-cache manager is vLLM V1's",
            "hybrid_kv_cache_manager",
        ),
    ],
)
def test_hybrid_models_are_refused_where_they_cannot_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    policy: str,
    extra: str,
    needle: str,
    field: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    text = gpt_oss_scenario()
    text = text.replace('policy = "vllm-v0"\n', f'policy = "{policy}"\n{extra}')
    Path("s.toml").write_text(text)
    result = run_cli(capsys, "run", "s.toml", "--no-report", "--out", "o")
    assert result.exit_code == 2, (result.out, result.err)
    lines = [line for line in result.err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and needle in lines[0] and "s.toml" in lines[0], result.err
    assert f"systems[0].{field}" in lines[0]
    assert "Traceback" not in result.err + result.out


def test_gpt_oss_runs_under_v1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    text = gpt_oss_scenario()
    Path("s.toml").write_text(text.replace('policy = "vllm-v0"', 'policy = "vllm-v1"'))
    result = run_cli(capsys, "run", "s.toml", "--no-report", "--out", "o")
    assert result.exit_code == 0, (result.out, result.err)


def test_qwen3_next_cannot_turn_the_hybrid_manager_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # vLLM refuses to start a model with state layers without its hybrid KV-cache manager.
    monkeypatch.chdir(tmp_path)
    model = 'preset = "qwen3-next-80b-a3b"\ntensor_parallel = 2'
    text = tiny_scenario("hybrid").replace('preset = "llama-2-7b"', model)
    text = text.replace('preset = "a100-80gb"', 'preset = "h200-sxm"')
    text = text.replace('policy = "vllm-v0"', 'policy = "vllm-v1"\nhybrid_kv_cache_manager = false')
    Path("s.toml").write_text(text)
    result = run_cli(capsys, "validate", "s.toml")
    assert result.exit_code == 2, (result.out, result.err)
    (line,) = [line for line in result.err.splitlines() if line.startswith("error:")]
    assert "systems[0].hybrid_kv_cache_manager: false: model 'qwen3-next-80b-a3b' has state" in line
    assert "set it true" in line and "Traceback" not in result.err


def test_with_the_manager_off_a_window_model_speculates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # One block table per sequence (every layer keeps every token): the lookahead slots fit.
    monkeypatch.chdir(tmp_path)
    text = gpt_oss_scenario()
    system = (
        'policy = "vllm-v1"\nhybrid_kv_cache_manager = false\n'
        'speculative = { method = "eagle", num_speculative_tokens = 2, acceptance_rate = 0.5 }'
    )
    Path("s.toml").write_text(text.replace('policy = "vllm-v0"', system))
    result = run_cli(capsys, "run", "s.toml", "--no-report", "--out", "o")
    assert result.exit_code == 0, (result.out, result.err)


def test_the_manager_off_in_defaults_is_refused_for_a_v0_system_beside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    text = tiny_scenario("hybrid").replace(
        "[[systems]]", "[defaults]\nhybrid_kv_cache_manager = false\n[[systems]]", 1
    )
    Path("s.toml").write_text(text + '[[systems]]\nname = "v1"\npolicy = "vllm-v1"\n')
    result = run_cli(capsys, "validate", "s.toml")
    assert result.exit_code == 2, (result.out, result.err)
    (line,) = [line for line in result.err.splitlines() if line.startswith("error:")]
    assert (
        "defaults.hybrid_kv_cache_manager: false: the hybrid KV-cache manager is vLLM V1's" in line
    )
    assert "set it on vllm-v1 systems only" in line

"""A vllm-v1 system's `vllm_version` and `scheduler_reserve_full_isl` in scenario files: what is
accepted, and one exact line for what is not (exit 2 from the CLI)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import run_cli, tiny_scenario
from scenario_helpers import MINIMAL, error_of, write

from pagesim.simulator.core.config import Policy, VllmVersion
from pagesim.simulator.scenario.load import load_scenario

V1 = MINIMAL.replace('policy = "vllm-v0"', 'policy = "vllm-v1"')
VALID = '"0.11", "0.33", "0.34"'


@pytest.mark.parametrize(
    ("value", "version"),
    [
        ('"0.11"', VllmVersion.V0_11),
        ('"0.33.0"', VllmVersion.V0_33),
        ('"v0.34.0"', VllmVersion.V0_34),
    ],
)
def test_a_release_is_read_in_any_of_its_spellings(
    mini: Path, value: str, version: VllmVersion
) -> None:
    path = write(mini.parent, V1.replace('name = "a"', f'name = "a"\nvllm_version = {value}'))
    assert load_scenario(path).systems[0].vllm_version is version


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            'vllm_version = "0.12"',
            f"s.toml: systems[0].vllm_version: unknown vLLM release '0.12'; valid: {VALID}",
        ),
        (
            "vllm_version = 0.34",
            's.toml: systems[0].vllm_version: expected a quoted release such as "0.34", got '
            f"float 0.34; valid: {VALID}",
        ),
        (
            'scheduler_reserve_full_isl = "yes"',
            "s.toml: systems[0].scheduler_reserve_full_isl: expected true or false, got "
            "string 'yes'",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_the_valid_choices(
    mini: Path, line: str, message: str
) -> None:
    path = write(mini.parent, V1.replace('name = "a"', f'name = "a"\n{line}'))
    assert error_of(path) == message


def test_a_v1_knob_on_another_policy_is_refused_but_a_default_is_not(mini: Path) -> None:
    """Set on a vllm-v0 system it would do nothing: refused. From [defaults] it is meant for the
    vllm-v1 systems beside it; the others do not take it."""
    text = MINIMAL.replace('name = "a"', 'name = "a"\nvllm_version = "0.11"')
    assert error_of(write(mini.parent, text)) == (
        "s.toml: systems[0].vllm_version: only used by vllm-v1 (vLLM V1's releases); the policy is "
        "'vllm-v0'"
    )
    text = MINIMAL.replace("block_size = 32", 'block_size = 32\nvllm_version = "0.11"')
    text = text.replace('name = "a"', 'name = "a"\npolicy = "vllm-v1"')
    a, b = load_scenario(write(mini.parent, text)).systems
    assert (a.policy, a.vllm_version) == (Policy.VLLM_V1, VllmVersion.V0_11)
    assert (b.policy, b.vllm_version) == (Policy.ORCA, None)


def test_the_cli_exits_2_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    text = tiny_scenario().replace('policy = "vllm-v0"', 'policy = "vllm-v1"\nvllm_version = "1"')
    (tmp_path / "s.toml").write_text(text)
    result = run_cli(capsys, "run", "s.toml", "--out", "o")
    assert result.exit_code == 2
    errors = [line for line in result.err.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: s.toml: systems[0].vllm_version: unknown vLLM release '1'; valid: {VALID}"
    ]
    assert "Traceback" not in result.err + result.out

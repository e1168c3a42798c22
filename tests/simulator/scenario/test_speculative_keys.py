"""[systems.speculative]: read, written back by describe, refused outside vllm-v1, and every bad
value one `error:` line with exit 2 (through the CLI)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from cli_helpers import refused, run_cli, tiny_scenario

from pagesim.simulator.core.config import SpecMethod
from pagesim.simulator.scenario.load import describe_scenario, load_scenario, parse_scenario

BASE = (
    tiny_scenario("spec")
    .replace('name = "v0"\npolicy = "vllm-v0"', 'name = "v1"\npolicy = "vllm-v1"')
    .replace('preset = "llama-2-7b"', 'preset = "llama-3.1-8b"')  # llama-3-8b's vocabulary
)
# DeepSeek-V3 ships the MTP module method "mtp" drafts with (on 8 H200s its FP8 weights fit).
MTP_BASE = BASE.replace('preset = "llama-3.1-8b"', 'preset = "deepseek-v3"\ntensor_parallel = 8')
MTP_BASE = MTP_BASE.replace('preset = "a100-80gb"', 'preset = "h200-sxm"')


def with_spec(folder: Path, table: str, base: str = BASE) -> Path:
    path = folder / "s.toml"
    path.write_text(base + "[systems.speculative]\n" + table)
    return path


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_each_acceptance_model_reads_and_round_trips_through_describe(here: Path) -> None:
    (here / "acc.csv").write_text("num_accepted,weight\n0,1\n1,1\n2,2\n")
    for table in (
        'method = "eagle"\nnum_speculative_tokens = 3\nacceptance_rate = 0.7\n',
        'method = "eagle"\nnum_speculative_tokens = 2\nacceptance_rates = [0.8, 0.5]\n',
        'method = "ngram"\nnum_speculative_tokens = 2\nacceptance_file = "acc.csv"\n',
        'method = "draft-model"\nnum_speculative_tokens = 4\nacceptance_rate = 0.6\n'
        'draft_model = "llama-3-8b"\n',
    ):
        scenario = load_scenario(with_spec(here, table))
        spec = scenario.systems[0].speculative
        assert spec is not None
        text = describe_scenario(scenario)
        assert parse_scenario(tomllib.loads(text), scenario.source) == scenario
    assert spec.method is SpecMethod.DRAFT_MODEL and spec.draft_model == "llama-3-8b"
    scenario = load_scenario(
        with_spec(
            here, 'method = "ngram"\nnum_speculative_tokens = 2\nacceptance_file = "acc.csv"\n'
        )
    )
    spec = scenario.systems[0].speculative
    assert spec is not None and spec.accepted_pmf() == (0.25, 0.25, 0.5)
    mtp = 'method = "mtp"\nnum_speculative_tokens = 2\nacceptance_rates = [0.8, 0.5]\n'
    scenario = load_scenario(with_spec(here, mtp, MTP_BASE))
    spec = scenario.systems[0].speculative
    assert spec is not None and spec.method is SpecMethod.MTP
    assert parse_scenario(tomllib.loads(describe_scenario(scenario)), scenario.source) == scenario


def test_defaults_speculative_applies_to_every_system(here: Path) -> None:
    text = BASE.replace(
        "[[systems]]",
        '[defaults.speculative]\nmethod = "eagle"\n'
        "num_speculative_tokens = 2\nacceptance_rate = 0.5\n\n[[systems]]",
    )
    path = here / "d.toml"
    path.write_text(text)
    spec = load_scenario(path).systems[0].speculative
    assert spec is not None and spec.num_speculative_tokens == 2


@pytest.mark.parametrize(
    ("table", "needles"),
    [
        (
            'method = "eagle"\nnum_speculative_tokens = 3\nacceptance_rate = 1.5\n',
            ["systems[0].speculative.acceptance_rate", "must be in [0, 1], got 1.5"],
        ),
        (
            'method = "eagle"\nnum_speculative_tokens = 3\nacceptance_rate = -0.1\n',
            ["acceptance_rate", "must be in [0, 1]"],
        ),
        (
            'method = "eagle"\nnum_speculative_tokens = 0\nacceptance_rate = 0.5\n',
            ["num_speculative_tokens", "must be in [1, 64], got 0"],
        ),
        (
            'method = "medusa"\nnum_speculative_tokens = 2\nacceptance_rate = 0.5\n',
            ["speculative.method", "unknown method 'medusa'", "draft-model, eagle, mtp, ngram"],
        ),
        (
            'method = "draft-model"\nnum_speculative_tokens = 2\nacceptance_rate = 0.5\n'
            'draft_model = "llama-9b"\n',
            ["speculative.draft_model", "unknown model 'llama-9b'", "llama-3-8b"],
        ),
        (
            'method = "draft-model"\nnum_speculative_tokens = 2\nacceptance_rate = 0.5\n',
            ["speculative.draft_model", "required by method 'draft-model'"],
        ),
        (
            'method = "eagle"\nnum_speculative_tokens = 2\nacceptance_rate = 0.5\n'
            'draft_model = "llama-3-8b"\n',
            ["draft_model", "only method 'draft-model' reads it"],
        ),
        (
            'method = "eagle"\nnum_speculative_tokens = 2\n',
            ["give exactly one acceptance model", "given: none"],
        ),
        (
            'method = "eagle"\nnum_speculative_tokens = 2\nacceptance_rate = 0.5\n'
            "acceptance_rates = [0.5, 0.4]\n",
            ["give exactly one acceptance model"],
        ),
        (
            'method = "eagle"\nnum_speculative_tokens = 2\nacceptance_rates = [0.5, 0.7]\n',
            ["acceptance_rates", "rate 2 (0.7) exceeds rate 1 (0.5)"],
        ),
        (
            'method = "eagle"\nnum_speculative_tokens = 3\nacceptance_rates = [0.5, 0.4]\n',
            ["acceptance_rates", "expected an array of 3 rates in [0, 1]"],
        ),
        (
            'method = "eagle"\nnum_speculative_tokens = 2\nacceptance_rates = [0.5, 1.2]\n',
            ["acceptance_rates", "rate 2 must be in [0, 1], got 1.2"],
        ),
        (
            'method = "eagle"\nnum_speculative_tokens = 2\nacceptance_file = "no.csv"\n',
            ["acceptance_file", "'no.csv': no such file"],
        ),
        (
            'method = "eagle"\nnum_speculative_tokens = 2\nacceptance_rate = 0.5\nk = 2\n',
            ["speculative.k", "unknown key 'k'"],
        ),
    ],
)
def test_bad_speculative_values_are_one_line_and_exit_2(
    here: Path, capsys: pytest.CaptureFixture[str], table: str, needles: list[str]
) -> None:
    with_spec(here, table)
    refused(run_cli(capsys, "validate", "s.toml"), "s.toml", *needles)


@pytest.mark.parametrize(
    ("csv_text", "needle"),
    [
        ("accepted,weight\n0,1\n", "needs the columns num_accepted,weight"),
        ("num_accepted,weight\n3,1\n", "line 2: num_accepted must be a whole number from 0 to 2"),
        ("num_accepted,weight\n0,x\n", "line 2: weight must be a finite number >= 0, got 'x'"),
        ("num_accepted,weight\n0,-1\n", "weight must be a finite number >= 0"),
        ("num_accepted,weight\n0,0\n", "the weights add up to 0"),
    ],
)
def test_a_bad_acceptance_file_is_one_line_and_exit_2(
    here: Path, capsys: pytest.CaptureFixture[str], csv_text: str, needle: str
) -> None:
    (here / "a.csv").write_text(csv_text)
    with_spec(here, 'method = "eagle"\nnum_speculative_tokens = 2\nacceptance_file = "a.csv"\n')
    refused(run_cli(capsys, "validate", "s.toml"), "acceptance_file", needle)


def test_speculative_decoding_is_refused_outside_vllm_v1(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with_spec(
        here,
        'method = "eagle"\nnum_speculative_tokens = 2\nacceptance_rate = 0.5\n',
        base=tiny_scenario("spec"),
    )
    refused(
        run_cli(capsys, "validate", "s.toml"),
        "systems[0].speculative",
        "modelled for vllm-v1 only",
        "the policy is 'vllm-v0'",
    )


def test_an_acceptance_file_that_is_not_a_readable_csv_is_one_line_and_exit_2(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (here / "folder").mkdir()
    (here / "empty.csv").write_text("")
    (here / "binary.csv").write_bytes(bytes(range(256)))
    for name, needle in (
        ("folder", "'folder': not a regular file"),
        ("empty.csv", "'empty.csv': empty (no header line)"),
        ("binary.csv", "'binary.csv': not a UTF-8 CSV file"),
    ):
        table = f'method = "eagle"\nnum_speculative_tokens = 2\nacceptance_file = "{name}"\n'
        with_spec(here, table)
        refused(run_cli(capsys, "validate", "s.toml"), "acceptance_file", needle)

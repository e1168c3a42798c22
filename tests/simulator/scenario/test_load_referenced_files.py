"""Scenario files: the model configs, traces, length files and profiles a scenario names resolve
against its folder, and their problems get one exact message."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from profile_helpers import synthetic_profile
from scenario_helpers import MINIMAL, error_of, replaced, write

from pagesim.simulator.core.catalog import get_model, load_hf_config
from pagesim.simulator.scenario import load as sc
from pagesim.simulator.scenario.load import load_scenario, parse_scenario


def test_relative_paths_resolve_against_the_scenario_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "deep" / "folder"
    (folder / "model").mkdir(parents=True)
    llama = {
        "model_type": "llama",
        "num_hidden_layers": 2,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "max_position_embeddings": 1024,
    }
    (folder / "model" / "config.json").write_text(json.dumps(llama))
    (folder / "trace.csv").write_text(
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,5\n0.5,20,6\n1.0,30,7\n"
    )
    (folder / "lengths.csv").write_text("tokens\n5\n9\n")
    tiny = load_hf_config(folder / "model" / "config.json")
    (folder / "measured.json").write_text(json.dumps(synthetic_profile(tiny)))
    text = MINIMAL.replace('preset = "llama-2-7b"', 'config = "model/config.json"')
    text = text.replace("num_requests = 10", 'trace = "trace.csv"\nnum_requests = 2')
    text = text.replace('kind = "poisson"\nrate_per_s = 2.0', 'kind = "trace"')
    text = text.replace('kind = "fixed"\nvalue = 64', 'kind = "trace"')
    text = text.replace(
        'kind = "uniform"\nlow = 8\nhigh = 32',
        'kind = "empirical"\npath = "lengths.csv"\ncolumn = "tokens"',
    )
    text += '[execution]\nkind = "profile"\nprofile = "measured.json"\n'
    path = write(folder, text)
    monkeypatch.chdir(tmp_path)  # not the scenario's folder
    scenario = load_scenario(Path("deep/folder/s.toml"))
    assert (scenario.model.num_layers, scenario.model.num_kv_heads) == (2, 2)
    w = scenario.workload
    assert w.trace_path == folder / "trace.csv" and w.trace_name is None
    assert w.output.path == folder / "lengths.csv" and w.output.column == "tokens"
    assert scenario.execution.profile_path == folder / "measured.json"
    assert parse_scenario(tomllib.loads(text), path).workload == w


def test_a_profile_is_found_by_bare_name_in_the_installed_profiles(
    mini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profiles = mini.parent / "installed"
    profiles.mkdir()
    (profiles / "h200.json").write_text(json.dumps(synthetic_profile(get_model("llama-2-7b"))))
    monkeypatch.setattr(sc, "PROFILE_DIR", profiles)
    path = write(mini.parent, MINIMAL + '[execution]\nkind = "profile"\nprofile = "h200.json"\n')
    assert load_scenario(path).execution.profile_path == profiles / "h200.json"
    assert error_of(path, ('execution.profile="h100.json"',)) == (
        "s.toml: execution.profile: no such profile file 'h100.json' (looked for h100.json and "
        "installed/h100.json) (set by override 'execution.profile=\"h100.json\"')"
    )


TRACES = [
    ("", "'t.csv': empty (no header line)"),
    ("arrived_at,num_prefill_tokens,num_decode_tokens\n", "'t.csv' has no rows"),
    (
        "arrived_at,num_prefill_tokens\n0,5\n",
        "'t.csv' has no column 'num_decode_tokens'; it has: arrived_at, num_prefill_tokens",
    ),
    (
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\n1,abc,5\n",
        "'t.csv' column 'num_prefill_tokens': line 3 holds 'abc', "
        "not a whole number of tokens from 1 to 1,000,000,000",
    ),
    (
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\n1,5,0\n",
        "'t.csv' column 'num_decode_tokens': line 3 holds '0', "
        "not a whole number of tokens from 1 to 1,000,000,000",
    ),
    (
        "arrived_at,num_prefill_tokens,num_decode_tokens\n1,5,5\n0.5,5,5\n",
        "'t.csv' column 'arrived_at': line 3 holds '0.5', not a finite time at or after the "
        "previous row's",
    ),
    (
        "arrived_at,num_prefill_tokens,num_decode_tokens\n1,5\n",
        "'t.csv' line 2: 2 fields, the header has 3",
    ),
]


@pytest.mark.parametrize(("csv_text", "problem"), TRACES)
def test_trace_file_problems(mini: Path, csv_text: str, problem: str) -> None:
    (mini.parent / "t.csv").write_text(csv_text)
    text = replaced("num_requests = 10", 'trace = "t.csv"').replace(
        'kind = "poisson"\nrate_per_s = 2.0', 'kind = "trace"'
    )
    assert (
        error_of(write(mini.parent, text, "trace.toml")) == f"trace.toml: workload.trace: {problem}"
    )


def test_trace_rows_are_counted_against_num_requests(mini: Path) -> None:
    (mini.parent / "t.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\n")
    text = replaced('kind = "poisson"\nrate_per_s = 2.0', 'kind = "trace"')
    text = text.replace("num_requests = 10", 'trace = "t.csv"\nnum_requests = 2')
    assert error_of(write(mini.parent, text, "trace.toml")) == (
        "trace.toml: workload.num_requests: 2 requests from row 0 need 2 rows; 't.csv' has 1"
    )


@pytest.mark.parametrize(
    ("config_text", "problem"),
    [
        ("{", "model.config: cfg.json: not valid JSON (line 1): Expecting property name"),
        ("[1]", "model.config: cfg.json: a config.json must hold a JSON object"),
        ('{"num_hidden_layers": 0}', "model.config: cfg.json: field 'num_hidden_layers' must be"),
    ],
)
def test_model_config_problems(mini: Path, config_text: str, problem: str) -> None:
    (mini.parent / "cfg.json").write_text(config_text)
    text = replaced('preset = "llama-2-7b"', 'config = "cfg.json"')
    assert error_of(write(mini.parent, text, "m.toml")).startswith(f"m.toml: {problem}")


def test_model_needs_exactly_one_of_preset_and_config(mini: Path) -> None:
    text = replaced('preset = "llama-2-7b"', 'preset = "llama-2-7b"\nconfig = "c.json"')
    assert error_of(write(mini.parent, text, "m.toml")).startswith(
        "m.toml: model: give exactly one of 'preset' (a catalog model: llama-2-7b, "
    )
    text = replaced('preset = "llama-2-7b"', 'config = "missing.json"')
    assert error_of(write(mini.parent, text, "m.toml")) == (
        "m.toml: model.config: no such model config file 'missing.json'"
    )

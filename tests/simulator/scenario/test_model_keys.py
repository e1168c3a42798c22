"""[model] weight_dtype, data_parallel, expert_parallel and [execution] routing_skew (issue 17):
read, written back by describe, refused with one line when wrong, and through the CLI exit 2."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
from cli_helpers import run_cli

from pagesim.simulator.core.catalog import get_model
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.model_spec import WeightDtype
from pagesim.simulator.execution.factory import make_execution_model
from pagesim.simulator.execution.roofline import RooflineModel
from pagesim.simulator.kv.block_budget import kv_capacity
from pagesim.simulator.scenario.load import load_scenario, parse_scenario
from pagesim.simulator.scenario.toml_writer import describe_scenario

BASE = """
name = "m"
[model]
preset = "qwen3-30b-a3b"
{model}
[gpu]
preset = "h200-sxm"
[execution]
{execution}
[workload]
num_requests = 4
[workload.arrival]
kind = "burst"
[workload.prompt]
kind = "fixed"
value = 32
[workload.output]
kind = "fixed"
value = 4
[[systems]]
name = "v1"
policy = "vllm-v1"
"""


def scenario_file(folder: Path, model: str = "", execution: str = "") -> Path:
    path = folder / "m.toml"
    path.write_text(BASE.format(model=model, execution=execution))
    return path


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_keys_are_read_and_round_trip_through_describe(here: Path) -> None:
    path = scenario_file(
        here,
        'weight_dtype = "fp8"\ndata_parallel = 4\nexpert_parallel = true',
        "routing_skew = 0.5",
    )
    scenario = load_scenario(path)
    assert scenario.model.weight_dtype is WeightDtype.FP8
    assert scenario.model == replace(get_model("qwen3-30b-a3b"), weight_dtype=WeightDtype.FP8)
    assert (scenario.data_parallel, scenario.expert_parallel) == (4, True)
    assert scenario.execution.routing_skew == 0.5
    text = describe_scenario(scenario)
    assert 'weight_dtype = "fp8"' in text and "expert_parallel = true" in text
    assert "preset = " in text  # still a catalog preset, its dtype set beside it
    assert parse_scenario(tomllib.loads(text), scenario.source) == scenario
    # The scenario's layout reaches the execution model and the KV capacity.
    roof = make_execution_model(scenario, scenario.systems[0])
    assert isinstance(roof, RooflineModel)
    assert roof.layout.expert_shards == 4 and roof.experts is not None
    assert roof.experts.skew == 0.5
    plain = load_scenario(scenario_file(here, 'weight_dtype = "fp8"'))
    assert (
        kv_capacity(scenario, scenario.systems[0]).num_gpu_blocks
        > kv_capacity(plain, plain.systems[0]).num_gpu_blocks
    )  # each GPU holds a quarter of the experts


def test_the_default_is_the_models_own_dtype(here: Path) -> None:
    scenario = load_scenario(scenario_file(here))
    assert scenario.model == get_model("qwen3-30b-a3b")
    assert (scenario.data_parallel, scenario.expert_parallel) == (1, False)


@pytest.mark.parametrize(
    ("model", "execution", "message"),
    [
        (
            'weight_dtype = "int3"',
            "",
            "m.toml: model.weight_dtype: unknown weight dtype 'int3'; valid: bf16, fp16, fp8, "
            "int8, int4, mxfp4, nvfp4",
        ),
        (
            "data_parallel = 3\nexpert_parallel = true",
            "",
            "m.toml: model.expert_parallel: 3 GPUs (tensor_parallel x data_parallel) do not "
            "divide qwen3-30b-a3b's 128 routed experts; valid data_parallel with "
            "tensor_parallel 1: 1, 2, 4, 8, 16, 32, 64, 128",
        ),
        (
            "data_parallel = 2",
            "",
            "m.toml: model.data_parallel: 2 without expert_parallel = true: data_parallel here "
            "means DP attention with expert-parallel MoE; independent replicas are [cluster] pools",
        ),
        (
            "expert_parallel = 1",
            "",
            "m.toml: model.expert_parallel: expected true or false, got integer 1",
        ),
        (
            "",
            "routing_skew = -1",
            "m.toml: execution.routing_skew: must be in [0, 100], got -1",
        ),
    ],
)
def test_bad_keys_are_one_line(here: Path, model: str, execution: str, message: str) -> None:
    with pytest.raises(InputError) as info:
        load_scenario(scenario_file(here, model, execution))
    assert str(info.value) == message


def test_expert_parallel_on_a_dense_model(here: Path) -> None:
    path = scenario_file(here, "expert_parallel = true")
    path.write_text(path.read_text().replace("qwen3-30b-a3b", "llama-3.1-8b"))
    with pytest.raises(InputError) as info:
        load_scenario(path)
    assert str(info.value) == (
        "m.toml: model.expert_parallel: llama-3.1-8b has no experts (not a mixture of experts)"
    )


def test_the_cli_refuses_a_bad_layout_with_exit_2(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario_file(here, "data_parallel = 3\nexpert_parallel = true")
    result = run_cli(capsys, "validate", "m.toml")
    assert result.exit_code == 2
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert lines == [
        "error: m.toml: model.expert_parallel: 3 GPUs (tensor_parallel x data_parallel) do not "
        "divide qwen3-30b-a3b's 128 routed experts; valid data_parallel with tensor_parallel 1: "
        "1, 2, 4, 8, 16, 32, 64, 128"
    ]

"""A system's own tensor_parallel, weight_dtype and kv_dtype (scenario/system_overrides.py,
core/deployments.py `system_scenario`): a two-system run whose second system sets them gets
exactly the KV capacity and step costs of a one-system run with [model] set so; bad values and
ambiguous combinations are refused naming the key."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from pagesim.simulator.deploy.commands import deployment
from pagesim.simulator.engine import simulate
from pagesim.simulator.scenario.load import load_scenario
from tests.scenario_helpers import error_of, write

TWO = """
name = "own"
[model]
preset = "llama-2-7b"
[gpu]
preset = "a100-80gb"
[workload]
num_requests = 12
[workload.arrival]
kind = "poisson"
rate_per_s = 4.0
[workload.prompt]
kind = "fixed"
value = 300
[workload.output]
kind = "fixed"
value = 40
[[systems]]
name = "base"
policy = "vllm-v1"
[[systems]]
name = "own"
policy = "vllm-v1"
tensor_parallel = 2
weight_dtype = "fp8"
kv_dtype = "fp8"
"""
AS_MODEL = ("model.tensor_parallel=2", 'model.weight_dtype="fp8"', 'model.kv_dtype="fp8"')


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return write(tmp_path, TWO)


def test_a_system_with_its_own_degree_and_dtypes_runs_as_model_set_so(path: Path) -> None:
    two = load_scenario(path)
    base, own = (simulate(two, s) for s in two.systems)
    one = load_scenario(path, ('systems=[{ name = "own", policy = "vllm-v1" }]', *AS_MODEL))
    alone = simulate(one)
    pd.testing.assert_frame_equal(own.steps, alone.steps)  # every step's cost
    pd.testing.assert_frame_equal(own.requests, alone.requests)
    for key in ("kv_capacity_tokens", "num_kv_blocks", "tpot_p50_s", "ttft_p50_s"):
        assert own.summary[key] == alone.summary[key]
    assert own.summary["num_kv_blocks"] != base.summary["num_kv_blocks"]
    assert own.provenance["tensor_parallel"] == 2 and base.provenance["tensor_parallel"] == 1
    assert (own.provenance["weight_dtype"], own.provenance["kv_dtype"]) == ("fp8", "fp8")
    # systems on unlike GPU counts: compared per GPU
    assert (own.summary["num_gpus"], base.summary["num_gpus"]) == (2, 1)
    assert own.summary["output_tok_s_per_gpu"] == own.summary["throughput_tok_s"] / 2
    assert "num_gpus" not in alone.summary  # one system, on [model]'s GPUs: nothing to compare


def test_the_vllm_command_follows_the_system(path: Path) -> None:
    two = load_scenario(path)
    base, own = (" ".join(deployment(two, s).serve[0].argv) for s in two.systems)
    assert "--tensor-parallel-size 2" in own and "--kv-cache-dtype fp8" in own
    assert "--quantization fp8" in own
    assert "--tensor-parallel-size 1" in base and "fp8" not in base


@pytest.mark.parametrize(
    ("override", "key", "needle"),
    [
        ("systems[1].tensor_parallel=3", "systems[1].tensor_parallel", "valid: 1, 2, 4, 8, 16, 32"),
        ('systems[1].weight_dtype="fp9"', "systems[1].weight_dtype", "valid: bf16, fp16, fp8"),
        ("systems[1].kv_dtype=8", "systems[1].kv_dtype", "one of: fp16, bf16, fp8"),
        (
            'cluster={ pools = [{ name = "p", count = 2 }] }',
            "systems[1].tensor_parallel",
            "each pool sets its degree",
        ),
        ("capacity.max_replicas=2", "systems[1].tensor_parallel", "a capacity search chooses"),
    ],
)
def test_bad_or_ambiguous_values_are_refused(
    path: Path, override: str, key: str, needle: str
) -> None:
    message = error_of(path, (override,))
    assert f"{key}: " in message and needle in message, message

"""Pipelined replicas in a fleet: each replica's pipe runs as its single run would
(cluster/pipeline_loop.py), the fleet counts tensor_parallel x pipeline_parallel GPUs per
replica; prefill/decode pools refuse stages (scenario/deployments.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from pagesim.simulator.cluster.fleet import run_fleet
from pagesim.simulator.core.cluster import ClusterConfig, PoolConfig, RouterConfig, RouterKind
from pagesim.simulator.core.config import Policy
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.engine import simulate
from pagesim.simulator.scenario.load import load_scenario
from tests.scenario_helpers import write
from tests.sim_helpers import explicit_workload, scenario, system

ROWS = [(300, 40, 0.0), (1200, 90, 0.05), (50, 120, 0.1), (700, 7, 0.4), (90, 60, 0.45)] * 2
ROWS = [(p, o, t + 0.9 * (i // 5)) for i, (p, o, t) in enumerate(ROWS)]


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True))


def test_two_pipelined_replicas_are_two_single_pipelined_runs() -> None:
    pipelined = system(Policy.VLLM_V1, pipeline_parallel=2)
    sc = replace(scenario(explicit_workload(ROWS), pipelined), tensor_parallel=2)
    pool = PoolConfig("pool", 2, sc.gpu, sc.tensor_parallel)
    run = run_fleet(sc, ClusterConfig((pool,), RouterConfig(RouterKind.ROUND_ROBIN)), pipelined)
    for i, fleet in enumerate(run.results):  # round-robin: replica i gets requests i, i + 2, ...
        own = ROWS[i::2]
        alone = simulate(replace(scenario(explicit_workload(own), pipelined), tensor_parallel=2))
        _same(fleet.steps, alone.steps)
        ids = ["request_id", "arrival_s"]
        _same(fleet.requests.drop(columns=ids), alone.requests.drop(columns=ids))
        assert fleet.summary["tpot_p50_s"] == alone.summary["tpot_p50_s"]
        assert fleet.summary["num_kv_blocks"] == alone.summary["num_kv_blocks"]
    whole = simulate(replace(sc, cluster=ClusterConfig((pool,))), pipelined)
    assert whole.summary["num_gpus"] == 2 * 2 * 2  # replicas x tensor_parallel x stages
    assert whole.summary["num_finished"] == len(ROWS)


DISAGG = """
name = "pd"
[model]
preset = "llama-2-7b"
[gpu]
preset = "a100-80gb"
[workload]
num_requests = 10
[workload.arrival]
kind = "poisson"
rate_per_s = 2.0
[workload.prompt]
kind = "fixed"
value = 64
[workload.output]
kind = "fixed"
value = 8
[[systems]]
name = "v1"
policy = "vllm-v1"
pipeline_parallel = 2
[cluster.link]
preset = "ib-ndr"
[[cluster.pools]]
name = "p"
count = 1
role = "prefill"
[[cluster.pools]]
name = "d"
count = 1
role = "decode"
"""


def test_pipelined_prefill_decode_pools_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, DISAGG)
    with pytest.raises(InputError) as info:
        load_scenario(path)
    message = str(info.value)
    assert "systems[0].pipeline_parallel" in message
    assert "prefill/decode pools" in message and "cluster pool 'p'" in message

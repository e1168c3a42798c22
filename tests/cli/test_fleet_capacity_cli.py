"""`pagesim capacity` on a scenario with [capacity]: the ranked table and the answer, the folder
it writes, a rerun from the cache, and bad input as one `error:` line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from cli_helpers import run_cli

# Llama-3-8B / A100-80GB at 40 req/s: 4 TP1 or 2 TP2 replicas meet this SLO (worked out in
# tests/simulator/studies/test_fleet_search.py); one router keeps the test short.
FLEET = """
name = "tiny_fleet"
seed = 3
[model]
preset = "llama-3-8b"
[gpu]
preset = "a100-80gb"
[workload]
num_requests = 60
[workload.arrival]
kind = "poisson"
rate_per_s = 40
[workload.prompt]
kind = "uniform"
low = 500
high = 1500
[workload.output]
kind = "uniform"
low = 20
high = 120
[[systems]]
name = "v1"
policy = "vllm-v1"
[slo]
ttft_s = 0.3
tpot_s = 0.04
[capacity]
max_replicas = 5
tensor_parallel = [1, 2]
routers = ["least-outstanding"]
price_per_gpu_hour = { a100-80gb = 2.0 }
"""


def write(tmp_path: Path, text: str = FLEET) -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text(text)
    return path


def test_the_cheapest_fleet_table_answer_and_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario, out = write(tmp_path), tmp_path / "out"
    done = run_cli(capsys, "capacity", str(scenario), "--out", str(out), "--jobs", "1")
    assert done.exit_code == 0, done.err
    lines = done.out.splitlines()
    assert lines[0].split()[:6] == ["#", "system", "GPU", "TP", "router", "replicas"]
    # Both shapes need 4 GPUs at 2.0 per GPU-hour: a tie on GPUs and on cost, kept in order.
    assert lines[1].split()[:7] == ["1", "v1", "a100-80gb", "1", "least-outstanding", "4", "4"]
    assert lines[2].split()[:7] == ["2", "v1", "a100-80gb", "2", "least-outstanding", "2", "4"]
    assert "fewest GPUs: 4 x a100-80gb TP1 = 4 GPUs behind least-outstanding (v1), 8 USD/h" in (
        done.out
    )
    assert "cheapest: the same fleet" in done.out
    ranking = pd.read_csv(out / "capacity.csv")
    assert list(ranking["replicas"]) == [4, 2] and list(ranking["cost_per_hour"]) == [8.0, 8.0]
    saved = json.loads((out / "capacity.json").read_text())
    assert saved["answer"][0].startswith("fewest GPUs: 4 x a100-80gb TP1")
    assert saved["ranking"][1]["num_gpus"] == 4.0
    evaluations = pd.read_csv(out / "evaluations.csv")
    assert set(evaluations["meets_slo"]) == {True, False}
    for name in ("capacity.html", "report.html", "plots/fleet_gpus.png", "plots/replicas.png"):
        assert (out / name).exists(), name
    # The Pareto frontier: every fleet that met the SLO, priced, labelled by shape and size.
    frontier = pd.read_csv(out / "frontier.csv")
    assert len(frontier) == int(evaluations["meets_slo"].sum())
    assert "v1 a100-80gb TP1 least-outstanding x4" in set(frontier["config"])
    assert set(frontier["cost_unit"]) == {"USD per million tokens"}
    assert frontier["on_throughput_frontier"].any() and frontier["on_cost_frontier"].any()
    assert (out / "plots" / "frontier.png").exists()
    assert "Pareto frontier" in (out / "capacity.html").read_text()
    again = run_cli(capsys, "capacity", str(scenario), "--out", str(out), "--jobs", "1")
    assert again.exit_code == 0, again.err
    assert f"0 runs simulated, {len(evaluations)} from the cache" in again.out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--rel-tol", "0.1"],
            "error: --rel-tol: applies to a rate search; fleet.toml has a [capacity] section, so "
            "this is a fleet search over its traffic as given",
        ),
        (
            ["--param", "gpu.preset=h100-sxm"],
            "error: --param gpu.preset: a fleet search sets the GPU, tensor-parallel degree, "
            "router and pool size itself",
        ),
        (
            ["--set", "capacity.routers=['nope']"],
            "capacity.routers: unknown router 'nope'; valid: round-robin, random, "
            "least-outstanding, least-kv, power-of-two, session-affinity, prefix-aware",
        ),
        (
            ["--set", "capacity.price_per_gpu_hour={h100-sxm=2}"],
            "capacity.price_per_gpu_hour.h100-sxm: unknown key 'h100-sxm'; valid keys here: "
            "a100-80gb",
        ),
    ],
)
def test_bad_search_input_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    done = run_cli(capsys, "capacity", str(write(tmp_path)), "--out", str(tmp_path / "o"), *args)
    assert done.exit_code == 2
    assert message in done.err and len(done.err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_two_pools_cannot_be_sized_and_a_trace_without_capacity_says_how(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pools = (
        FLEET
        + '[[cluster.pools]]\nname = "a"\ncount = 1\n[[cluster.pools]]\nname = "b"\ncount = 1\n'
    )
    done = run_cli(capsys, "capacity", str(write(tmp_path, pools)), "--out", str(tmp_path / "o"))
    assert done.exit_code == 2
    assert "capacity: a fleet search sizes one pool of identical replicas, but [cluster] has 2" in (
        done.err
    )
    trace = (
        FLEET.split("[capacity]")[0]
        .replace('kind = "poisson"\nrate_per_s = 40', 'kind = "trace"')
        .replace("num_requests = 60", 'num_requests = 60\ntrace = "azure-conv"')
    )
    trace = trace.replace('kind = "uniform"\nlow = 500\nhigh = 1500', 'kind = "trace"').replace(
        'kind = "uniform"\nlow = 20\nhigh = 120', 'kind = "trace"'
    )
    done = run_cli(capsys, "capacity", str(write(tmp_path, trace)), "--out", str(tmp_path / "o"))
    assert done.exit_code == 2
    assert "or add a [capacity] section to size a fleet for these arrivals as they are" in done.err

"""[capacity]: read into a CapacityConfig, written back by describe_scenario, and every mistake
one line naming the key, what is wrong and what would be valid."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from pagesim.simulator.core.cluster import RouterKind
from pagesim.simulator.core.config import Scenario
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.scenario.load import describe_scenario, load_scenario, parse_scenario

BASE = """
name = "s"
[model]
preset = "llama-3-8b"
[gpu]
preset = "a100-80gb"
[workload]
num_requests = 10
[workload.arrival]
kind = "poisson"
rate_per_s = 1
[workload.prompt]
kind = "fixed"
value = 100
[workload.output]
kind = "fixed"
value = 10
[[systems]]
name = "v1"
policy = "vllm-v1"
[slo]
ttft_s = 1
"""
SEARCH = """[capacity]
max_replicas = 8
gpus = ["a100-80gb", "h100-sxm"]
tensor_parallel = [1, 2]
routers = ["round-robin", "prefix-aware"]
price_per_gpu_hour = { a100-80gb = 1.5, h100-sxm = 2.5 }
"""


def load(tmp_path: Path, text: str, overrides: tuple[str, ...] = ()) -> Scenario:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return load_scenario(path, overrides)


def test_the_section_is_read_and_written_back(tmp_path: Path) -> None:
    scenario = load(tmp_path, BASE + SEARCH)
    capacity = scenario.capacity
    assert capacity is not None
    assert (capacity.min_replicas, capacity.max_replicas) == (1, 8)
    assert [g.name for g in capacity.gpus] == ["a100-80gb", "h100-sxm"]
    assert capacity.tensor_parallel == (1, 2)
    assert capacity.routers == (RouterKind.ROUND_ROBIN, RouterKind.PREFIX_AWARE)
    assert capacity.price_of("h100-sxm") == 2.5 and capacity.price_of("l4") is None
    assert capacity.currency == "USD"
    text = describe_scenario(scenario)
    assert parse_scenario(tomllib.loads(text), scenario.source) == scenario
    assert load(tmp_path, BASE).capacity is None


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("capacity.gpus=['h300']", "capacity.gpus: unknown GPU 'h300'; valid: a100-40gb, "),
        ("capacity.gpus=[]", "capacity.gpus: expected a non-empty array, got array []"),
        ("capacity.tensor_parallel=[3]", "capacity.tensor_parallel: 3 does not divide "),
        (
            "capacity.tensor_parallel=[0]",
            "capacity.tensor_parallel: expected integers in [1, 1024]",
        ),
        ("capacity.routers=['rr']", "capacity.routers: unknown router 'rr'; valid: round-robin"),
        ("capacity.routers=['random','random']", "capacity.routers: 'random' is listed twice"),
        ("capacity.max_replicas=0", "capacity.max_replicas: must be in [1, 4096], got 0"),
        ("capacity.min_replicas=9", "capacity.max_replicas: must be >= min_replicas (9), got 8"),
        (
            "capacity.price_per_gpu_hour={a100-80gb=1}",
            "capacity.price_per_gpu_hour: no price for h100-sxm; give one for every GPU searched "
            "(a100-80gb, h100-sxm), or none to rank by GPUs only",
        ),
        (
            "capacity.price_per_gpu_hour={a100-80gb=1,h100-sxm=0}",
            "capacity.price_per_gpu_hour.h100-sxm: must be in (0, 1000000], got 0",
        ),
        ("capacity.price_per_gpu_hour=3", "capacity.price_per_gpu_hour: expected a table of GPU"),
    ],
)
def test_bad_capacity_values(tmp_path: Path, override: str, message: str) -> None:
    with pytest.raises(InputError) as info:
        load(tmp_path, BASE + SEARCH, (override,))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_prices_default_to_the_pools_gpu_and_two_pools_are_refused(tmp_path: Path) -> None:
    pool = '[[cluster.pools]]\nname = "p"\ncount = 2\ngpu = "h100-sxm"\n'
    text = BASE + pool + "[capacity]\nprice_per_gpu_hour = { h100-sxm = 2.0 }\n"
    capacity = load(tmp_path, text).capacity
    assert capacity is not None and capacity.price_per_gpu_hour == (("h100-sxm", 2.0),)
    with pytest.raises(InputError, match="valid keys here: h100-sxm"):
        load(tmp_path, BASE + pool + "[capacity]\nprice_per_gpu_hour = { a100-80gb = 2.0 }\n")
    two = BASE + pool + pool.replace('"p"', '"q"') + "[capacity]\n"
    with pytest.raises(InputError, match=r"\[cluster\] has 2 pools \(p, q\); keep one"):
        load(tmp_path, two)

"""Small disaggregated fleets built in code for the disaggregation tests."""

from __future__ import annotations

from dataclasses import replace

from pagesim.simulator.cluster.disagg import DisaggRun, run_disagg
from pagesim.simulator.cluster.disagg_result import disagg_result
from pagesim.simulator.core.cluster import ClusterConfig, PoolConfig, PoolRole
from pagesim.simulator.core.config import Policy, Scenario, WorkloadConfig
from pagesim.simulator.core.link import LinkConfig
from pagesim.simulator.metrics.result import RunResult
from tests.sim_helpers import scenario, system


def fleet(
    sc: Scenario,
    num_prefill: int = 1,
    num_decode: int = 1,
    link: LinkConfig | None = None,
    *,
    prefill_tp: int = 1,
    decode_tp: int = 1,
    prefill_system: str | None = None,
    decode_system: str | None = None,
) -> ClusterConfig:
    pools = (
        PoolConfig("p", num_prefill, sc.gpu, prefill_tp, prefill_system, PoolRole.PREFILL),
        PoolConfig("d", num_decode, sc.gpu, decode_tp, decode_system, PoolRole.DECODE),
    )
    return ClusterConfig(pools, link=link or LinkConfig(float("inf")))


def v1_scenario(
    workload: WorkloadConfig, *, max_seq_len: int | None = None, **knobs: object
) -> Scenario:
    """Llama-2-7B on an A100-80GB, vLLM V1 with these knobs (prefix caching as V1's default)."""
    sc = scenario(workload, system(Policy.VLLM_V1, "v1", **knobs))
    if max_seq_len is not None:
        sc = replace(sc, model=replace(sc.model, max_seq_len=max_seq_len))
    return sc


def run(sc: Scenario, cluster: ClusterConfig, *, check: bool = True) -> tuple[DisaggRun, RunResult]:
    """The run (replicas kept, invariants checked after every step) and its result."""
    disagg = run_disagg(sc, cluster, check_invariants=check)
    return disagg, disagg_result(disagg, sc.name, sc.systems[0].name, sc.stop.warmup_s)


def assert_all_blocks_back(disagg: DisaggRun) -> None:
    """Every request ended: no block held, received or used on either side."""
    for replica in [*disagg.prefills, *disagg.decodes]:
        state = replica.paged.state
        assert not state.held and not state.receiving and not state.groups
        assert replica.paged.kv.num_used_blocks == 0
        assert replica.paged.kv.seq_ids() == ()
        replica.paged.check_invariants()

"""Random disaggregated fleets: no block leaks on either side, every request finishes or is
rejected with a reason, the TTFT parts add up (invariants checked after every step)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagesim.simulator.core.cluster import RouterConfig, RouterKind
from pagesim.simulator.core.config import Policy, SpecMethod, SpeculativeConfig
from pagesim.simulator.core.link import LinkConfig
from tests.sim_helpers import explicit_workload, scenario, system
from tests.simulator.cluster.disagg_helpers import assert_all_blocks_back, fleet, run

ROUTERS = [RouterKind.ROUND_ROBIN, RouterKind.LEAST_OUTSTANDING, RouterKind.LEAST_KV]
DRAFTS = [  # vLLM V1 only; both sides alike (scenario/disagg.py refuses model drafts that differ)
    None,
    SpeculativeConfig(SpecMethod.NGRAM, 2, acceptance_rate=0.5),
    SpeculativeConfig(SpecMethod.EAGLE, 3, acceptance_rate=0.7),
]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    requests=st.lists(
        st.tuples(st.integers(1, 200), st.integers(1, 50), st.floats(0, 0.5, allow_nan=False)),
        min_size=1,
        max_size=10,
    ),
    num_prefill=st.integers(1, 3),
    num_decode=st.integers(1, 3),
    prefill_blocks=st.integers(14, 40),
    decode_blocks=st.integers(16, 40),
    policy=st.sampled_from([Policy.VLLM_V1, Policy.VLLM_V0]),
    bandwidth=st.sampled_from([1e8, 1e9, 50e9, float("inf")]),
    latency=st.sampled_from([0.0, 1e-4, 5e-3]),
    layerwise=st.booleans(),
    prefill_router=st.sampled_from(ROUTERS),
    decode_router=st.sampled_from(ROUTERS),
    speculative=st.sampled_from(DRAFTS),
)
def test_random_fleets_conserve_requests_and_blocks(
    requests: list[tuple[int, int, float]],
    num_prefill: int,
    num_decode: int,
    prefill_blocks: int,
    decode_blocks: int,
    policy: Policy,
    bandwidth: float,
    latency: float,
    layerwise: bool,
    prefill_router: RouterKind,
    decode_router: RouterKind,
    speculative: SpeculativeConfig | None,
) -> None:
    # max_seq_len 256: prompt + output <= 250 always fits; a decode replica needs 16 blocks
    # for one request of that length, a prefill replica 13 for the longest prompt.
    arrivals = sorted(requests, key=lambda r: r[2])
    sc = scenario(
        explicit_workload(arrivals),
        system(policy, "p", num_kv_blocks=prefill_blocks, max_num_batched_tokens=256),
        system(policy, "d", num_kv_blocks=decode_blocks, max_num_batched_tokens=256),
    )
    if policy is Policy.VLLM_V1:
        sc = replace(sc, systems=tuple(replace(s, speculative=speculative) for s in sc.systems))
    sc = replace(sc, model=replace(sc.model, max_seq_len=256))
    cluster = replace(
        fleet(
            sc,
            num_prefill,
            num_decode,
            LinkConfig(bandwidth, latency, layerwise),
            prefill_system="p",
            decode_system="d",
        ),
        prefill_router=RouterConfig(prefill_router),
        decode_router=RouterConfig(decode_router),
    )
    disagg, result = run(sc, cluster)
    table = result.requests
    assert len(table) == len(requests)
    done = table["status"] == "finished"
    rejected = table["status"] == "rejected"
    assert (done | rejected).all()
    assert (table.loc[rejected, "rejection_reason"].str.len() > 0).all()
    assert result.summary["num_transfers"] == done.sum()
    parts = table.loc[done, ["ttft_queue_s", "ttft_prefill_s", "ttft_transfer_s"]].sum(axis=1)
    gap = (parts + table.loc[done, "ttft_first_decode_s"] - table.loc[done, "ttft_s"]).abs()
    assert (gap < 1e-9).all()
    # Every preemption is in the step table once, on its side (a prefill replica preempts the
    # request's clone, which the request table does not list).
    steps = result.steps
    on_prefill = steps["replica"].isin([replica.index for replica in disagg.prefills])
    decode_side = steps.loc[~on_prefill, "num_preemptions"].sum()
    assert decode_side == table["num_preemptions"].sum()
    prefill_side = sum(handoff.clone.num_preemptions for handoff in disagg.handoffs.values())
    assert steps.loc[on_prefill, "num_preemptions"].sum() == prefill_side
    assert_all_blocks_back(disagg)

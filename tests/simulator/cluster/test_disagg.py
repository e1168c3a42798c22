"""Disaggregation, exactly: TTFT over a free link, one transfer's time, two transfers sharing a
link, a decode replica without room, conservation of requests and blocks on both sides."""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd
import pytest

from pagesim.simulator.cluster.disagg_result import TTFT_PARTS, link_utilization
from pagesim.simulator.core.config import Policy, Scenario
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.link import LinkConfig
from pagesim.simulator.core.plan import SeqWork, StepPlan
from pagesim.simulator.engine import simulate
from pagesim.simulator.execution.frontend import frontend_of
from tests.sim_helpers import explicit_workload, scenario, system
from tests.simulator.cluster.disagg_helpers import (
    assert_all_blocks_back,
    fleet,
    run,
    v1_scenario,
)

LLAMA2_7B_KV_BYTES_PER_TOKEN = 524_288  # docs/facts.md: 2 x 32 layers x 32 heads x 128 x 2 bytes


def scenario_of(
    requests: list[tuple[int, int, float]], *, prefill_blocks: int, decode_blocks: int
) -> Scenario:
    """Systems "p" and "d" (vLLM V1, these KV blocks, 256-token budget), max_seq_len 256."""
    sc = scenario(
        explicit_workload(requests),
        system(Policy.VLLM_V1, "p", num_kv_blocks=prefill_blocks, max_num_batched_tokens=256),
        system(Policy.VLLM_V1, "d", num_kv_blocks=decode_blocks, max_num_batched_tokens=256),
    )
    return replace(sc, model=replace(sc.model, max_seq_len=256))


def price(replica: object, *work: SeqWork) -> float:
    return replica.execution.price(StepPlan.build(list(work))).duration_s  # type: ignore[attr-defined]


def test_a_free_link_gives_ttft_of_queueing_prefill_step_and_first_decode_step() -> None:
    # Two 512-token prompts at t=0 and a 512-token budget: the prefill replica runs one prompt
    # per step (each step a 512-token prefill and nothing else), so the second queues for
    # exactly one step. Zero latency and infinite bandwidth: the KV lands when the prefill
    # ends. The decode replica then computes the last prompt token (vLLM V1 recomputes it
    # after WAITING_FOR_REMOTE_KVS), which gives the first token.
    sc = v1_scenario(explicit_workload([(512, 4, 0.0), (512, 4, 0.0)]), max_num_batched_tokens=512)
    disagg, result = run(sc, fleet(sc, link=LinkConfig(math.inf, 0.0)))
    prefill, decode = disagg.prefills[0], disagg.decodes[0]
    step_s = price(prefill, SeqWork(0, 0, 512, 512, True))
    first_decode_s = price(decode, SeqWork(0, 0, 1, 512, True))
    a, b = (row for _, row in result.requests.iterrows())
    # A served fleet's front end (execution/frontend.py) is counted in the queue part.
    front = frontend_of(sc.execution, sc.systems[0]).frontend_s
    assert front > 0
    assert a.ttft_queue_s == front and a.ttft_prefill_s == step_s and a.ttft_transfer_s == 0
    assert a.ttft_first_decode_s == pytest.approx(first_decode_s, abs=1e-15)
    assert a.ttft_s == pytest.approx(front + step_s + first_decode_s, abs=1e-15)
    assert b.ttft_queue_s == pytest.approx(front + step_s, abs=1e-15)
    assert b.ttft_prefill_s == pytest.approx(step_s, abs=1e-15)
    assert b.ttft_transfer_s == 0 and b.ttft_first_decode_s >= first_decode_s
    for _, row in result.requests.iterrows():
        assert sum(row[p] for p in TTFT_PARTS) == pytest.approx(row.ttft_s, abs=1e-12)
    assert result.summary["num_transfers"] == 2 and result.summary["num_gpus"] == 2
    assert_all_blocks_back(disagg)


def test_a_transfer_takes_latency_plus_bytes_over_bandwidth() -> None:
    # 100 prompt tokens of Llama-2-7B: 100 x 524,288 = 52,428,800 bytes; at 10 GB/s and 1 ms:
    # 0.001 + 52,428,800 / 1e10 = 0.00624288 s.
    sc = v1_scenario(explicit_workload([(100, 3, 0.0)]))
    link = LinkConfig(10e9, 1e-3)
    disagg, result = run(sc, fleet(sc, link=link))
    row = result.requests.iloc[0]
    assert row.transfer_bytes == 100 * LLAMA2_7B_KV_BYTES_PER_TOKEN == 52_428_800
    assert row.transfer_end_s - row.transfer_start_s == pytest.approx(0.00624288, abs=1e-15)
    assert row.transfer_wait_s == 0 and row.ttft_transfer_s == pytest.approx(0.00624288)
    assert_all_blocks_back(disagg)


def test_two_transfers_on_one_link_take_twice_as_long_as_one() -> None:
    # Both 256-token prompts prefill in one step, so both transfers are ready at once; the one
    # link (the prefill and the decode replica's ports) carries them one after the other.
    # 256 x 524,288 = 134,217,728 bytes at 1 GB/s + 2 ms = 0.136217728 s each.
    sc = v1_scenario(explicit_workload([(256, 2, 0.0), (256, 2, 0.0)]))
    one = 0.002 + 134_217_728 / 1e9
    disagg, result = run(sc, fleet(sc, link=LinkConfig(1e9, 0.002)))
    a, b = (row for _, row in result.requests.iterrows())
    assert a.ttft_transfer_s == pytest.approx(one, abs=1e-12) and a.transfer_wait_s == 0
    assert b.ttft_transfer_s == pytest.approx(2 * one, abs=1e-12)
    assert b.transfer_wait_s == pytest.approx(one, abs=1e-12)
    assert disagg.ports.busy_s == [pytest.approx(2 * one), pytest.approx(2 * one)]
    # Two prefill and two decode replicas, round-robin: two links, the transfers in parallel.
    sc2 = v1_scenario(explicit_workload([(256, 2, 0.0), (256, 2, 0.0)]))
    _, apart = run(sc2, fleet(sc2, 2, 2, LinkConfig(1e9, 0.002)))
    assert list(apart.requests["ttft_transfer_s"]) == [pytest.approx(one)] * 2
    assert list(apart.requests["replica"]) == [2, 3]


def test_tensor_parallel_degrees_set_the_bytes_and_the_lanes() -> None:
    # Decode TP 2 holds 16 of Llama-2-7B's 32 KV heads per GPU: the same bytes in all, over
    # min(1, 2) = 1 lane from a TP-1 prefill replica, 2 lanes between two TP-2 replicas.
    sc = v1_scenario(explicit_workload([(100, 3, 0.0)]))
    link = LinkConfig(10e9, 0.0)
    _, one_lane = run(sc, fleet(sc, link=link, decode_tp=2), check=False)
    _, two_lanes = run(sc, fleet(sc, link=link, prefill_tp=2, decode_tp=2), check=False)
    for result, lanes in ((one_lane, 1), (two_lanes, 2)):
        row = result.requests.iloc[0]
        assert row.transfer_bytes == 52_428_800
        assert row.transfer_end_s - row.transfer_start_s == pytest.approx(52_428_800 / 1e10 / lanes)


def test_a_decode_replica_without_room_keeps_the_request_waiting_with_its_prefill_blocks() -> None:
    # The decode replica has 40 blocks of 16 tokens. A's 400-token prompt takes 25; B's
    # 300-token prompt needs 19 of the 15 left, so B waits (FIFO at that replica, not
    # re-routed) until A finishes and frees its blocks, at the end of that decode step.
    small = system(Policy.VLLM_V1, "small", num_kv_blocks=40)
    sc = v1_scenario(explicit_workload([(400, 100, 0.0), (300, 5, 0.0)]), max_seq_len=512)
    sc = replace(sc, systems=(*sc.systems, small))
    disagg, result = run(sc, fleet(sc, decode_system="small", link=LinkConfig(math.inf)))
    a, b = (row for _, row in result.requests.iterrows())
    assert a.transfer_wait_s == 0 and a.status == b.status == "finished"
    assert b.transfer_start_s == a.finish_s
    front = frontend_of(sc.execution, sc.systems[0]).frontend_s  # in ttft_queue_s, not engine time
    assert b.transfer_wait_s == pytest.approx(
        a.finish_s - (a.arrival_s + a.ttft_queue_s - front + a.ttft_prefill_s)
    )
    assert_all_blocks_back(disagg)


def test_every_request_ends_and_each_side_gives_back_its_blocks() -> None:
    from tests.sim_helpers import poisson_workload

    sc = v1_scenario(poisson_workload(80, 40.0, 300, 60), max_seq_len=1024, num_kv_blocks=200)
    disagg, result = run(sc, fleet(sc, 2, 3, LinkConfig(25e9, 1e-5, layerwise=True)))
    requests = result.requests
    finished = requests["status"] == "finished"
    rejected = requests["status"] == "rejected"
    assert (finished | rejected).all() and len(requests) == 80
    assert (requests.loc[rejected, "rejection_reason"] != "").all()
    assert result.summary["num_transfers"] == finished.sum()
    routed = sum(r.num_routed for r in disagg.decodes)
    assert routed == finished.sum()
    assert_all_blocks_back(disagg)
    series = link_utilization(requests, 5, 0.1)
    busy = series["busy_share"].to_numpy() * 5 * 0.1 / 2
    assert busy.sum() == pytest.approx(sum(disagg.ports.busy_s) / 2)


def test_the_colocated_system_runs_the_same_gpus_as_one_fleet() -> None:
    sc = v1_scenario(explicit_workload([(256, 8, 0.0), (128, 8, 0.01)]))
    sc = replace(sc, systems=(*sc.systems, system(Policy.VLLM_V1, "colocated")))
    cluster = replace(fleet(sc, 1, 2), colocated_systems=("colocated",))
    both = replace(sc, cluster=cluster)
    colocated = simulate(both, both.systems[1])
    assert colocated.summary["num_gpus"] == 3 and "ttft_transfer_mean_s" not in colocated.summary
    disaggregated = simulate(both, both.systems[0])
    assert disaggregated.summary["num_gpus"] == 3 and disaggregated.summary["num_transfers"] == 2


def test_landed_prompts_run_past_a_preempted_request_that_does_not_fit() -> None:
    # Decode replica of 16 blocks. A (49 + 33 tokens) decodes while B's prompt (65 tokens, 5
    # blocks) is received; C's (81 tokens, 6 blocks) is sent after it, over a slow link. A's
    # growth then finds no block and A, alone running, is preempted to the queue's head, which
    # it cannot leave (B holds its blocks). The engine schedules again at once: B, landed,
    # needs no new block and is admitted past A (vLLM's waiting loop would stop at A:
    # policies/remote_kv.py), in the step that counts A's preemption. B finishes; A comes back
    # (its blocks hit in the prefix cache: one token to compute) and finishes before C lands.
    sc = scenario_of(
        [(49, 33, 0.0), (65, 1, 0.0), (81, 1, 0.0)], prefill_blocks=14, decode_blocks=16
    )
    disagg, result = run(sc, fleet(sc, link=LinkConfig(1e8), prefill_system="p", decode_system="d"))
    a, b, c = (row for _, row in result.requests.iterrows())
    assert a.num_preemptions == 1
    assert b.transfer_end_s < b.finish_s < a.finish_s < c.transfer_end_s < c.finish_s
    steps = result.steps[result.steps["replica"] == 1]
    (at,) = (steps["num_preemptions"] > 0).to_numpy().nonzero()[0]
    preempting, after = steps.iloc[at], steps.iloc[at + 1]
    assert preempting["num_prefill_tokens"] == 1  # B's last prompt token
    assert after["start_s"] == b.finish_s and after["num_prefill_tokens"] == 1  # A's one token
    assert (result.requests["status"] == "finished").all()
    assert_all_blocks_back(disagg)


def test_a_preemption_by_a_step_that_runs_nothing_is_counted_by_the_next_step_that_runs() -> None:
    # The story above over a slower link: when A preempts itself, B has not landed yet, so the
    # step scheduled at once runs nothing either and the replica idles until B lands. The
    # preemption goes in the row of the step that admits B then.
    sc = scenario_of(
        [(49, 33, 0.0), (65, 1, 0.0), (81, 1, 0.0)], prefill_blocks=14, decode_blocks=16
    )
    disagg, result = run(sc, fleet(sc, link=LinkConfig(9e7), prefill_system="p", decode_system="d"))
    a, b, _ = (row for _, row in result.requests.iterrows())
    steps = result.steps[result.steps["replica"] == 1]
    preempting = steps[steps["num_preemptions"] > 0]
    assert a.num_preemptions == 1 and len(preempting) == 1
    assert preempting["num_preemptions"].iloc[0] == 1
    # B's last prompt token, in the first step after B landed (steps before it ran back to
    # back while A decoded: the replica idled between them)
    assert preempting["start_s"].iloc[0] == b.transfer_end_s
    assert preempting["num_prefill_tokens"].iloc[0] == 1
    assert_all_blocks_back(disagg)


def test_the_decode_fast_path_changes_nothing() -> None:
    # With invariant checks off, decode replicas advance lone decoders as a group and count
    # the prompts still on the wire in their memory breakdown; the results are the same.
    from tests.sim_helpers import poisson_workload

    sc = v1_scenario(poisson_workload(60, 30.0, 300, 80), max_seq_len=1024, num_kv_blocks=150)
    cluster = fleet(sc, 1, 2, LinkConfig(5e9, 1e-4))
    _, checked = run(sc, cluster, check=True)
    _, fast = run(sc, cluster, check=False)
    assert checked.summary == fast.summary
    pd.testing.assert_frame_equal(checked.requests, fast.requests)


def test_a_decode_replica_that_preempts_its_last_request_schedules_again_at_once() -> None:
    # Found by test_disagg_properties (hypothesis). The decode replica has 22 blocks of 16
    # tokens. Requests 0 (160 + 3) and 1 (182 + 12) arrive together; request 2 (145 + 1) lands
    # later and holds its prompt's 10 blocks while it waits to be admitted. At t ~ 0.346 s
    # request 1, alone running, needs a 13th block with none free: it preempts itself (a
    # recompute, nothing to move). vLLM runs no forward pass for such a step and schedules
    # again at once: request 1 (193 tokens to recompute, 13 blocks) does not fit the 12 free,
    # and the landed request 2 is admitted behind it. The replica used to idle on that empty
    # step and, nothing being due to wake it, stall.
    sc = scenario_of(
        [(160, 3, 0.0), (182, 12, 0.0), (145, 1, 0.25)], prefill_blocks=14, decode_blocks=22
    )
    # Timed as a synchronous engine steps (vLLM v0.11's default): with async scheduling's
    # shorter steps request 1 preempts itself before request 2's KV lands, and the replica then
    # idles until it does, which is right but not this story.
    sc = replace(sc, execution=replace(sc.execution, async_scheduling=False))
    disagg, result = run(
        sc, fleet(sc, link=LinkConfig(1e9, 0.0), prefill_system="p", decode_system="d")
    )
    table = result.requests.set_index("request_id")
    assert (table["status"] == "finished").all()
    assert table["num_preemptions"].tolist() == [0, 1, 0]
    steps = result.steps[result.steps["replica"] == 1]
    preempting = steps[steps["num_preemptions"] > 0]
    assert len(preempting) == 1  # the preemption is counted in the step that follows it
    at = steps.index.get_loc(preempting.index[0])
    before, row = steps.iloc[at - 1], steps.iloc[at]
    # ... which starts as the step in which request 1 last decoded ends, and computes request
    # 2's last prompt token alone (vLLM recomputes it after WAITING_FOR_REMOTE_KVS).
    assert row["start_s"] == before["start_s"] + before["duration_s"]
    assert row["num_prefill_tokens"] == 1 and row["num_decode_tokens"] == 0
    assert table.loc[2, "finish_s"] < table.loc[1, "finish_s"]
    assert result.summary["num_preemptions"] == steps["num_preemptions"].sum() == 1
    assert_all_blocks_back(disagg)


def test_a_window_model_sends_every_layers_kv_with_the_hybrid_manager_off() -> None:
    # gpt-oss-20b, hybrid KV-cache manager off (vLLM's --disable-hybrid-kv-cache-manager, its
    # default with a KV connector before PR #41847): its 12 window layers keep, and send, KV for
    # every prompt token like its 12 full ones: 300 x 24 x 2 x 8 heads x 64 x 2 bytes.
    sc = scenario(
        explicit_workload([(300, 4, 0.0)]),
        system(Policy.VLLM_V1, "off", hybrid_kv_cache_manager=False),
        model="gpt-oss-20b",
        gpu="h100-sxm",
    )
    disagg, result = run(sc, fleet(sc, link=LinkConfig(10e9, 0.0)))
    row = result.requests.iloc[0]
    assert row.status == "finished" and row.transfer_bytes == 300 * 49_152 == 14_745_600
    assert row.transfer_end_s - row.transfer_start_s == pytest.approx(14_745_600 / 10e9)
    assert_all_blocks_back(disagg)


def test_a_fleet_built_in_code_refuses_a_layered_kv_cache() -> None:
    sc = scenario(
        explicit_workload([(300, 4, 0.0)]),
        system(Policy.VLLM_V1, "on"),
        model="gpt-oss-20b",
        gpu="h100-sxm",
    )
    with pytest.raises(InputError, match="set hybrid_kv_cache_manager = false"):
        run(sc, fleet(sc))


def test_a_request_whose_kv_never_left_the_prefill_replica_names_no_decode_replica() -> None:
    """repro2 16: a link so slow that no prompt's KV lands before the stop. Every request was
    routed to a decode replica when its prefill ended, but none got there: requests.csv names
    no decode replica, and the per-replica counts say the same (the prefill replica took all,
    the decode replicas none)."""
    sc = v1_scenario(explicit_workload([(256, 4, 0.0), (256, 4, 0.0), (256, 4, 0.01)]))
    sc = replace(sc, stop=replace(sc.stop, max_time_s=1.0))
    slow = LinkConfig(1e3, 0.0)  # 1 kB/s: a 256-token prompt's 128 MiB take days
    _, result = run(sc, fleet(sc, num_decode=2, link=slow), check=False)
    requests = result.requests
    assert (requests["status"] == "unfinished").all()
    assert requests["replica"].isna().all()
    assert list(requests["prefill_replica"]) == [0, 0, 0]
    assert requests["transfer_end_s"].isna().all()
    counts = [result.summary[f"replica_{i}_num_requests"] for i in range(3)]
    assert counts == [3, 0, 0]
    for i, count in enumerate(counts[1:], start=1):
        assert (requests["replica"] == i).sum() == count

"""Each router, told a small story: what it reads and whom it picks."""

from __future__ import annotations

import numpy as np

from pagesim.simulator.cluster.routers import (
    LeastKV,
    LeastOutstanding,
    LoadBoard,
    PowerOfTwo,
    PrefixAware,
    PrefixIndex,
    RoundRobin,
    SessionAffinity,
)
from pagesim.simulator.core.cluster import RouterConfig, RouterKind
from pagesim.simulator.core.request import Request


def req(request_id: int, prompt_len: int = 64, **fields: object) -> Request:
    return Request(request_id, 0.0, prompt_len, 8, **fields)  # type: ignore[arg-type]


class FakeReplica:
    def __init__(self, kv: float) -> None:
        self.kv = kv

    def kv_used_share(self) -> float:
        return self.kv


def test_round_robin_deals_in_turn_and_counts_in_flight() -> None:
    router = RoundRobin(3)
    assert [router.route(req(i), 0.0) for i in range(5)] == [0, 1, 2, 0, 1]
    assert router.in_flight == [2, 2, 1]
    router.finished(0, req(0))
    assert router.in_flight == [1, 2, 1]


def test_least_outstanding_reads_its_own_counts_ties_to_the_lowest_index() -> None:
    router = LeastOutstanding(3)
    assert [router.route(req(i), 0.0) for i in range(4)] == [0, 1, 2, 0]
    router.finished(1, req(1))
    assert router.route(req(4), 0.0) == 1


def test_least_kv_reads_reports_at_most_report_interval_old() -> None:
    replicas = [FakeReplica(0.5), FakeReplica(0.2)]
    router = LeastKV(2, LoadBoard(replicas, interval_s=1.0))
    assert router.route(req(0), 0.0) == 1
    replicas[1].kv = 0.9  # replica 1 filled up, but the last report is younger than 1 s
    assert router.route(req(1), 0.5) == 1
    assert router.route(req(2), 1.0) == 0  # a new report
    live = LeastKV(2, LoadBoard(replicas, interval_s=0.0))
    assert live.route(req(3), 0.0) == 0


def test_power_of_two_takes_the_less_loaded_of_two_random_replicas() -> None:
    router = PowerOfTwo(4, np.random.default_rng(0))
    router.in_flight = [5, 0, 5, 5]
    picks = [router.choose(req(i), 0.0) for i in range(200)]
    # Replica 1 wins whenever it is drawn (half the pairs of 4 contain it).
    assert 0.4 < picks.count(1) / 200 < 0.6
    router.in_flight = [0, 0, 0, 0]
    assert PowerOfTwo(1, np.random.default_rng(0)).choose(req(0), 0.0) == 0


def test_session_affinity_keeps_a_session_and_moves_few_when_a_replica_joins() -> None:
    four, five = SessionAffinity(4, 160), SessionAffinity(5, 160)
    assert {four.choose(req(i, session_id=7), 0.0) for i in range(20)} == {
        four.choose(req(0, session_id=7), 0.0)
    }
    homes = [four.choose(req(0, session_id=s), 0.0) for s in range(4000)]
    assert min(np.bincount(homes)) > 800  # spread over the four
    moved = sum(
        four.choose(req(0, session_id=s), 0.0) != five.choose(req(0, session_id=s), 0.0)
        for s in range(4000)
    )
    assert 0.1 < moved / 4000 < 0.3  # about 1/5 move (to the new replica), not most
    assert four.choose(req(11), 0.0) == four.choose(req(11, session_id=None), 0.0)


def test_prefix_index_matches_prefixes_and_evicts_keeping_them_closed() -> None:
    index = PrefixIndex(capacity_blocks=3)
    index.insert([1, 2, 3])
    assert index.match([1, 2, 9]) == 2 and index.match([9]) == 0 and index.match([]) == 0
    index.insert([4, 5])  # touched 5 then 4: the oldest, 3 then 2, go
    assert len(index) == 3
    assert index.match([1, 2, 3]) == 1 and index.match([4, 5]) == 2


def shared(request_id: int, group: int, prompt_len: int = 256) -> Request:
    return req(request_id, prompt_len, prefix_group=group, prefix_len=prompt_len - 16)


def test_prefix_aware_follows_the_longest_prefix_while_load_is_balanced() -> None:
    config = RouterConfig(RouterKind.PREFIX_AWARE, balance_abs_threshold=2)
    router = PrefixAware(config, block_tokens=16, capacity_blocks=[1000, 1000, 1000])
    # First of each group: nothing matches, the least loaded gets it.
    assert [router.route(shared(i, g), 0.0) for i, g in enumerate((0, 1, 2))] == [0, 1, 2]
    # Same system prompt (240 of 256 tokens, 93% > cache_threshold 0.5): back where it went.
    assert router.route(shared(3, 1), 0.0) == 1
    assert router.route(shared(4, 1), 0.0) == 1
    assert router.route(shared(5, 1), 0.0) == 1  # in flight [1, 3, 1]: max - min = 2, balanced
    # [1, 4, 1]: max - min = 3 > 2 and 4 > 1.1 x 1: imbalanced, so the least loaded.
    assert router.route(shared(6, 1), 0.0) == 0
    assert router.in_flight == [2, 4, 1]
    router.finished(1, shared(3, 1))  # [2, 3, 1]: balanced again
    # A prompt matching too little (one 16-token block of group 0's, 6% of 256) goes by load.
    little = req(7, 256, prefix_group=0, prefix_len=16)
    assert router.route(little, 0.0) == 2
    assert router.route(shared(8, 0), 0.0) == 0  # group 0's prompt: replica 0 again

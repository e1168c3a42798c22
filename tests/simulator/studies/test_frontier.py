"""Pareto frontiers (simulator/studies/frontier.py): an exact non-dominated set by hand, ties,
missing values, the metrics a frontier table derives, and the two defining properties."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from pagesim.simulator.studies.frontier import (
    COST,
    PER_GPU,
    PER_USER,
    frontier_table,
    non_dominated,
    sweep_frontier_table,
)


def test_the_non_dominated_set_of_hand_made_points() -> None:
    # (x, y), both higher-is-better:
    #   a (1, 9)  b (2, 8)  c (2, 8) tie with b  d (3, 5)  e (2, 5) under d  f (1, 1)
    #   g (3, 4) under d  h (5, 1)  i (4, 1) under h  j (NaN, 99) unknown
    points = np.array(
        [[1, 9], [2, 8], [2, 8], [3, 5], [2, 5], [1, 1], [3, 4], [5, 1], [4, 1], [np.nan, 99]]
    )
    on = non_dominated(points)
    assert [name for name, kept in zip("abcdefghij", on, strict=True) if kept] == [
        "a",
        "b",
        "c",
        "d",
        "h",
    ]


def test_a_point_equal_on_one_axis_and_better_on_the_other_dominates() -> None:
    assert list(non_dominated(np.array([[1.0, 2.0], [1.0, 3.0], [0.0, 3.0]]))) == [
        False,
        True,
        False,
    ]


def test_no_points_and_one_point() -> None:
    assert non_dominated(np.empty((0, 2))).tolist() == []
    assert non_dominated(np.array([[0.0, 0.0]])).tolist() == [True]


def _summary(tok_s: float, gpus: int, tpot_s: float, ttft_s: float, tokens: int) -> dict:
    return {
        "num_gpus": gpus,
        "throughput_tok_s": tok_s,
        "tpot_p50_s": tpot_s,
        "ttft_p99_s": ttft_s,
        "duration_s": 3600.0,
        "num_tokens_served": tokens,
    }


def test_the_table_derives_per_gpu_per_user_and_cost_and_flags_both_frontiers() -> None:
    rows = [
        {"config": "one", **_summary(1000.0, 2, 0.05, 1.0, 2_000_000)},  # 500/GPU, 20/user
        {"config": "two", **_summary(900.0, 1, 0.1, 0.5, 1_000_000)},  # 900/GPU, 10/user
        {"config": "three", **_summary(400.0, 1, 0.1, 3.0, 1_000_000)},  # under "two"
    ]
    table = frontier_table(pd.DataFrame(rows))
    assert list(table[PER_GPU]) == [500.0, 900.0, 400.0]
    assert list(table[PER_USER]) == [20.0, 10.0, 10.0]
    # GPU-hours per million tokens: 2 GPUs x 1 h / 2 M tokens = 1; 1 x 1 / 1 M = 1
    assert list(table[COST]) == [1.0, 1.0, 1.0]
    assert table["cost_unit"].iloc[0] == "GPU-hours per million tokens"
    assert list(table["on_throughput_frontier"]) == [True, True, False]
    # equal cost: the lower p99 TTFT wins alone
    assert list(table["on_cost_frontier"]) == [False, True, False]


def test_prices_make_the_cost_a_currency_only_when_every_row_has_one() -> None:
    rows = [
        {"config": "a", "price_per_gpu_hour": 2.0, **_summary(10.0, 4, 0.1, 1.0, 8_000_000)},
        {"config": "b", "price_per_gpu_hour": 3.0, **_summary(10.0, 1, 0.1, 1.0, 1_000_000)},
    ]
    priced = frontier_table(pd.DataFrame(rows), "EUR")
    assert list(priced[COST]) == [1.0, 3.0]  # 2 x 4 x 1 h / 8 M; 3 x 1 x 1 h / 1 M
    assert priced["cost_unit"].iloc[0] == "EUR per million tokens"
    rows[1]["price_per_gpu_hour"] = None
    unpriced = frontier_table(pd.DataFrame(rows), "EUR")
    assert list(unpriced[COST]) == [0.5, 1.0]
    assert unpriced["cost_unit"].iloc[0] == "GPU-hours per million tokens"


def test_a_configuration_without_tpot_is_on_neither_throughput_frontier_side() -> None:
    rows = [
        {"config": "one-token", **_summary(50.0, 1, math.nan, 0.1, 1000)},
        {"config": "stream", **_summary(10.0, 1, 0.05, 0.2, 1000)},
    ]
    table = frontier_table(pd.DataFrame(rows))
    assert list(table["on_throughput_frontier"]) == [False, True]


def test_a_search_keeps_only_its_sustained_points_each_labelled_by_rate() -> None:
    evaluations = pd.DataFrame(
        [
            {"system": "v1 max_num_seqs=8", "workload.arrival.rate_per_s": 1.0, "sustained": True},
            {"system": "v1 max_num_seqs=8", "workload.arrival.rate_per_s": 2.5, "sustained": False},
            {"system": "v1 max_num_seqs=8", "workload.arrival.rate_per_s": 2.0, "sustained": True},
        ]
    ).assign(**_summary(10.0, 1, 0.1, 1.0, 1000))
    table = sweep_frontier_table(evaluations)
    assert list(table["config"]) == [
        "v1 max_num_seqs=8 rate_per_s=1",
        "v1 max_num_seqs=8 rate_per_s=2",
    ]


_VALUE = st.one_of(st.floats(-100, 100, allow_nan=False), st.just(math.nan))


@given(st.lists(st.tuples(_VALUE, _VALUE), max_size=25))
def test_no_frontier_point_is_dominated_and_every_other_known_point_is(
    pairs: list[tuple[float, float]],
) -> None:
    values = np.array(pairs, dtype=float).reshape(-1, 2)
    on = non_dominated(values)

    def dominates(a: np.ndarray, b: np.ndarray) -> bool:
        return bool((a >= b).all() and (a > b).any())

    known = np.isfinite(values).all(axis=1)
    front = values[on]
    for i, point in enumerate(values):
        if not known[i]:
            assert not on[i]
        elif on[i]:
            assert not any(dominates(other, point) for other in values[known])
        else:  # dominated by a frontier point (dominance is transitive, the set finite)
            assert any(dominates(other, point) for other in front)

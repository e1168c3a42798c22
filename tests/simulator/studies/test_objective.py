"""What a capacity search ranks by (simulator/studies/objective.py): each objective's order,
rows that never met last and rows that cannot run after them, the energy answer in words."""

from __future__ import annotations

import pandas as pd
import pytest

from pagesim.simulator.core.errors import InputError
from pagesim.simulator.studies.objective import (
    check_objective,
    energy_answer,
    order_by,
    with_energy_rank,
)

FLEETS = pd.DataFrame(
    [
        {"config": "a", "num_gpus": 2, "cost_per_hour": 5.0, "energy_per_output_token_j": 0.3},
        {"config": "b", "num_gpus": 4, "cost_per_hour": 4.0, "energy_per_output_token_j": 0.1},
        {"config": "c", "num_gpus": 3, "cost_per_hour": 9.0, "energy_per_output_token_j": 0.2},
        {"config": "never", "num_gpus": None, "cost_per_hour": None},
        {"config": "unfit", "num_gpus": None, "why_not": "cannot run: weights do not fit"},
    ]
).assign(why_not=lambda t: t.get("why_not", pd.Series(dtype=object)).fillna(""))


@pytest.mark.parametrize(
    ("objective", "order"),
    [
        ("gpus", ["a", "c", "b", "never", "unfit"]),
        ("cost", ["b", "a", "c", "never", "unfit"]),
        ("energy", ["b", "c", "a", "never", "unfit"]),
    ],
)
def test_each_fleet_objective_orders_the_fleets_that_met(objective: str, order: list[str]) -> None:
    assert list(order_by(FLEETS, objective, fleet=True)["config"]) == order


def test_a_rate_search_ranks_by_goodput_or_energy() -> None:
    configs = pd.DataFrame(
        [
            {
                "config": "x",
                "goodput_per_gpu": 3.0,
                "max_rate_per_s": 3.0,
                "energy_per_output_token_j": 0.5,
            },
            {
                "config": "y",
                "goodput_per_gpu": 2.0,
                "max_rate_per_s": 2.0,
                "energy_per_output_token_j": 0.25,
            },
        ]
    )
    assert list(order_by(configs, "goodput", fleet=False)["config"]) == ["x", "y"]
    assert list(order_by(configs, "energy", fleet=False)["config"]) == ["y", "x"]


def test_the_energy_answer_names_the_leanest_fleet() -> None:
    by_gpus = with_energy_rank(order_by(FLEETS, "gpus", fleet=True))
    assert list(by_gpus["rank_by_energy"]) == [3, 2, 1, None, None]
    assert energy_answer(by_gpus) == ["least energy per output token: b (0.1 J/token)"]
    leanest_first = with_energy_rank(order_by(FLEETS, "energy", fleet=True))
    assert energy_answer(leanest_first) == [
        "least energy per output token: the same fleet (0.1 J/token)"
    ]


def test_an_objective_the_search_does_not_know_is_refused() -> None:
    assert check_objective(None, fleet=True) == "gpus"
    assert check_objective(None, fleet=False) == "goodput"
    with pytest.raises(
        InputError,
        match=r"--objective: unknown objective 'cost' for a rate "
        r"search; valid: goodput, energy",
    ):
        check_objective("cost", fleet=False)

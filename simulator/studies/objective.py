"""What a capacity search ranks by (`pagesim capacity --objective`).

A rate search ranks its configurations by goodput per GPU (the default) or by energy per
output token at their highest sustained rate; a fleet search (and a disaggregated one) by GPUs
(the default), by cost per hour, or by energy per output token of the fleet that met the SLO.
Energy per output token is the run's `energy_per_output_token_j` (simulator/metrics/energy.py),
lower first. The search itself is the same whatever the objective: only the order of its
ranking, and so which configurations the report details, change. Rows that never met the
criteria stay last, and rows that cannot run the model after them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pagesim.simulator.core.errors import InputError, choices_text

ENERGY = "energy_per_output_token_j"
# objective -> (columns, ascending) of the sort, by search kind
RATE_OBJECTIVES: dict[str, tuple[list[str], list[bool]]] = {
    "goodput": (["goodput_per_gpu", "max_rate_per_s"], [False, False]),
    "energy": ([ENERGY, "goodput_per_gpu"], [True, False]),
}
FLEET_OBJECTIVES: dict[str, tuple[list[str], list[bool]]] = {
    "gpus": (["num_gpus", "cost_per_hour"], [True, True]),
    "cost": (["cost_per_hour", "num_gpus"], [True, True]),
    "energy": ([ENERGY, "num_gpus"], [True, True]),
}
DEFAULT_RATE, DEFAULT_FLEET = "goodput", "gpus"


def check_objective(name: str | None, fleet: bool) -> str:
    """The objective `name` (None: the search's default), or InputError listing the valid
    ones for this kind of search."""
    choices = FLEET_OBJECTIVES if fleet else RATE_OBJECTIVES
    if name is None:
        return DEFAULT_FLEET if fleet else DEFAULT_RATE
    if name not in choices:
        kind = "a fleet search" if fleet else "a rate search"
        raise InputError(
            f"--objective: unknown objective {name!r} for {kind}; valid: {choices_text(choices)}"
        )
    return name


def order_by(ranking: pd.DataFrame, objective: str, fleet: bool) -> pd.DataFrame:
    """The ranking sorted by `objective` (stable; rows missing its first key last, and rows
    that cannot run last of all)."""
    columns, ascending = (FLEET_OBJECTIVES if fleet else RATE_OBJECTIVES)[objective]
    present = [c for c in columns if c in ranking]
    if not present or ranking.empty:
        return ranking
    keyed = ranking.assign(**{f"_{c}": pd.to_numeric(ranking[c], errors="coerce") for c in present})
    cannot = (
        keyed["why_not"].astype(str).str.startswith("cannot run") if "why_not" in keyed else False
    )
    keyed = keyed.assign(_cannot_run=cannot)
    order = keyed.sort_values(
        ["_cannot_run", *(f"_{c}" for c in present)],
        ascending=[True, *(a for c, a in zip(columns, ascending, strict=True) if c in present)],
        na_position="last",
        kind="stable",
    )
    return order.drop(columns=["_cannot_run", *(f"_{c}" for c in present)]).reset_index(drop=True)


def with_energy_rank(ranking: pd.DataFrame) -> pd.DataFrame:
    """The ranking with `rank_by_energy`: 1, 2, ... by energy per output token over the rows
    that have one (ties in the ranking's order), None elsewhere."""
    if ENERGY not in ranking:
        return ranking.assign(rank_by_energy=pd.Series([None] * len(ranking), dtype=object))
    values = pd.to_numeric(ranking[ENERGY], errors="coerce")
    order = values.rank(method="first").to_numpy(dtype=float)
    ranks = [None if np.isnan(r) else int(r) for r in order]
    return ranking.assign(rank_by_energy=pd.Series(ranks, index=ranking.index, dtype=object))


def energy_answer(ranking: pd.DataFrame) -> list[str]:
    """The fleet that spends the least energy per output token, in words (none without
    energy figures); `ranking` has `rank_by_energy` and is ordered as the answer's first line."""
    if "rank_by_energy" not in ranking:
        return []
    ranked = ranking[ranking["rank_by_energy"].notna()]
    if ranked.empty:
        return []
    best = ranked.sort_values("rank_by_energy", kind="stable").iloc[0]
    first = ranking.iloc[0]
    joules = float(best[ENERGY])
    if best["config"] == first["config"]:
        return [f"least energy per output token: the same fleet ({joules:.3g} J/token)"]
    watts = best.get("power_mean_w")
    mean = f", {float(watts):,.0f} W on average" if watts is not None and pd.notna(watts) else ""
    return [f"least energy per output token: {best['config']} ({joules:.3g} J/token{mean})"]

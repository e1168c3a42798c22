"""Which axis won a fleet search, and why, in one sentence derived from the ranking.

The winner is the ranking's first fleet that met the SLO (fewest GPUs, ties cheaper). For every
axis the search varied (GPU, TP, PP, DP, EP, router), its *neighbours* are the shapes equal to
the winner on every other axis (and the same system and --param variant) but for this one (DP's
may differ in EP too: a DP > 1 shape is always expert-parallel); the
sentence says how each neighbour fared: pruned (by which rule), never met the SLO in the range,
or met it with more GPUs (or the same GPUs at a higher cost per hour). E.g.

    TP2 x PP2 wins (2 x TP2 x PP2 on h100-sxm = 8 GPUs): vs TP1, pruned (weights + KV do not
    fit); vs PP1, 12 GPUs (+4); vs EP on, never met the SLO

Nothing is simulated here: the sentence reads the ranking (fleet_ranking.fleet_ranking).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from pagesim.simulator.studies.fleet_ranking import row_layout

# (ranking column, how a value of it reads)
AXES = (
    ("gpu", "{}"),
    ("tensor_parallel", "TP{}"),
    ("pipeline_parallel", "PP{}"),
    ("data_parallel", "DP{}"),
    ("expert_parallel", "EP {}"),
    ("router", "{}"),
)


def _value_text(axis: str, value: object) -> str:
    form = dict(AXES)[axis]
    if axis == "expert_parallel":
        return form.format("on" if bool(value) else "off")
    return form.format(int(value) if isinstance(value, float) else value)


def _is_known(value: object) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _fared(neighbour: pd.Series, winner: pd.Series, currency: str) -> str:
    """How `neighbour` did against `winner`, in words."""
    if _is_known(neighbour.get("pruned_by")):
        return f"pruned ({neighbour['pruned_by']})"
    if not _is_known(neighbour["num_gpus"]):
        alone = " as one DP group" if int(neighbour["data_parallel"]) > 1 else ""
        return f"never met the SLO{alone}"
    extra = int(neighbour["num_gpus"]) - int(winner["num_gpus"])
    if extra:
        return f"{int(neighbour['num_gpus'])} GPUs ({extra:+d})"
    cost, best = neighbour.get("cost_per_hour"), winner.get("cost_per_hour")
    if _is_known(cost) and _is_known(best) and float(cost) > float(best):  # type: ignore[arg-type]
        return f"the same GPUs at {float(cost) - float(best):+.3g} {currency}/h"  # type: ignore[arg-type]
    return "a tie"


def axis_line(ranking: pd.DataFrame, currency: str, same: Sequence[str] = ()) -> str | None:
    """Which axis won and why (the module docstring); `same` names the --param columns a
    neighbour must share with the winner. None when nothing met the SLO or no axis varied."""
    met = ranking[ranking["num_gpus"].notna()]
    varied = [axis for axis, _ in AXES if axis in ranking and ranking[axis].nunique() > 1]
    if met.empty or not varied:
        return None
    winner = met.iloc[0]
    held = ["system", *same, *(axis for axis, _ in AXES if axis in ranking)]
    parts = []
    for axis in varied:
        # a DP > 1 shape is always expert-parallel: DP's neighbours may differ in EP too
        loose = (axis, "expert_parallel") if axis == "data_parallel" else (axis,)
        others = [c for c in held if c not in loose]
        alike = (ranking[others] == winner[others]).all(axis=1)
        for _, neighbour in ranking[alike & (ranking[axis] != winner[axis])].iterrows():
            parts.append(
                f"vs {_value_text(axis, neighbour[axis])}, {_fared(neighbour, winner, currency)}"
            )
    layout = row_layout(winner).text
    size = (
        f"{int(winner['replicas'])} x {layout}"
        if winner["data_parallel"] == 1
        else f"1 DP group of {layout}"
    )
    head = f"{layout} wins ({size} on {winner['gpu']} = {int(winner['num_gpus'])} GPUs)"
    return head + (": " + "; ".join(parts) if parts else ": no shape differs from it by one axis")

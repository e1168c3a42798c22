"""A finished fleet search as tables: the ranking, every evaluation, and the answer in words.

See simulator/studies/fleet_search.py for what is searched, what meeting the SLO means and how
cost is counted. Nothing is simulated here.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from pagesim.simulator.studies.capacity_search import Criteria
from pagesim.simulator.studies.fleet_search import REPLICAS, FleetSearchRun, FleetShape

# Figures of the fleet that met the SLO, copied into the ranking from its run's summary.
_AT_ANSWER = (
    "slo_share",
    "queue_delay_p99_s",
    "ttft_p99_s",
    "tpot_p99_s",
    "goodput_req_s_per_gpu",
    "prefix_hit_rate",
    "load_imbalance",
    "energy_per_output_token_j",  # metrics/energy.py (--objective energy)
    "power_mean_w",
    "power_peak_w",
)


def cost_per_million_tokens(
    price_per_gpu_hour: float | None, summary: dict[str, Any]
) -> float | None:
    """What the fleet of `summary`'s run costs for the run's duration, per million tokens it
    served (prompt + output tokens of the finished requests); None without a price or tokens."""
    tokens, duration = summary.get("num_tokens_served"), summary.get("duration_s")
    if price_per_gpu_hour is None or not tokens or not isinstance(duration, int | float):
        return None
    cost = price_per_gpu_hour * float(summary["num_gpus"]) * float(duration) / 3600.0
    return cost / float(tokens) * 1e6


def _why_not(run: FleetSearchRun, shape: FleetShape, criteria: Criteria) -> str:
    search = run.searches[run.shapes.index(shape)]
    if shape.unfit is not None:
        return f"cannot run: {shape.unfit}"
    if search.ok is None:
        last = run.at(shape, search.bad)
        why = "; ".join(criteria.problems(last.summary)) if last is not None else ""
        tried = f"{search.low}..{search.high}"
        return f"none of {tried} replicas met the SLO (at {search.bad}: {why})"
    if not search.is_monotone:
        return f"non-monotone: {search.bad} replicas failed, {search.ok} met; the answer may be off"
    return ""


def fleet_ranking(run: FleetSearchRun, criteria: Criteria) -> pd.DataFrame:
    """One row per fleet shape, fewest GPUs first (ties: cheaper first; then shapes that never
    met the SLO; last those that cannot run the model), with `rank_by_gpus` and `rank_by_cost`
    (1 = best; empty when none met)."""
    rows = []
    for shape, search in zip(run.shapes, run.searches, strict=True):
        size = search.ok
        record = run.at(shape, size)
        summary = record.summary if record is not None else {}
        num_gpus = None if size is None else size * shape.tensor_parallel
        price = run.settings.price_of(shape.gpu.name)
        rows.append(
            {
                "config": shape.label,
                **shape.axes,
                "system": shape.system.name,
                "gpu": shape.gpu.name,
                "tensor_parallel": shape.tensor_parallel,
                "router": shape.router.value,
                REPLICAS: size,
                "num_gpus": num_gpus,
                "failed_replicas": search.bad,
                "price_per_gpu_hour": price,
                "cost_per_hour": None if price is None or num_gpus is None else price * num_gpus,
                "cost_per_mtok": cost_per_million_tokens(price, summary) if summary else None,
                **{key: summary.get(key) for key in _AT_ANSWER},
                "num_evaluations": search.num_evaluations,
                "why_not": _why_not(run, shape, criteria),
            }
        )
    table = pd.DataFrame(rows)
    for column in ("num_gpus", "cost_per_hour", "cost_per_mtok"):
        table[column] = pd.to_numeric(table[column], errors="coerce")
    table["rank_by_gpus"] = pd.Series(_rank(table, ["num_gpus", "cost_per_hour"]), dtype=object)
    table["rank_by_cost"] = pd.Series(_rank(table, ["cost_per_hour", "num_gpus"]), dtype=object)
    cannot_run = table["why_not"].str.startswith("cannot run")
    order = table.assign(_cannot_run=cannot_run).sort_values(
        ["_cannot_run", "num_gpus", "cost_per_hour"], na_position="last", kind="stable"
    )
    return order.drop(columns="_cannot_run").reset_index(drop=True)


def _rank(table: pd.DataFrame, keys: list[str]) -> list[int | None]:
    """1, 2, ... in the order of `keys` over rows whose first key is known; None elsewhere."""
    known = table[table[keys[0]].notna()].sort_values(keys, na_position="last", kind="stable")
    position = {label: i for i, label in enumerate(table.index)}
    ranks: list[int | None] = [None] * len(table)
    for rank, label in enumerate(known.index, start=1):
        ranks[position[label]] = rank
    return ranks


def fleet_evaluations(run: FleetSearchRun, criteria: Criteria) -> pd.DataFrame:
    """Every simulated (shape, size): shape label as `system`, axes, verdict, summary keys;
    sorted by shape and size."""
    rows = [
        {
            "system": shape.label,
            **record.point.axes,
            "meets_slo": ok,
            "why_not": "; ".join(criteria.problems(record.summary)),
        }
        | record.summary
        for shape, record, ok in run.evaluations
    ]
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    order = {shape.label: i for i, shape in enumerate(run.shapes)}
    table = table.assign(_order=table["system"].map(order))
    return table.sort_values(["_order", REPLICAS], kind="stable").drop(columns="_order")


def _fleet_text(row: pd.Series, currency: str) -> str:
    text = (
        f"{int(row[REPLICAS])} x {row['gpu']} TP{int(row['tensor_parallel'])} = "
        f"{int(row['num_gpus'])} GPUs behind {row['router']} ({row['system']})"
    )
    if isinstance(row["cost_per_hour"], float) and not math.isnan(row["cost_per_hour"]):
        text += f", {row['cost_per_hour']:.4g} {currency}/h"
        if isinstance(row["cost_per_mtok"], float) and not math.isnan(row["cost_per_mtok"]):
            text += f", {row['cost_per_mtok']:.3g} {currency} per million tokens"
    return text


def answer_lines(ranking: pd.DataFrame, currency: str) -> list[str]:
    """The answer in words: the fewest GPUs, and the cheapest when that is another fleet."""
    met = ranking[ranking["num_gpus"].notna()]
    if met.empty:
        return ["no fleet in the range met the SLO; widen [capacity] max_replicas or its axes"]
    fewest = met.iloc[0]
    lines = [f"fewest GPUs: {_fleet_text(fewest, currency)}"]
    cost_ranked = met[met["rank_by_cost"].notna()].sort_values("rank_by_cost")
    if not cost_ranked.empty:
        cheapest = cost_ranked.iloc[0]
        same = cheapest["config"] == fewest["config"]
        lines.append(
            "cheapest: the same fleet" if same else f"cheapest: {_fleet_text(cheapest, currency)}"
        )
    return lines

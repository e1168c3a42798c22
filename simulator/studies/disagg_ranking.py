"""A finished disaggregated fleet search as tables: the ranking, every evaluation, the answer.

See simulator/studies/disagg_search.py for what is searched. Per shape the answer is the
candidate with the fewest GPUs that met the SLO, ties broken by goodput per GPU (higher
first), then cost per hour. Cost per hour = each pool's GPUs x its GPU's price; cost per
million tokens as in fleet_ranking.cost_per_million_tokens. Nothing is simulated here.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from pagesim.simulator.core.cluster import PoolRole
from pagesim.simulator.studies.capacity_search import Criteria
from pagesim.simulator.studies.disagg_search import DECODE, PREFILL, DisaggSearchRun, DisaggShape
from pagesim.simulator.studies.fleet_ranking import _AT_ANSWER, cost_per_million_tokens
from pagesim.simulator.studies.sweep import PointRecord


def _gpu_names(shape: DisaggShape) -> tuple[str, str]:
    pools = {pool.role: pool.gpu.name for pool in shape.cluster.pools}
    return pools[PoolRole.PREFILL], pools[PoolRole.DECODE]


def cost_per_hour(
    run: DisaggSearchRun, shape: DisaggShape, prefill: int, decode: int
) -> float | None:
    """Each pool's GPUs x its GPU's price per GPU-hour; None without prices."""
    gpu_p, gpu_d = _gpu_names(shape)
    price_p, price_d = run.settings.price_of(gpu_p), run.settings.price_of(gpu_d)
    if price_p is None or price_d is None:
        return None
    return prefill * shape.prefill_tp * price_p + decode * shape.decode_tp * price_d


def _best(run: DisaggSearchRun, shape: DisaggShape) -> tuple[PointRecord, int, int] | None:
    met = []
    for record, ok in run.of(shape):
        if ok:
            p, d = int(record.point.axes[PREFILL]), int(record.point.axes[DECODE])  # type: ignore[call-overload]
            goodput = record.summary.get("goodput_req_s_per_gpu")
            cost = cost_per_hour(run, shape, p, d)
            key = (shape.num_gpus(p, d), -(goodput or 0.0), math.inf if cost is None else cost)
            met.append((key, record, p, d))
    if not met:
        return None
    _, record, p, d = min(met, key=lambda m: m[0])
    return record, p, d


def _why_not(run: DisaggSearchRun, shape: DisaggShape, criteria: Criteria) -> str:
    if shape.unfit is not None:
        return f"cannot run: {shape.unfit}"
    judged = run.of(shape)
    if any(ok for _, ok in judged):
        return ""
    if not judged:
        return f"no candidate within max_gpus = {run.settings.max_gpus}"
    share = max(judged, key=lambda j: float(j[0].summary.get("slo_share") or 0.0))[0]
    why = "; ".join(criteria.problems(share.summary))
    axes = share.point.axes
    return (
        f"none of {len(judged)} candidates met the SLO (closest: {axes[PREFILL]}P{axes[DECODE]}D: "
        f"{why})"
    )


def disagg_ranking(run: DisaggSearchRun, criteria: Criteria) -> pd.DataFrame:
    """One row per shape at its answer: fewest GPUs first, then higher goodput per GPU, then
    cheaper; then shapes that never met the SLO; last those that cannot run. `rank_by_gpus`,
    `rank_by_goodput` (goodput per GPU first, ties by GPUs) and `rank_by_cost` (cost per hour
    first, ties by GPUs, then goodput per GPU)."""
    rows = []
    for i, shape in enumerate(run.shapes):
        best = _best(run, shape)
        record, p, d = best if best is not None else (None, None, None)
        summary: dict[str, Any] = record.summary if record is not None else {}
        num_gpus = None if p is None or d is None else shape.num_gpus(p, d)
        cost = None if p is None or d is None else cost_per_hour(run, shape, p, d)
        gpu_p, gpu_d = _gpu_names(shape)
        rows.append(
            {
                "config": shape.label,
                **shape.axes,
                "system": shape.system.name,
                "roles": "colocated" if shape.is_colocated else "disaggregated",
                "gpu": gpu_p if gpu_p == gpu_d else f"{gpu_p}+{gpu_d}",
                "prefill_tensor_parallel": shape.prefill_tp,
                "decode_tensor_parallel": shape.decode_tp,
                PREFILL: p,
                DECODE: d,
                "num_gpus": num_gpus,
                "cost_per_hour": cost,
                "cost_per_mtok": None
                if cost is None or not num_gpus
                else cost_per_million_tokens(cost / num_gpus, summary),
                **{key: summary.get(key) for key in _AT_ANSWER},
                "num_evaluations": len(run.of(shape)),
                "num_dominated": run.num_dominated[i],
                "why_not": _why_not(run, shape, criteria),
            }
        )
    table = pd.DataFrame(rows)
    for column in ("num_gpus", "cost_per_hour", "cost_per_mtok", "goodput_req_s_per_gpu"):
        table[column] = pd.to_numeric(table[column], errors="coerce")
    table["_less_goodput"] = -table["goodput_req_s_per_gpu"]
    by_gpus = ["num_gpus", "_less_goodput", "cost_per_hour"]
    table["rank_by_gpus"] = pd.Series(_rank(table, by_gpus), dtype=object)
    table["rank_by_goodput"] = pd.Series(
        _rank(table, ["_less_goodput", "num_gpus"], known="num_gpus"), dtype=object
    )
    table["rank_by_cost"] = pd.Series(
        _rank(table, ["cost_per_hour", "num_gpus", "_less_goodput"]), dtype=object
    )
    cannot_run = table["why_not"].str.startswith("cannot run")
    order = table.assign(_cannot_run=cannot_run).sort_values(
        ["_cannot_run", *by_gpus], na_position="last", kind="stable"
    )
    return order.drop(columns=["_cannot_run", "_less_goodput"]).reset_index(drop=True)


def _rank(table: pd.DataFrame, keys: list[str], known: str | None = None) -> list[int | None]:
    """1, 2, ... in the order of `keys` over rows where `known` (default the first key) is
    known; None elsewhere."""
    rows = table[table[known or keys[0]].notna()].sort_values(keys, kind="stable")
    position = {label: i for i, label in enumerate(table.index)}
    ranks: list[int | None] = [None] * len(table)
    for rank, label in enumerate(rows.index, start=1):
        ranks[position[label]] = rank
    return ranks


def disagg_evaluations(run: DisaggSearchRun, criteria: Criteria) -> pd.DataFrame:
    """Every candidate judged: shape label as `system`, axes, verdict, summary keys; in the
    order judged (fewest GPUs first)."""
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
    return pd.DataFrame(rows)


def _fleet_text(row: pd.Series, currency: str) -> str:
    p, d = int(row[PREFILL]), int(row[DECODE])
    tp_p, tp_d = int(row["prefill_tensor_parallel"]), int(row["decode_tensor_parallel"])
    gpus = f"{int(row['num_gpus'])} GPUs ({row['system']})"
    if row["roles"] != "colocated":
        fleet = f"{p} prefill x {row['gpu']} TP{tp_p} + {d} decode TP{tp_d}"
    elif tp_p == tp_d:
        fleet = f"{p + d} colocated x {row['gpu']} TP{tp_p}"
    else:
        fleet = f"{p} x {row['gpu']} TP{tp_p} + {d} TP{tp_d}, colocated"
    text = f"{fleet} = {gpus}"
    goodput = row["goodput_req_s_per_gpu"]
    if isinstance(goodput, float) and not math.isnan(goodput):
        text += f", goodput {goodput:.3g} req/s per GPU"
    cost = row["cost_per_hour"]
    if isinstance(cost, float) and not math.isnan(cost):
        text += f", {cost:.4g} {currency}/h"
    return text


def disagg_answer_lines(ranking: pd.DataFrame, currency: str) -> list[str]:
    """The answer in words: the fewest GPUs; the highest goodput per GPU and the cheapest when
    those are other fleets."""
    met = ranking[ranking["num_gpus"].notna()]
    if met.empty:
        return [
            "no fleet within the bounds met the SLO; raise [capacity] max_gpus or max_replicas, "
            "or widen the degrees"
        ]
    fewest = met.iloc[0]
    lines = [f"fewest GPUs: {_fleet_text(fewest, currency)}"]
    for column, name in (("rank_by_goodput", "most goodput per GPU"), ("rank_by_cost", "cheapest")):
        ranked = met[met[column].notna()].sort_values(column)
        if ranked.empty:
            continue
        top = ranked.iloc[0]
        same = top["config"] == fewest["config"]
        lines.append(f"{name}: the same fleet" if same else f"{name}: {_fleet_text(top, currency)}")
    return lines

"""Pareto frontiers of a sweep or a capacity search: the configurations nothing beats on both axes.

A planner chooses on a trade-off, not a ranking. Two pictures, each over the configurations a
study simulated (a sweep's every point; a search's every point that met its criteria, since one
that missed the SLO is not a choice):

- throughput: output tokens/s per GPU (what the fleet earns) against output tokens/s per user
  (how fast each stream reads: 1 / median TPOT), both higher-is-better: the curve InferenceMAX,
  NVIDIA's AIConfigurator and vLLM's benchmark posts draw.
- cost: cost per million tokens against p99 TTFT, both lower-is-better. Cost per million tokens
  is the fleet's price for the run (first arrival to the last finish) over the prompt + output
  tokens of the finished requests (fleet_ranking.cost_per_million_tokens' rule). Without a price
  for every configuration (a sweep has none) it is GPU-hours per million tokens: the same with a
  price of 1 per GPU-hour.

A configuration is on a frontier when no other one is at least as good on both axes and better on
one (`non_dominated`): two configurations with equal values are both on it, and a configuration
missing either value (no TPOT: one-token answers) is on neither and dominates none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

FRONTIER_FILE = "frontier.csv"
PER_GPU = "tokens_per_s_per_gpu"
PER_USER = "tokens_per_s_per_user"
COST = "cost_per_mtok"
TTFT = "ttft_p99_s"
GPU_HOURS = "GPU-hours"  # the cost unit without prices


@dataclass(frozen=True)
class Frontier:
    """One picture: `x` and `y` columns of the frontier table, each maximized or minimized."""

    name: str  # the flag column is on_<name>_frontier
    x: str
    y: str
    maximize_x: bool
    maximize_y: bool

    @property
    def flag(self) -> str:
        return f"on_{self.name}_frontier"


THROUGHPUT = Frontier("throughput", PER_USER, PER_GPU, True, True)
COST_LATENCY = Frontier("cost", TTFT, COST, False, False)
FRONTIERS = (THROUGHPUT, COST_LATENCY)
# What a point needs: the study's summary keys (extra_metrics adds num_gpus and tokens served).
NEEDED = ("num_gpus", "throughput_tok_s", "tpot_p50_s", "ttft_p99_s", "duration_s")


def non_dominated(values: np.ndarray) -> np.ndarray:
    """Mask of the rows of `values` [n, k] (every column higher-is-better) that no other row
    dominates: >= on every column and > on one. Equal rows are all kept; a row with a NaN is
    never kept and dominates nothing."""
    values = np.asarray(values, dtype=float)
    if values.ndim != 2:
        raise ValueError("non_dominated: values must be [n, k]")
    known = np.isfinite(values).all(axis=1)
    keep = np.zeros(len(values), dtype=bool)
    pts = values[known]
    if len(pts):
        at_least = (pts[:, None, :] >= pts[None, :, :]).all(axis=2)  # [i, j]: i >= j everywhere
        better = (pts[:, None, :] > pts[None, :, :]).any(axis=2)
        dominated = (at_least & better).any(axis=0)
        keep[np.flatnonzero(known)] = ~dominated
    return keep


def _oriented(table: pd.DataFrame, frontier: Frontier) -> np.ndarray:
    x = pd.to_numeric(table[frontier.x], errors="coerce").to_numpy(float)
    y = pd.to_numeric(table[frontier.y], errors="coerce").to_numpy(float)
    return np.column_stack((x if frontier.maximize_x else -x, y if frontier.maximize_y else -y))


def _numbers(table: pd.DataFrame, column: str) -> np.ndarray:
    if column not in table:
        return np.full(len(table), np.nan)
    return pd.to_numeric(table[column], errors="coerce").to_numpy(float)


def frontier_table(
    points: pd.DataFrame, currency: str | None = None, keep: Sequence[str] = ()
) -> pd.DataFrame:
    """The frontier table of `points`: one row per configuration, with a `config` label, the
    NEEDED summary keys, `num_tokens_served` and optionally `price_per_gpu_hour` (currency per
    GPU-hour; used only when every row has one). Returns `config`, the `keep` columns (what
    names the configuration), PER_GPU, PER_USER, TTFT, COST and `cost_unit`, each frontier's
    flag, then the figures they come from."""
    table = points.reset_index(drop=True).copy()
    gpus = _numbers(table, "num_gpus")
    with np.errstate(divide="ignore", invalid="ignore"):
        table[PER_GPU] = _numbers(table, "throughput_tok_s") / gpus
        tpot = _numbers(table, "tpot_p50_s")
        table[PER_USER] = np.where(tpot > 0, 1.0 / tpot, np.nan)
        price = _numbers(table, "price_per_gpu_hour")
        priced = len(table) > 0 and bool(np.isfinite(price).all())
        per_hour = price if priced else np.ones(len(table))
        hours = _numbers(table, "duration_s") / 3600.0
        tokens = _numbers(table, "num_tokens_served")
        cost = per_hour * gpus * hours / tokens * 1e6
    table[COST] = np.where(np.isfinite(cost), cost, np.nan)
    unit = currency if priced and currency else GPU_HOURS
    table["cost_unit"] = f"{unit} per million tokens"
    table[TTFT] = _numbers(table, TTFT)
    for frontier in FRONTIERS:
        table[frontier.flag] = non_dominated(_oriented(table, frontier))
    computed = [PER_GPU, PER_USER, TTFT, COST, "cost_unit", *(f.flag for f in FRONTIERS)]
    sources = [*NEEDED, "num_tokens_served", "price_per_gpu_hour"]
    columns = ["config", *keep, *computed, *(c for c in sources if c not in computed)]
    return table.reindex(columns=list(dict.fromkeys(columns)))


def cost_label(table: pd.DataFrame) -> str:
    """The cost axis' words: '<currency> per million tokens' or GPU-hours per million tokens."""
    if "cost_unit" in table and len(table):
        return str(table["cost_unit"].iloc[0])
    return f"{GPU_HOURS} per million tokens"


# --- the configurations of a sweep or a search, as frontier points --------------------------

_VERDICTS = ("sustained", "meets_slo")  # a search's evaluation tables say which points met


def _short(axis: str) -> str:
    return axis.rsplit(".", 1)[-1]


def _as_bool(values: pd.Series) -> pd.Series:
    return values.map(lambda v: str(v).strip().lower() in ("true", "1", "1.0"))


def table_points(table: pd.DataFrame, axes: Sequence[str] | None = None) -> pd.DataFrame:
    """Frontier points of a sweep table or a capacity search's evaluation table (read back from
    CSV too): only the rows that met the search's criteria when it has a verdict column; each
    labelled by its system and the values of `axes` (default: the dotted axis columns) that
    its system label does not already name."""
    rows = table
    for verdict in _VERDICTS:
        if verdict in rows:
            rows = rows[_as_bool(rows[verdict]).to_numpy()]
    if axes is None:
        axes = [str(c) for c in rows.columns if "." in str(c)]
    labels = []
    for _, row in rows.iterrows():
        name = str(row["system"]) if "system" in row else ""
        parts = [name] if name else []
        for axis in axes:
            value = _value_text(row[axis])
            part = f"{_short(axis)}={value}"
            if part not in name:
                parts.append(part)
        labels.append(" ".join(parts))
    return rows.assign(config=labels)


def sweep_frontier_table(table: pd.DataFrame) -> pd.DataFrame:
    """The frontier table of a sweep or rate search's evaluations (`table_points`)."""
    axes = [str(c) for c in table.columns if "." in str(c)]
    keep = (["system"] if "system" in table else []) + axes
    return frontier_table(table_points(table, axes), keep=keep)


def _value_text(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def record_row(label: str, summary: Mapping[str, Any], **extra: object) -> dict[str, object]:
    """One frontier point from a search's record: its label, the NEEDED keys and tokens served
    from `summary`, and `extra` columns (price_per_gpu_hour, the shape's axes)."""
    row: dict[str, object] = {"config": label}
    row |= {key: summary.get(key) for key in (*NEEDED, "num_tokens_served")}
    return row | extra


def has_frontier(table: pd.DataFrame) -> bool:
    """Whether a table can give a frontier picture: the NEEDED columns, two usable rows."""
    if any(key not in table for key in NEEDED) or "system" not in table:
        return False
    usable = table[[*NEEDED]].apply(pd.to_numeric, errors="coerce").notna().all(axis=1)
    return int(usable.sum()) >= 2

"""Held-out honesty: where a fidelity check's prediction came from, and how the scenario's
executed steps sit against the calibration grid of the profile that predicted them.

The profile is calibrated on its own synthetic grid (uniform and skewed decode mixes, token
counts, whole prompts), never on the scenario's steps. `held_out_of` names the grid, the share of
executed steps inside its measured range, and the share that coincide with a grid point.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pagesim.simulator.core.config import Scenario
from pagesim.simulator.metrics.result import RunResult


@dataclass(frozen=True, slots=True)
class HeldOut:
    """Where the prediction came from, and how the scenario's steps sit against its grid."""

    predictor: str  # "profile" | "roofline"
    profile_path: str | None
    calibration: str  # how the profile was made ("calibrate --quick (numpy)", "given", ...)
    grid: dict[str, object]  # the calibration grid's axes (profile only)
    fraction_inside_range: float | None  # executed steps the profile priced without extrapolating
    fraction_on_grid_points: float | None  # executed steps equal to a calibration grid point
    scenario: str  # the scenario run (name, workload, requests)


def held_out_of(
    scenario: Scenario,
    predictor: str,
    profile: Path | None,
    calibration: str,
    steps: pd.DataFrame,
    measured: RunResult,
) -> HeldOut:
    workload = scenario.workload
    source = workload.trace_name or f"{workload.prompt.kind.value} prompts"
    text = (
        f"{scenario.name}: {source}, {int(measured.summary.get('num_requests') or 0)} requests, "
        f"{len(steps)} executed steps, seed {scenario.seed}"
    )
    if predictor != "profile" or profile is None:
        return HeldOut(predictor, None, calibration, {}, None, None, text)
    data = json.loads(Path(profile).read_text())
    grid = _grid_axes(data.get("grid", {}))
    inside = steps["is_inside_range"].dropna() if not steps.empty else pd.Series([], dtype=bool)
    fraction_inside = float(inside.astype(bool).mean()) if len(inside) else None
    on_grid = [_on_grid(row, grid) for row in steps.itertuples(index=False)]
    fraction_on = float(np.mean(on_grid)) if on_grid else None
    return HeldOut(predictor, str(profile), calibration, grid, fraction_inside, fraction_on, text)


def _grid_axes(grid: dict[str, Any]) -> dict[str, object]:
    decode = grid.get("decode", [])
    prefill = grid.get("prefill", [])
    return {
        "decode_num_seqs": sorted({p["num_seqs"] for p in decode}),
        "decode_mean_context": sorted({p["mean_context"] for p in decode}),
        "decode_mixes": sorted({p["mix"] for p in decode}),
        "gemm_tokens": sorted(
            set(grid.get("gemm_tokens", [])) | set(grid.get("gemm_held_out", []))
        ),
        "prefill_seqs_x_len": sorted({(p[0], p[1]) for p in _prefill_points(prefill)}),
    }


def _prefill_points(prefill: list[Any]) -> list[tuple[int, int]]:
    points = []
    for p in prefill:
        if isinstance(p, dict):
            points.append((int(p["num_seqs"]), int(p["prompt_len"])))
        else:
            points.append((int(p[0]), int(p[1])))
    return points


def _on_grid(row: Any, grid: dict[str, Any]) -> bool:
    """The step equals a calibration point: its token count is a GEMM grid point, its decode
    batch a uniform (num_seqs, context) point, its prefill a (prompts, length) point."""
    tokens = row.num_prefill_tokens + row.num_decode_tokens
    if tokens not in grid["gemm_tokens"]:
        return False
    if row.num_decode_seqs:
        n = row.num_decode_seqs
        if n not in grid["decode_num_seqs"] or row.decode_kv_tokens % n:
            return False
        if row.decode_kv_tokens // n not in grid["decode_mean_context"]:
            return False
    if row.num_prefill_seqs:
        n = row.num_prefill_seqs
        if row.num_prefill_tokens % n:
            return False
        length = row.num_prefill_tokens // n
        if (n, length) not in grid["prefill_seqs_x_len"] or row.prefill_sq != n * length**2:
            return False
    return True

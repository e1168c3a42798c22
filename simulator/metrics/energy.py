"""Energy of a run: each replica's GPUs draw by step (simulator/metrics/power.py) while they
compute and their idle floor otherwise, from time 0 to the end of the run.

Per replica of G GPUs (its tensor-parallel degree) over a run that ends at T:

    E = G x ( sum over steps of P(step) x duration + idle_w x (T - busy time) )

P(step) from the step's MFU and MBU, summed over every step as it is recorded (step_log.py's
totals: exact however long the run); a fleet's peak reads the steps tables, whose rows a long
run merges (then its peak is of merged rows' mean draws). Summary keys, a fleet's summed over its
replicas (and `replica_<i>_power_*_w` each):

- energy_j: E; energy_per_output_token_j: E / output tokens produced (every request's,
  unfinished ones' so far); energy_per_request_j: E / finished requests.
- power_mean_w: E / T; power_peak_w: the highest draw at any instant (a fleet's: of the sum
  over its replicas, each at its idle floor between steps).

A GPU without a power profile (a custom [gpu]) gives None for every key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from pagesim.simulator.metrics.power import PowerProfile
from pagesim.simulator.metrics.step_log import StepTotals, compute_shares

ENERGY_KEYS = (
    "energy_j",
    "energy_per_output_token_j",
    "energy_per_request_j",
    "power_mean_w",
    "power_peak_w",
)


@dataclass(frozen=True)
class ReplicaEnergy:
    """One replica's energy and its draw over time: above its floor during each step."""

    num_gpus: int
    end_s: float
    energy_j: float
    floor_w: float  # all its GPUs idle
    peak_w: float  # all its GPUs, at the hungriest step (the floor if it never stepped)
    step_starts_s: np.ndarray = field(repr=False)  # [num_rows]
    step_ends_s: np.ndarray = field(repr=False)
    above_floor_w: np.ndarray = field(repr=False)  # all its GPUs, during each row


def step_watts(steps: pd.DataFrame, profile: PowerProfile) -> np.ndarray:
    """Per-GPU draw of each row of a steps table [num_rows] (W)."""
    share = compute_shares(steps["mfu"].to_numpy(dtype=float), steps["mbu"].to_numpy(dtype=float))
    watts: np.ndarray = profile.decode_w + (profile.prefill_w - profile.decode_w) * share
    return watts


def replica_energy(
    steps: pd.DataFrame,
    profile: PowerProfile,
    num_gpus: int,
    end_s: float,
    totals: StepTotals | None = None,
) -> ReplicaEnergy:
    """A replica's energy over a run that ended at `end_s`: from the totals of every step when
    given (exact however the table's rows merged), else from the steps table; its draw over
    time from the table."""
    durations = steps["duration_s"].to_numpy(dtype=float)
    starts = steps["start_s"].to_numpy(dtype=float)
    watts = step_watts(steps, profile) * num_gpus
    floor = profile.idle_w * num_gpus
    rise = profile.prefill_w - profile.decode_w
    if totals is not None:
        busy_s = totals.busy_s
        busy_j = profile.decode_w * busy_s + rise * totals.compute_share_s
        peak = (profile.decode_w + rise * totals.peak_compute_share) * num_gpus
        peak = peak if totals.num_steps else floor
        busy_j *= num_gpus
    else:
        busy_s = float(durations.sum())
        busy_j = float(watts @ durations)
        peak = float(watts.max()) if len(watts) else floor
    energy = busy_j + floor * max(0.0, end_s - busy_s)
    return ReplicaEnergy(
        num_gpus, end_s, energy, floor, peak, starts, starts + durations, watts - floor
    )


def energy_keys(
    energy_j: float, end_s: float, peak_w: float, requests: pd.DataFrame
) -> dict[str, float | None]:
    """The summary keys (see the module docstring) of `energy_j` spent serving `requests`."""
    tokens = float(requests["num_output_tokens"].to_numpy(dtype=float).sum())
    finished = int((requests["status"].to_numpy() == "finished").sum())
    return {
        "energy_j": energy_j,
        "energy_per_output_token_j": energy_j / tokens if tokens > 0 else None,
        "energy_per_request_j": energy_j / finished if finished else None,
        "power_mean_w": energy_j / end_s if end_s > 0 else None,
        "power_peak_w": peak_w,
    }


def no_energy_keys() -> dict[str, float | None]:
    return dict.fromkeys(ENERGY_KEYS)


def fleet_peak_w(replicas: Sequence[ReplicaEnergy]) -> float:
    """The highest total draw of the replicas at any instant: their floors, plus every step
    running then above its replica's floor (a sweep over step starts and ends)."""
    floor = sum(r.floor_w for r in replicas)
    # Each replica's rows in turn, start then end (rows do not overlap: a run of times sorted
    # but where it steps back, which the sort below takes whole), with their draws' changes.
    times = np.concatenate(
        [np.stack((r.step_starts_s, r.step_ends_s), 1).ravel() for r in replicas]
    )
    if not len(times):
        return floor
    rises = [np.stack((r.above_floor_w, -r.above_floor_w), 1).ravel() for r in replicas]
    deltas = np.concatenate(rises)
    return floor + max(0.0, float(np.cumsum(_by_time(times, deltas)).max()))


def _by_time(times: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    """`deltas` by time and, at one instant, ends before starts (each instant's deltas in
    ascending order): a step that ends as another begins does not overlap it. A stable sort by
    time alone gives that order wherever each instant's deltas already ascend, as a replica's
    end does before its next start (far faster than sorting by both: the replicas' runs are
    sorted already); deltas equal at one instant sum alike in any order."""
    order = np.argsort(times, kind="stable")
    in_order = deltas[order]
    at = times[order]
    if (in_order[1:] < in_order[:-1])[at[1:] == at[:-1]].any():  # an instant out of order
        in_order = deltas[np.lexsort((deltas, times))]
    return in_order


def fleet_energy_keys(
    replicas: Sequence[ReplicaEnergy | None], requests: pd.DataFrame
) -> dict[str, float | None]:
    """A fleet's energy keys, and each replica's mean and peak draw; None throughout when a
    replica's GPU has no power profile."""
    known = [r for r in replicas if r is not None]
    if not known or len(known) < len(replicas):
        keys: dict[str, float | None] = no_energy_keys()
        for i in range(len(replicas)):
            keys[f"replica_{i}_power_mean_w"] = keys[f"replica_{i}_power_peak_w"] = None
        return keys
    total = sum(r.energy_j for r in known)
    end_s = max(r.end_s for r in known)
    keys = energy_keys(total, end_s, fleet_peak_w(known), requests)
    for i, r in enumerate(known):
        keys[f"replica_{i}_power_mean_w"] = r.energy_j / r.end_s if r.end_s > 0 else None
        keys[f"replica_{i}_power_peak_w"] = r.peak_w
    return keys


def measure(
    steps: pd.DataFrame,
    totals: StepTotals,
    profile: PowerProfile | None,
    num_gpus: int,
    end_s: float,
) -> ReplicaEnergy | None:
    """`replica_energy`, or None for a GPU without a power profile."""
    if profile is None:
        return None
    return replica_energy(steps, profile, num_gpus, end_s, totals)


def replica_keys(energy: ReplicaEnergy | None, requests: pd.DataFrame) -> dict[str, float | None]:
    """One replica's summary keys (all None without a power profile)."""
    if energy is None:
        return no_energy_keys()
    return energy_keys(energy.energy_j, energy.end_s, energy.peak_w, requests)

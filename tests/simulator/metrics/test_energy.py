"""Energy (simulator/metrics/energy.py, power.py): a step's draw from what bounds it, a run's
energy as power x time in closed form, a fleet's peak by hand, the published figures pinned,
and bounds that hold for any run."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagesim.simulator.core.catalog import GPUS
from pagesim.simulator.engine import simulate
from pagesim.simulator.metrics.energy import (
    ENERGY_KEYS,
    ReplicaEnergy,
    fleet_peak_w,
    replica_energy,
    step_watts,
)
from pagesim.simulator.metrics.power import PROFILES, PowerProfile, power_profile
from pagesim.simulator.scenario.load import load_scenario

A100 = PROFILES["a100-80gb"]


def test_the_published_draws_and_which_are_estimates() -> None:
    # Splitwise's simulator (configs/power_model/constant.yaml): idle, token, prompt phase (W)
    h100, a100 = PROFILES["h100-sxm"], PROFILES["a100-80gb"]
    assert (h100.idle_w, h100.decode_w, h100.prefill_w, h100.tdp_w) == (75, 380, 700, 700)
    assert (a100.idle_w, a100.decode_w, a100.prefill_w, a100.tdp_w) == (63, 250, 400, 400)
    assert not h100.is_estimate and not a100.is_estimate
    # the rest: the same shares of their own datasheet TDP, marked as estimates
    l4 = PROFILES["l4"]
    assert l4.tdp_w == 72 and l4.is_estimate and l4.source.startswith("estimate:")
    assert l4.decode_w == pytest.approx(380 / 700 * 72, abs=0.05)
    mi355x = PROFILES["mi355x"]  # AMD's 1,400 W board power x the H100's shares
    assert (mi355x.idle_w, mi355x.decode_w) == pytest.approx((150.0, 760.0), abs=0.05)
    assert mi355x.prefill_w == 1400 and mi355x.is_estimate
    # every catalog GPU has one but the B300, whose power no primary source gives
    assert set(PROFILES) == set(GPUS) - {"b300"}
    assert power_profile("my-gpu") is None


def test_a_step_draws_between_its_two_phases_by_its_compute_share() -> None:
    steps = pd.DataFrame({"mfu": [0.0, 0.5, 0.2, 0.0], "mbu": [0.8, 0.0, 0.2, 0.0]})
    # memory-bound: token phase; compute-bound: prompt phase; half and half: the midpoint;
    # nothing measured (no FLOPs, no bytes): the token phase's floor of a busy GPU
    assert list(step_watts(steps, A100)) == [250.0, 400.0, 325.0, 250.0]


def test_energy_is_power_times_time_on_a_fixed_batch_by_hand() -> None:
    # Two steps on 2 GPUs in a 10 s run: 1 s compute-bound (400 W each), 3 s memory-bound
    # (250 W each), 6 s idle (63 W each).
    steps = pd.DataFrame(
        {"start_s": [0.0, 1.0], "duration_s": [1.0, 3.0], "mfu": [0.6, 0.0], "mbu": [0.0, 0.7]}
    )
    energy = replica_energy(steps, A100, num_gpus=2, end_s=10.0)
    assert energy.energy_j == 2 * (400 * 1 + 250 * 3 + 63 * 6)  # 3,056 J
    assert energy.peak_w == 800.0 and energy.floor_w == 126.0


def test_a_fleets_peak_adds_the_steps_running_together_and_every_floor() -> None:
    one = pd.DataFrame(
        {"start_s": [0.0, 2.0], "duration_s": [2.0, 1.0], "mfu": [1.0, 0.0], "mbu": [0.0, 1.0]}
    )
    two = pd.DataFrame({"start_s": [1.0], "duration_s": [0.5], "mfu": [1.0], "mbu": [0.0]})
    three = pd.DataFrame({"start_s": [2.0], "duration_s": [1.0], "mfu": [1.0], "mbu": [0.0]})
    a, b, c = (replica_energy(s, A100, 1, 4.0) for s in (one, two, three))
    # at 1.0-1.5 s: one (400) + two (400) + three idle (63) = 863; at 2-3 s: 250 + 63 + 400
    assert fleet_peak_w([a, b, c]) == 863.0
    # a step that ends as another starts does not overlap it: one's first ends at 2.0
    assert fleet_peak_w([a, c]) == 650.0  # 250 + 400 at 2-3 s, not 400 + 400


@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(1, 4)), max_size=6),
        min_size=1,
        max_size=4,
    )
)
def test_a_fleets_peak_sums_its_sweep_in_the_order_of_time_then_draw(
    fleets: list[list[tuple[int, int, int]]],
) -> None:
    # Rows on a coarse grid (gaps and lengths of 0-2 quarter seconds), so that replicas' starts
    # and ends tie, draws in thirds (sums that round): the peak is the sweep's sorted by time
    # and, at one instant, by draw, to the last bit, whichever order `fleet_peak_w` finds it in.
    replicas = []
    for rows in fleets:
        starts, ends, watts, at = [], [], [], 0.0
        for gap, length, thirds in rows:
            starts.append(at + gap / 4)
            ends.append(at + (gap + length) / 4)
            watts.append(thirds / 3)
            at = ends[-1]
        s, e, w = (np.array(v, dtype=float) for v in (starts, ends, watts))
        replicas.append(ReplicaEnergy(1, 9.0, 0.0, 1 / 3, 1.0, s, e, w))
    times = np.concatenate([np.concatenate((r.step_starts_s, r.step_ends_s)) for r in replicas])
    deltas = np.concatenate([np.concatenate((r.above_floor_w, -r.above_floor_w)) for r in replicas])
    floor = sum(r.floor_w for r in replicas)
    swept = np.cumsum(deltas[np.lexsort((deltas, times))])
    expected = floor + max(0.0, float(swept.max())) if len(times) else floor
    assert fleet_peak_w(replicas) == expected


TINY = """
name = "fixed_batch"
seed = 0
[model]
preset = "llama-3-8b"
[gpu]
preset = "a100-80gb"
[workload]
num_requests = 8
[workload.arrival]
kind = "burst"
[workload.prompt]
kind = "fixed"
value = 512
[workload.output]
kind = "fixed"
value = 64
[[systems]]
name = "v1"
policy = "vllm-v1"
"""


def test_a_runs_summary_holds_its_steps_energy_and_tensor_parallel_counts_every_gpu(
    tmp_path: Path,
) -> None:
    path = tmp_path / "batch.toml"
    path.write_text(TINY)
    scenario = load_scenario(path)
    result = simulate(scenario)
    steps, summary = result.steps, result.summary
    by_hand = 0.0
    for _, row in steps.iterrows():
        share = row["mfu"] / (row["mfu"] + row["mbu"])
        by_hand += (250 + 150 * share) * row["duration_s"]
    by_hand += 63 * (summary["duration_s"] - steps["duration_s"].sum())
    assert summary["energy_j"] == pytest.approx(by_hand, rel=1e-9)
    assert summary["energy_per_output_token_j"] == pytest.approx(by_hand / (8 * 64), rel=1e-9)
    assert summary["energy_per_request_j"] == pytest.approx(by_hand / 8, rel=1e-9)
    assert summary["power_mean_w"] == pytest.approx(by_hand / summary["duration_s"], rel=1e-9)
    assert 250 <= summary["power_peak_w"] <= 400
    assert result.provenance["power_model"]["gpu"] == "a100-80gb"
    tp2 = simulate(replace(scenario, tensor_parallel=2))
    per_gpu = tp2.summary["energy_j"] / 2
    assert 63 * tp2.summary["duration_s"] <= per_gpu <= 400 * tp2.summary["duration_s"]


def test_a_gpu_without_a_power_profile_reports_no_energy(tmp_path: Path) -> None:
    path = tmp_path / "custom.toml"
    custom = '[gpu]\nname = "my-gpu"\nmemory_gib = 80\nmem_bandwidth_gbps = 2000\nfp16_tflops = 300'
    path.write_text(TINY.replace('[gpu]\npreset = "a100-80gb"', custom))
    result = simulate(load_scenario(path))
    assert all(result.summary[key] is None for key in ENERGY_KEYS)
    assert result.provenance["power_model"] == "no power profile"


_SHARE = st.floats(0, 1)


@given(
    st.lists(st.tuples(st.floats(0.001, 2), _SHARE, _SHARE), min_size=1, max_size=20),
    st.floats(0, 30),
    st.integers(1, 8),
)
def test_energy_lies_between_the_idle_floor_and_full_draw_over_the_run(
    rows: list[tuple[float, float, float]], idle_s: float, gpus: int
) -> None:
    durations = np.array([r[0] for r in rows])
    steps = pd.DataFrame(
        {
            "start_s": np.concatenate(([0.0], np.cumsum(durations)[:-1])),
            "duration_s": durations,
            "mfu": [r[1] for r in rows],
            "mbu": [r[2] for r in rows],
        }
    )
    end_s = float(durations.sum()) + idle_s
    profile: PowerProfile = PROFILES["h100-sxm"]
    energy = replica_energy(steps, profile, gpus, end_s)
    busy = float(durations.sum())
    low = gpus * (profile.idle_w * idle_s + profile.decode_w * busy)
    high = gpus * (profile.idle_w * idle_s + profile.prefill_w * busy)
    assert low - 1e-6 <= energy.energy_j <= high + 1e-6
    assert energy.floor_w <= energy.peak_w <= gpus * profile.tdp_w
    assert math.isclose(fleet_peak_w([energy]), energy.peak_w, rel_tol=1e-9, abs_tol=1e-9)

"""Parallel, resumable sweeps: 24 points on a process pool and on Ray, resume after a kill,
one table row per point and system, cache keys that follow the resolved scenario only."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from pagesim.simulator.core.config import Scenario, SystemConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.scenario.load import BUILTIN_DIR, expand_sweep, load_scenario
from pagesim.simulator.studies.executors import (
    ProcessExecutor,
    SerialExecutor,
    SweepError,
    make_executor,
)
from pagesim.simulator.studies.point_cache import CACHE_DIR, PointCache
from pagesim.simulator.studies.points import (
    Point,
    PointOutcome,
    PointTask,
    _code_digest,
    evaluate_point,
    make_points,
    point_key,
)
from pagesim.simulator.studies.sweep import PointRecord, plan_sweep, run_points, run_sweep

ABLATION = "block_size_ablation"  # one system; tiny with 8 requests (~0.1 s a point)
TINY = ["workload.num_requests=8"]
AXES = ["systems.block_size=8,16,32,64", "workload.arrival.rate_per_s=1,2,4,8,16,32"]
NUM_POINTS = 24


def _cached_keys(out: Path) -> set[str]:
    return {p.stem for p in (out / CACHE_DIR).glob("*.json")}


@pytest.fixture(scope="module")
def points() -> list[Point]:
    found = plan_sweep(ABLATION, TINY, AXES)
    assert len(found) == NUM_POINTS
    return found


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessExecutor]:
    executor = ProcessExecutor(2)
    yield executor
    executor.close()


@pytest.fixture(scope="module")
def local_table(
    points: list[Point], pool: ProcessExecutor, tmp_path_factory: pytest.TempPathFactory
) -> pd.DataFrame:
    out = tmp_path_factory.mktemp("local")
    done = run_sweep(points, out, pool)
    assert done.points.num_computed == NUM_POINTS and done.points.num_cached == 0
    assert len(_cached_keys(out)) == NUM_POINTS
    return done.table


def test_24_points_on_a_process_pool_merge_into_one_row_each(local_table: pd.DataFrame) -> None:
    assert len(local_table) == NUM_POINTS
    axes = ["systems.block_size", "workload.arrival.rate_per_s"]
    assert list(local_table.columns[:3]) == [*axes, "system"]
    assert not local_table.duplicated([*axes, "system"]).any()
    assert (local_table["num_finished"] == 8).all()
    assert {"slo_share", "queue_delay_p99_s", "num_gpus"} <= set(local_table.columns)


def test_a_point_does_not_depend_on_its_worker_or_order(
    points: list[Point], local_table: pd.DataFrame
) -> None:
    picked = [points[5], points[17], points[0]]  # a different order, in this process
    run = run_points(picked, SerialExecutor())
    for record in run.records:
        row = local_table[
            (local_table["systems.block_size"] == record.point.axes["systems.block_size"])
            & (
                local_table["workload.arrival.rate_per_s"]
                == record.point.axes["workload.arrival.rate_per_s"]
            )
        ]
        assert row["e2e_mean_s"].item() == record.summary["e2e_mean_s"]
        assert row["num_steps"].item() == record.summary["num_steps"]


def test_interrupted_sweep_resumes_with_only_the_missing_points(
    points: list[Point], pool: ProcessExecutor, tmp_path: Path
) -> None:
    seen: list[str] = []

    def stop_after_ten(record: PointRecord) -> None:
        seen.append(record.point.key)
        if len(seen) == 10:
            raise KeyboardInterrupt  # as if Ctrl-C arrived after the tenth point

    with pytest.raises(KeyboardInterrupt):
        run_sweep(points, tmp_path, pool, on_record=stop_after_ten)
    cached = _cached_keys(tmp_path)
    assert cached == set(seen)
    again = run_sweep(points, tmp_path, pool)
    assert again.points.num_cached == 10
    assert again.points.num_computed == NUM_POINTS - 10
    assert len(again.table) == NUM_POINTS
    third = run_sweep(points, tmp_path, pool)
    assert third.points.num_computed == 0  # the report's frames were cached the second time


def test_a_killed_sweep_command_resumes_where_it_stopped(
    points: list[Point], pool: ProcessExecutor, tmp_path: Path
) -> None:
    out = tmp_path / "killed"
    args = ["--set", TINY[0], *(a for axis in AXES for a in ("--param", axis))]
    code = "from pagesim.cli import main; main()"
    command = [sys.executable, "-c", code, "sweep", ABLATION, "--out", str(out), "--jobs", "2"]
    process = subprocess.Popen(
        [*command, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: the kill takes its workers too
    )
    deadline = time.monotonic() + 60
    try:
        while len(_cached_keys(out)) < 6 and process.poll() is None:
            assert time.monotonic() < deadline, "the sweep wrote no cache entries in 60 s"
            time.sleep(0.05)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    cached = _cached_keys(out)
    assert 6 <= len(cached) < NUM_POINTS
    # Keys cover the simulator's source: read it now, as the killed process did moments ago.
    _code_digest.cache_clear()
    points = plan_sweep(ABLATION, TINY, AXES)
    resumed = run_sweep(points, out, pool)
    assert resumed.points.num_cached == len(cached)
    assert resumed.points.num_computed == NUM_POINTS - len(cached)
    assert _cached_keys(out) == {p.key for p in points}


def test_cache_key_follows_the_resolved_scenario_and_nothing_else(tmp_path: Path) -> None:
    base = load_scenario(ABLATION, TINY)
    system = base.systems[0]
    key = point_key(base, system)
    assert key == point_key(load_scenario(ABLATION, TINY), system)
    # Same point reached another way: a renamed copy without comments, a different sweep.
    copy = tmp_path / "renamed.toml"
    copy.write_text(
        "\n".join(
            line
            for line in (BUILTIN_DIR / f"{ABLATION}.toml").read_text().splitlines()
            if not line.startswith("#")
        )
    )
    assert point_key(load_scenario(copy, TINY), system) == key
    in_sweep = dict(
        (tuple(axes.values()), variant)
        for axes, variant in expand_sweep(ABLATION, TINY, params=["systems.block_size=16,64"])
    )
    assert point_key(in_sweep[(16,)], in_sweep[(16,)].systems[0]) == key
    assert point_key(in_sweep[(64,)], in_sweep[(64,)].systems[0]) != key
    # A default spelled out changes nothing; any resolved value that differs changes the key.
    spelled = load_scenario(ABLATION, [*TINY, "systems.max_num_seqs=256"])
    assert point_key(spelled, spelled.systems[0]) == key
    for override in ("seed=1", "systems.max_num_seqs=64", "workload.num_requests=9"):
        changed = load_scenario(ABLATION, [*TINY, override])
        assert point_key(changed, changed.systems[0]) != key, override


def test_a_bad_point_is_one_clear_input_error_and_the_rest_is_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pagesim.simulator.engine

    real = pagesim.simulator.engine.simulate

    def simulate(
        scenario: Scenario, system: SystemConfig | None = None, **kwargs: Any
    ) -> RunResult:
        if scenario.systems[0].block_size == 32:
            raise InputError("system 'vllm': no KV memory left (a test stand-in)")
        return real(scenario, system, **kwargs)

    monkeypatch.setattr(pagesim.simulator.engine, "simulate", simulate)
    points = plan_sweep(ABLATION, TINY, ["systems.block_size=16,32,64"])
    cache = PointCache(tmp_path)
    with pytest.raises(InputError) as caught:
        run_points(points, SerialExecutor(), cache=cache)
    message = str(caught.value)
    assert "1 sweep point(s) failed" in message and "systems.block_size=32" in message
    assert "no KV memory left" in message and "\n" not in message
    assert len(list(tmp_path.glob("*.json"))) == 2


def _crash_at_block_32(task: PointTask) -> PointOutcome:
    if task.system.block_size == 32:
        os._exit(3)  # a segfault or the OOM killer, as the pool sees it
    return evaluate_point(task)


def test_a_dead_worker_fails_the_sweep_without_hanging(tmp_path: Path) -> None:
    points = plan_sweep(ABLATION, TINY, ["systems.block_size=16,32,64,128"])
    executor = ProcessExecutor(2)
    start = time.monotonic()
    try:
        with pytest.raises(SweepError, match="worker process died"):
            run_points(points, executor, cache=PointCache(tmp_path), evaluate=_crash_at_block_32)
    finally:
        executor.close()
    assert time.monotonic() - start < 60


def test_bad_executor_options_are_input_errors() -> None:
    with pytest.raises(InputError, match="valid: local, ray"):
        make_executor("dask")
    with pytest.raises(InputError, match="--jobs"):
        make_executor("local", jobs=0)
    with pytest.raises(InputError, match="--address"):
        make_executor("local", address="auto")
    assert isinstance(make_executor("local", jobs=1), SerialExecutor)


def test_24_points_through_a_local_ray(
    points: list[Point], local_table: pd.DataFrame, tmp_path: Path
) -> None:
    pytest.importorskip("ray", reason="ray is not installed (pip install 'pagesim[ray]')")
    executor = make_executor("ray", jobs=2)  # starts a local Ray with 2 CPUs, no dashboard
    try:
        done = run_sweep(points, tmp_path, executor)
    finally:
        executor.close()
    assert done.points.num_computed == NUM_POINTS
    pd.testing.assert_frame_equal(done.table, local_table)  # same numbers on any worker
    shutil.rmtree(tmp_path / CACHE_DIR)


def test_make_points_pairs_every_variant_with_every_system() -> None:
    variants = expand_sweep("textbook_static_vs_continuous", params=["systems.max_num_seqs=2,4,8"])
    made = make_points(variants)
    assert [(p.axes["systems.max_num_seqs"], p.system.name) for p in made] == [
        (n, s) for n in (2, 4, 8) for s in ("static", "continuous")
    ]
    assert len({p.key for p in made}) == 6


def test_staging_a_kill_leaves_is_never_an_entry_and_is_swept_once_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CI once killed the sweep between an entry's write and its rename: the staging file then
    # matched `*.json` and was counted as a cached point that no run could read back.
    import pagesim.simulator.studies.point_cache as point_cache

    def killed(src: str, dst: str) -> None:
        raise KeyboardInterrupt  # the kill, between the staging write and the rename

    cache = PointCache(tmp_path / CACHE_DIR)
    points = plan_sweep(ABLATION, TINY, ["systems.block_size=16,32"])
    run_points(points[:1], SerialExecutor(), cache=cache)
    (entry,) = _cached_keys(tmp_path)
    with monkeypatch.context() as patch:
        patch.setattr(point_cache.os, "replace", killed)
        with pytest.raises(KeyboardInterrupt):
            run_points(points[1:], SerialExecutor(), cache=cache)
    (stale,) = (p for p in cache.folder.iterdir() if p.name.startswith("."))
    assert _cached_keys(tmp_path) == {entry}, stale.name
    fresh = cache.folder / ".point-l1ve.tmp"  # another live sweep's, mid-write
    fresh.write_text("{")
    cache.prepare()
    assert stale.exists()  # too young to be litter: it could be a live sweep's
    hour_ago = time.time() - 3601
    os.utime(stale, (hour_ago, hour_ago))
    cache.prepare()
    assert not stale.exists() and fresh.exists()
    resumed = run_points(points, SerialExecutor(), cache=cache)
    assert (resumed.num_cached, resumed.num_computed) == (1, 1)
    assert [p.name for p in cache.folder.iterdir() if p.name.startswith(".")] == [fresh.name]

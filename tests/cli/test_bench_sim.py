"""`pagesim bench sim` and `bench report` tell the truth: CPU time and its ratio first, wall time
only as its runs' range beside the machine's load, a verdict only where every pair agrees and
the sides do not overlap (simulator/studies/bench_spread.py, pagesim/console_bench.py).

The logic is tested with made-up timings (no test here asserts a speed); a few small real runs
check that the commands work end to end.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_helpers import MAKES_GIT_WORKTREES, run_cli

from pagesim import console_bench
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.scenario.load import load_scenario
from pagesim.simulator.studies import bench, bench_compare
from pagesim.simulator.studies.bench_compare import Comparison, Sitting
from pagesim.simulator.studies.bench_spread import (
    Runs,
    SpeedRatio,
    Spread,
    Verdict,
    median,
    times_text,
)
from pagesim.simulator.studies.timing import BenchSpec, TimedRun


def timed(cpu_s: float, wall_s: float | None = None, **summary: float) -> TimedRun:
    """A made-up run: 1,000 requests, 2 M tokens, 50,000 steps, 100 MiB."""
    return TimedRun(
        wall_s=2 * cpu_s if wall_s is None else wall_s,
        cpu_s=cpu_s,
        num_requests=1000,
        num_tokens=2e6,
        num_steps=50_000,
        peak_rss_mib=100.0,
        summary={"duration_s": 3600.0, "num_requests": 1000, **summary},
    )


def ratio(before_cpu_s: tuple[float, ...], after_cpu_s: tuple[float, ...]) -> SpeedRatio:
    return SpeedRatio(
        Runs(tuple(timed(s) for s in before_cpu_s)), Runs(tuple(timed(s) for s in after_cpu_s))
    )


def test_a_spread_keeps_the_runs_and_gives_best_median_and_range() -> None:
    spread = Spread((3.0, 1.0, 2.0, 5.0))
    assert (spread.best_s, spread.worst_s, spread.median_s) == (1.0, 5.0, 2.5)
    assert spread.range_text() == "1.00-5.00"
    assert Spread((4.2,)).range_text() == "4.20 (1 run)"
    assert median([3.0, 1.0, 2.0]) == 2.0
    with pytest.raises(ValueError):
        median([])


def test_the_best_run_is_the_least_cpu_time_not_the_least_wall_time() -> None:
    runs = Runs((timed(2.0, wall_s=3.0), timed(1.5, wall_s=9.0)))
    assert runs.best.cpu_s == 1.5
    assert runs.wall.values_s == (3.0, 9.0)  # in run order
    with pytest.raises(ValueError):
        Runs(())


@pytest.mark.parametrize(
    ("before", "after", "verdict"),
    [
        ((4.0, 4.2, 4.1), (2.0, 2.1, 2.05), Verdict.FASTER),
        ((2.0, 2.1), (4.0, 4.2), Verdict.SLOWER),
        # every pair faster, but the sides overlap (after's worst 4.5 > before's best 4.0)
        ((4.0, 5.0), (3.0, 4.5), Verdict.WITHIN_NOISE),
        ((4.0, 4.0), (3.9, 4.1), Verdict.WITHIN_NOISE),  # the pairs disagree
        ((4.0,), (2.0,), Verdict.ONE_PAIR),
    ],
)
def test_a_verdict_needs_every_pair_to_agree_and_the_sides_apart(
    before: tuple[float, ...], after: tuple[float, ...], verdict: Verdict
) -> None:
    assert ratio(before, after).verdict is verdict


def test_ratios_are_before_over_after_by_best_run_and_by_pair() -> None:
    speed = ratio((4.0, 6.0, 5.0), (2.0, 2.0, 4.0))
    assert speed.cpu_ratio == 2.0  # 4.0 / 2.0, the best runs
    assert speed.paired_cpu_ratios == [2.0, 3.0, 1.25]
    assert speed.median_paired_cpu_ratio == 2.0
    assert times_text(2.0) == "2.00x faster" and times_text(0.5) == "2.00x slower"
    assert times_text(1.004) == "1.00x"


@pytest.fixture
def two_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)


@pytest.mark.usefixtures("two_cpus")
def test_a_comparison_leads_with_cpu_and_shows_wall_only_as_a_range() -> None:
    # Issue 29's sitting: the same code "1.43x faster" by wall time, 0.96x by CPU time.
    before = Runs((timed(10.0, wall_s=14.3), timed(10.2, wall_s=20.0), timed(10.1, wall_s=15.0)))
    after = Runs((timed(10.4, wall_s=10.0), timed(10.3, wall_s=12.0), timed(10.0, wall_s=14.0)))
    comparison = Comparison(SpeedRatio(before, after), "main", BenchSpec(), (7.3, 7.9, 7.5, 7.6))
    lines = console_bench.comparison_lines(comparison)
    assert lines == [
        "azure-conv, vllm-v1: main (before) vs this tree (after), 3 alternating runs each, one "
        "process per run",
        "CPU time: no difference beyond the noise (best runs 10.00 s -> 10.00 s, 1.00x; "
        "back-to-back pairs before/after 0.96x, 0.99x, 1.01x; the sides' runs overlap or the "
        "pairs disagree)",
        "        CPU s   CPU s runs  wall s runs  req/CPU s  tok/CPU s  steps/CPU s  RSS MiB",
        "before  10.00  10.00-10.20  14.30-20.00        100    200,000        5,000      100",
        "after   10.00  10.00-10.40  10.00-14.00        100    200,000        5,000      100",
        "wall time swings with the machine's load (1-minute load average 7.3-7.9 on 2 CPUs; "
        "back-to-back pairs' wall ratios 1.07x-1.67x, median 1.43x): CPU time is the measure",
        "peak RSS after/before x1.00; summaries agree (rel 1e-9)",
    ]


@pytest.mark.usefixtures("two_cpus")
def test_a_clear_ratio_is_claimed_and_differing_answers_are_named() -> None:
    before = Runs((timed(40.0), timed(42.0)))
    after = Runs((timed(20.0, ttft_p50_s=0.5), timed(21.0, ttft_p50_s=0.5)))
    lines = console_bench.comparison_lines(Comparison(SpeedRatio(before, after), "v1", BenchSpec()))
    assert lines[1] == (
        "CPU time: this tree 2.00x faster (best runs 40.00 s -> 20.00 s; every back-to-back pair "
        "agrees, before/after 2.00x, 2.00x, median 2.00x)"
    )
    assert "load average unknown" in lines[-2]
    assert (
        lines[-1]
        == "peak RSS after/before x1.00; summaries differ in 1 keys: ttft_p50_s (only after)"
    )
    one = console_bench.comparison_lines(Comparison(ratio((3.0,), (2.0,)), "v1", BenchSpec()))
    assert one[1] == (
        "CPU time: this tree 1.50x faster (best runs 3.00 s -> 2.00 s; one pair: --repeat 3 shows "
        "the noise)"
    )


@pytest.mark.usefixtures("two_cpus")
def test_one_tree_alone_prints_cpu_then_the_wall_range() -> None:
    spec = BenchSpec(scenario_file="bench.toml", overrides=("seed=3",), system="v0")
    sitting = Sitting(spec, Runs((timed(4.0, wall_s=9.0), timed(5.0, wall_s=7.0))), (6.0, 6.0))
    assert console_bench.sitting_lines(sitting) == [
        "bench.toml --set seed=3, system v0: 1000 requests, simulated 3600 s, 50,000 steps; "
        "2 runs, one process each",
        "           CPU s  CPU s runs  wall s runs  req/CPU s  tok/CPU s  steps/CPU s  RSS MiB",
        "this tree   4.00   4.00-5.00    7.00-9.00        250    500,000       12,500      100",
        "wall time swings with the machine's load (1-minute load average 6.0 on 2 CPUs): CPU "
        "time is the measure",
    ]


def test_the_vidur_benchmarks_ship_with_their_trace() -> None:
    # Package data (pyproject), no file outside the package: Vidur's case C, request for request.
    assert bench.benchmark_names() == ["vidur_case_c/sarathi", "vidur_case_c/vllm_v0"]
    for name, policy, budget in (("vllm_v0", "vllm-v0", 4096), ("sarathi", "vllm-v1", 512)):
        path = bench.benchmark_path(f"vidur_case_c/{name}")
        assert path == bench.BENCHMARK_DIR / "vidur_case_c" / f"{name}.toml"
        scenario = load_scenario(path)
        (system,) = scenario.systems
        assert (system.policy.value, system.max_num_batched_tokens) == (policy, budget)
        assert (system.max_num_seqs, system.num_kv_blocks, system.block_size) == (128, 3328, 16)
        assert scenario.cluster is not None and scenario.cluster.pools[0].count == 8
        assert scenario.model.name == "llama-2-70b" and scenario.tensor_parallel == 2
        trace = scenario.workload.trace_path
        assert trace is not None and trace.parent == path.parent
    rows = (bench.BENCHMARK_DIR / "vidur_case_c" / "requests.csv").read_text().splitlines()
    assert rows[0] == "arrived_at,num_prefill_tokens,num_decode_tokens" and len(rows) == 19_367


@pytest.fixture
def fake_sittings(monkeypatch: pytest.MonkeyPatch) -> list[tuple[BenchSpec, int]]:
    """`time_this_tree` replaced: records what it was asked and returns made-up runs."""
    asked: list[tuple[BenchSpec, int]] = []

    def fake(spec: BenchSpec, num_repeats: int) -> Sitting:
        asked.append((spec, num_repeats))
        return Sitting(spec, Runs(tuple(timed(1.0 + i) for i in range(num_repeats))))

    monkeypatch.setattr(bench_compare, "time_this_tree", fake)
    return asked


def test_bench_sim_times_a_benchmark_by_name_or_a_scenario_file(
    capsys: pytest.CaptureFixture[str], fake_sittings: list[tuple[BenchSpec, int]]
) -> None:
    named = run_cli(capsys, "bench", "sim", "vidur_case_c/vllm_v0", "--repeat", "3")
    assert named.exit_code == 0, named.err
    spec, repeats = fake_sittings[-1]
    assert repeats == 3 and spec.system == "vllm-v0"
    assert spec.scenario_file == str(bench.BENCHMARK_DIR / "vidur_case_c" / "vllm_v0.toml")
    assert "vidur_case_c/vllm_v0.toml, system vllm-v0: 1000 requests" in named.out.splitlines()[0]
    assert "1.00-3.00" in named.out  # the CPU range of the three runs
    swap = run_cli(capsys, "bench", "sim", "swap_vs_recompute", "--system", "recompute",
                   "--set", "workload.num_requests=50")  # fmt: skip
    assert swap.exit_code == 0, swap.err
    spec, repeats = fake_sittings[-1]
    assert (spec.system, spec.overrides, repeats) == ("recompute", ("workload.num_requests=50",), 1)
    plain = run_cli(capsys, "bench", "sim", "--requests", "150", "--no-prefix-cache")
    assert plain.exit_code == 0, plain.err
    assert plain.out.startswith("azure-conv, prefix cache off, vllm-v1: 1000 requests")
    assert fake_sittings[-1][0] == BenchSpec(requests=150, prefix_cache=False)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["vidur_case_c/nope"], "benchmarks: vidur_case_c/sarathi, vidur_case_c/vllm_v0"),
        (["vidur_case_c/sarathi", "--policy", "vllm-v0"], "--policy: not with a scenario file"),
        (["--set", "seed=1"], "--set and --system need a scenario file"),
        (["swap_vs_recompute"], "has 2 systems: time one with --system (swap, recompute)"),
        (["swap_vs_recompute", "--system", "x"], "no system 'x'; valid: swap, recompute"),
        (["vidur_case_c/sarathi", "--set", "seed=x"], "seed"),
        (["--policy", "fifo"], "valid: static, orca, vllm-v0, vllm-v1"),
        (["--repeat", "0"], "--repeat must be from 1 to 20"),
    ],
)
def test_bench_sim_refuses_what_it_cannot_time(
    capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    result = run_cli(capsys, "bench", "sim", *args)
    assert result.exit_code == 2, (result.out, result.err)
    assert needle in result.err and "Traceback" not in result.err


def test_prefix_caching_is_set_alike_on_both_sides() -> None:
    # Like for like across revisions whose defaults differ: the prefix cache set on both sides.
    for value in (True, False):
        (system,) = BenchSpec(prefix_cache=value).scenario(bench).systems
        assert system.enable_prefix_cache is value
    assert BenchSpec().scenario(bench).systems[0].enable_prefix_cache is None  # era default


def test_bench_sim_really_times_a_scenario_file(capsys: pytest.CaptureFixture[str]) -> None:
    # One real run, in its own process, of a shipped benchmark cut to 40 requests.
    result = run_cli(
        capsys, "bench", "sim", "vidur_case_c/sarathi", "--set", "workload.num_requests=40"
    )
    assert result.exit_code == 0, result.err
    assert "system sarathi-512: 40 requests" in result.out.splitlines()[0]
    assert result.out.splitlines()[2].startswith("this tree ")


@MAKES_GIT_WORKTREES
def test_bench_sim_against_a_revision_prints_both_sides_and_the_ratio(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # HEAD's committed tree against the working tree: the same simulator, so the same answers.
    both = run_cli(capsys, "bench", "sim", "--requests", "60", "--against", "HEAD", "--repeat", "2")
    assert both.exit_code == 0, both.err
    lines = both.out.splitlines()
    assert lines[0].startswith("azure-conv, vllm-v1: HEAD (before) vs this tree (after)")
    assert lines[1].startswith("CPU time: ")
    assert lines[3].startswith("before") and lines[4].startswith("after")
    assert lines[5].startswith("wall time swings with the machine's load")
    assert lines[6].endswith("summaries agree (rel 1e-9)")
    bad = run_cli(capsys, "bench", "sim", "--requests", "5", "--against", "no-such-rev-1")
    assert bad.exit_code == 2 and "--against: git worktree add" in bad.err
    assert "Traceback" not in bad.err


def test_a_worktree_add_that_meets_another_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two `git worktree add` at once: one can fail reading the other's half-made entry.
    calls: list[tuple[str, ...]] = []

    def git(*args: str) -> None:
        calls.append(args)
        if len(calls) < 3:
            raise InputError("--against: git worktree add: fatal: failed to read commondir")

    monkeypatch.setattr(bench_compare, "_git", git)
    monkeypatch.setattr(bench_compare.time, "sleep", lambda _: None)
    assert bench_compare._add_worktree(tmp_path, "HEAD") == tmp_path / "before2"
    assert [call[3] for call in calls] == [str(tmp_path / f"before{i}") for i in range(3)]
    calls.clear()
    monkeypatch.setattr(bench_compare, "WORKTREE_TRIES", 2)
    with pytest.raises(InputError, match="failed to read"):
        bench_compare._add_worktree(tmp_path, "HEAD")

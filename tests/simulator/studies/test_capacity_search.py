"""Capacity search: bisection on a known threshold, a real scenario's bracket re-simulated on both
sides, the ranking by goodput per GPU, bad input, and the `pagesim capacity` command."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from cli_helpers import run_cli

from pagesim.reports.capacity import capacity_findings
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.studies.bisection import RateSearch
from pagesim.simulator.studies.capacity_search import (
    RATE_PATH,
    Criteria,
    configurations,
    search_capacity,
)
from pagesim.simulator.studies.executors import ProcessExecutor, SerialExecutor
from pagesim.simulator.studies.point_cache import PointCache
from pagesim.simulator.studies.sweep import run_points

ABLATION = "block_size_ablation"  # one vLLM system, OPT-13B / A100-40GB, lognormal ShareGPT
SMALL = ["workload.num_requests=40", "slo.ttft_s=2", "slo.tpot_s=0.05"]
WINDOW_S = 20.0  # offer requests for 20 s at each rate (the command's default is 60)


@pytest.mark.parametrize("start", [0.05, 1.0, 6.0, 50.0, 9000.0])
def test_bisection_finds_a_known_threshold_exactly(start: float) -> None:
    tried: list[float] = []

    def below_six(rate: float) -> bool:
        tried.append(rate)
        return rate <= 6.0

    ok, bad = bisect_max_rate(below_six, start, min_rate=0.01, max_rate=1e4, rel_tol=1e-9)
    assert ok is not None and bad is not None
    assert ok <= 6.0 < bad and bad - ok <= 1e-9 * bad
    assert ok == pytest.approx(6.0, rel=1e-9)
    assert len(tried) < 60


def bisect_max_rate(
    is_sustained: Callable[[float], bool],
    start: float,
    *,
    min_rate: float = 0.01,
    max_rate: float = 1e4,
    rel_tol: float = 0.02,
) -> tuple[float | None, float | None]:
    """(highest sustained rate, lowest failed rate) found by `RateSearch` with one predicate."""
    search = RateSearch(start, min_rate=min_rate, max_rate=max_rate, rel_tol=rel_tol)
    while (rate := search.next_value()) is not None:
        search.record(rate, is_sustained(rate))
    return search.ok, search.bad


def test_bisection_reports_exact_thresholds_on_a_grid() -> None:
    # With start 3 the doubling lands on 6 itself: the threshold is found exactly, not approached.
    ok, bad = bisect_max_rate(lambda r: r <= 6.0, 3.0, rel_tol=0.02)
    assert ok == 6.0 and 6.0 < bad <= 6.0 / 0.98


def test_bisection_stops_at_the_bounds() -> None:
    assert bisect_max_rate(lambda r: True, 1.0, max_rate=100.0) == (100.0, None)
    assert bisect_max_rate(lambda r: False, 1.0, min_rate=0.5) == (None, 0.5)


def test_bad_search_settings_are_input_errors() -> None:
    with pytest.raises(InputError, match="--rel-tol"):
        RateSearch(1.0, min_rate=0.1, max_rate=10, rel_tol=0)
    with pytest.raises(InputError, match="--min-rate"):
        RateSearch(1.0, min_rate=10, max_rate=1)
    with pytest.raises(InputError, match="--slo-share"):
        Criteria(min_slo_share=1.5)
    with pytest.raises(InputError, match="--max-queue-delay-s"):
        Criteria(max_queue_delay_s=0)


def test_criteria_say_why_a_rate_is_not_sustained() -> None:
    criteria = Criteria(min_slo_share=0.9, max_queue_delay_s=5.0)
    assert criteria.is_sustained({"slo_share": 0.95, "queue_delay_p99_s": 1.0})
    problems = criteria.problems({"slo_share": 0.5, "queue_delay_p99_s": float("inf")})
    assert problems == ["SLO met by 50.0% < 90%", "p99 queueing delay inf s > 5 s"]


def test_configurations_need_an_slo_and_a_rated_workload() -> None:
    with pytest.raises(InputError, match="needs an SLO"):
        configurations(ABLATION)
    with pytest.raises(InputError, match="sets the rate itself"):
        configurations(ABLATION, SMALL, [f"{RATE_PATH}=1,2"])
    with pytest.raises(InputError, match="explicit requests"):
        configurations("textbook_static_vs_continuous", ["slo.ttft_s=1"])
    configs = configurations(ABLATION, SMALL, ["systems.block_size=16,32"])
    assert [c.label for c in configs] == ["vllm block_size=16", "vllm block_size=32"]


def test_a_real_scenario_sustains_the_rate_found_and_not_one_slightly_above(
    tmp_path: Path,
) -> None:
    configs = configurations(ABLATION, SMALL)
    criteria = Criteria()
    executor = SerialExecutor()
    run = search_capacity(
        configs,
        executor,
        criteria=criteria,
        cache=PointCache(tmp_path),
        rel_tol=0.05,
        window_s=WINDOW_S,
    )
    search = run.searches[0]
    ok, bad = search.ok, search.bad
    assert ok is not None and bad is not None and ok < bad <= ok / 0.95
    # Simulate both rates again, from scratch, and judge them from the per-request frames.
    points = [configs[0].at_rate(ok, WINDOW_S), configs[0].at_rate(bad, WINDOW_S)]
    again = run_points(points, executor, frames_for=[p.key for p in points])
    shares = []
    for point in points:
        requests = again.frames[point.key].requests
        window = requests[requests["in_window"]]
        shares.append(window["meets_slo"].mean())
        delays = (window["admitted_s"] - window["arrival_s"]).fillna(float("inf"))
        shares[-1] = (shares[-1], delays.quantile(0.99, interpolation="higher"))
    (ok_share, ok_delay), (bad_share, bad_delay) = shares
    assert ok_share >= 0.9 and ok_delay <= 5.0
    assert bad_share < 0.9 or bad_delay > 5.0
    # A rerun of the search comes from the cache.
    rerun = search_capacity(
        configs,
        executor,
        criteria=criteria,
        cache=PointCache(tmp_path),
        rel_tol=0.05,
        window_s=WINDOW_S,
    )
    assert rerun.num_computed == 0 and rerun.searches[0].ok == ok


def test_ranking_is_by_goodput_per_gpu(tmp_path: Path) -> None:
    configs = configurations(
        ABLATION, SMALL, ["model.tensor_parallel=1,2", "systems.max_num_seqs=4,16"]
    )
    executor = ProcessExecutor(2)
    try:
        run = search_capacity(
            configs,
            executor,
            cache=PointCache(tmp_path),
            rel_tol=0.1,
            window_s=WINDOW_S / 2,
            max_rate=16,
        )
    finally:
        executor.close()
    ranking = run.ranking()
    assert len(ranking) == 4
    per_gpu = ranking["goodput_per_gpu"].to_numpy(float)
    assert (per_gpu[:-1] >= per_gpu[1:]).all()
    assert sorted(ranking["num_gpus"]) == [1, 1, 2, 2]
    expected = ranking["max_rate_per_s"] * ranking["slo_share"] / ranking["num_gpus"]
    pd.testing.assert_series_equal(ranking["goodput_per_gpu"], expected, check_names=False)
    assert (ranking["slo_share"] >= 0.9).all() and (ranking["queue_delay_p99_s"] <= 5).all()
    table = run.evaluation_table(Criteria())
    assert len(table) == sum(ranking["num_evaluations"])
    assert set(table["sustained"]) == {True, False}


def finding_items(page: str) -> list[str]:
    """The sentences of a page's findings list (the answer), unescaped."""
    found = re.search(r'<ul class="findings">(.*?)</ul>', page)
    assert found, "the page has no findings list"
    return [html.unescape(item) for item in re.findall(r"<li>(.*?)</li>", found.group(1))]


def test_capacity_command_writes_a_ranking_a_plot_and_a_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cap"
    args = ["capacity", ABLATION, *(a for s in SMALL for a in ("--set", s))]
    args += ["--out", str(out), "--jobs", "1", "--rel-tol", "0.1", "--window-s", str(WINDOW_S)]
    result = run_cli(capsys, *args)
    assert result.exit_code == 0, result.err
    assert "goodput/GPU" in result.out and "runs simulated" in result.out
    ranking = pd.read_csv(out / "capacity.csv")
    assert list(ranking["config"]) == ["vllm"] and ranking["max_rate_per_s"].notna().all()
    assert len(pd.read_csv(out / "evaluations.csv")) == ranking["num_evaluations"].sum()
    assert (out / "capacity.html").exists() and (out / "report.html").exists()
    assert (out / "plots" / "max_sustainable_rate.png").exists()
    # One answer, two pages: capacity.html and the report it links say the same, word for word.
    answer = capacity_findings(ranking)
    assert answer and answer[0].startswith("vllm sustains up to")
    for page in ("capacity.html", "report.html"):
        assert finding_items((out / page).read_text()) == answer, page
    bad = run_cli(capsys, "capacity", ABLATION, "--out", str(out))
    assert bad.exit_code == 2 and "needs an SLO" in bad.err

"""The answer first: a run's headlines lead with its scenario's [report] key metric, ranked (ties
said to tie) or as agreement; a run that measured nothing says so; report.json keeps the
question. Constructed summaries, so that the sentences are pinned whatever the simulator's
numbers are today."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagesim.reports.findings import derive_findings, warmup_warning
from pagesim.reports.glossary import SUMMARY_BY_KEY
from pagesim.reports.headlines import (
    HIGHER,
    LOWER,
    NEITHER,
    agreement_sentence,
    better,
    rank_sentence,
    show,
)
from pagesim.reports.plot_jobs import run_plot_jobs
from pagesim.reports.saved import question_from_json, question_to_json
from pagesim.simulator.core.config import Comparison, ReportConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.scenario.report import HEADLINE_METRICS


def result(system: str, **summary: float) -> RunResult:
    return RunResult("s", system, pd.DataFrame(), pd.DataFrame(), summary=dict(summary))


def test_every_headline_metric_is_in_the_glossary_with_a_direction() -> None:
    assert set(HEADLINE_METRICS) <= set(SUMMARY_BY_KEY)
    assert better("slot_utilization") == HIGHER and better("tpot_p50_s") == LOWER
    assert better("kv_waste_share") == LOWER and better("peak_kv_used_share") == NEITHER


def test_a_ranking_lists_best_first_and_says_by_how_much() -> None:
    named = [("static", 0.633), ("continuous", 0.758)]
    assert rank_sentence("slot_utilization", named) == (
        "Slot utilization: continuous 75.8%, static 63.3% (continuous highest, 20% above static)."
    )
    waste = [("orca-max", 0.732), ("vllm-paged", 0.005), ("orca-oracle", 0.412)]
    assert rank_sentence("kv_waste_share", waste) == (
        "KV waste: vllm-paged 0.5%, orca-oracle 41.2%, orca-max 73.2% "
        "(vllm-paged lowest; orca-max 146× that)."
    )
    assert rank_sentence("tpot_p50_s", [("v1", 0.021)]) == "TPOT p50: v1 21 ms."
    assert rank_sentence("tpot_p50_s", [("v1", None)]) is None


def test_ties_are_said_to_tie_not_ranked() -> None:
    # router_comparison's throughput: 2.759 vs 2.752 req/s is not "0% above the lowest".
    named = [("round-robin", 2.759), ("least-load", 2.759), ("prefix-aware", 2.752)]
    assert rank_sentence("throughput_req_s", named) == "Throughput: all 3 tie at 2.76 req/s."
    both = [("fp8", 0.0002), ("bf16", 0.0012)]  # shares 0.1 points apart print as a tie
    assert rank_sentence("kv_waste_share", both) == "KV waste: both tie at 0.0%."
    top = [("a", 0.30), ("b", 0.30), ("c", 0.10)]
    assert "(a and b highest" in (rank_sentence("prefix_hit_rate", top) or "")


def test_a_metric_with_no_better_side_is_listed_without_a_winner() -> None:
    named = [("a", 0.4), ("b", 0.9)]
    assert rank_sentence("peak_kv_used_share", named) == "KV peak used: b 90.0%, a 40.0%."


def test_agreement_gives_each_difference_from_the_reference() -> None:
    named = [("roofline", 0.0886), ("measured", 0.0898)]
    assert agreement_sentence("tpot_p50_s", named, "measured") == (
        "TPOT p50: measured and roofline agree within 1.3% (measured 89.8 ms; roofline "
        "88.6 ms, -1.3%)."
    )
    assert agreement_sentence("tpot_p50_s", named[:1], "measured") is None


@given(st.lists(st.floats(0.001, 1e6), min_size=2, max_size=6))
def test_a_ranking_names_every_system_once_best_first(values: list[float]) -> None:
    named = [(f"s{i}", v) for i, v in enumerate(values)]
    sentence = rank_sentence("ttft_p50_s", named)
    assert sentence is not None and sentence.startswith("TTFT p50: ")
    if " tie at " in sentence:
        high, low = max(values), min(values)  # a tie only when the extremes read the same
        assert show("ttft_p50_s", high) == show("ttft_p50_s", low) or high - low <= 0.005 * high
        return
    listed = sentence.removeprefix("TTFT p50: ").split(" (", 1)[0].split(", ")
    names = [entry.split(" ", 1)[0] for entry in listed]
    assert sorted(names) == sorted(n for n, _ in named)  # every system, once
    in_order = [values[int(n[1:])] for n in names]
    assert in_order == sorted(in_order)  # lower is better: the fastest first


TEXTBOOK = ReportConfig("slot_utilization", ("throughput_req_s",))


def test_the_first_headline_answers_the_question_and_the_general_ones_skip_it() -> None:
    static = result("static", slot_utilization=0.633, throughput_req_s=1.19, ttft_p99_s=1.13)
    continuous = result(
        "continuous", slot_utilization=0.758, throughput_req_s=1.43, ttft_p99_s=1.12
    )
    facts = derive_findings([static, continuous], TEXTBOOK)
    assert facts[0].startswith("Slot utilization: continuous 75.8%, static 63.3%")
    assert facts[1].startswith("Throughput: continuous 1.43 req/s, static 1.19 req/s")
    assert not any("had the highest throughput" in f for f in facts)  # said once, above
    assert any("p99 time to first token" in f for f in facts)


def test_agreement_leaves_the_contests_out() -> None:
    question = ReportConfig("tpot_p50_s", (), Comparison.AGREEMENT, "measured")
    runs = [
        result("roofline", tpot_p50_s=0.0886, throughput_req_s=0.858, ttft_p99_s=2.1),
        result("measured", tpot_p50_s=0.0898, throughput_req_s=0.858, ttft_p99_s=2.0),
    ]
    facts = derive_findings(runs, question)
    assert facts == [
        "TPOT p50: measured and roofline agree within 1.3% (measured 89.8 ms; roofline "
        "88.6 ms, -1.3%)."
    ]


def test_a_throughput_tie_says_so() -> None:
    runs = [result("a", throughput_req_s=2.759), result("b", throughput_req_s=2.752)]
    assert (
        derive_findings(runs)[0] == "All systems completed 2.76 requests/s: they tie on throughput."
    )


def test_a_run_that_measured_nothing_says_so_first() -> None:
    idle = result("v1", num_requests=40, num_in_window=0, throughput_req_s=0.0, mfu=0.1)
    warned = warmup_warning([idle])
    assert warned is not None and warned.startswith("every request of v1 arrived inside")
    facts = derive_findings([idle], ReportConfig("mfu"))
    assert facts[0].startswith("Warning: every request of v1 arrived inside the warm-up")
    assert not any("completed 0 requests/s" in f for f in facts)
    measured = result("v1", num_requests=40, num_in_window=12, throughput_req_s=1.0)
    assert warmup_warning([measured]) is None


def test_report_json_keeps_the_question(tmp_path: Path) -> None:
    question = ReportConfig("tpot_p50_s", ("ttft_p50_s",), Comparison.AGREEMENT, "measured")
    assert question_from_json(question_to_json(question), tmp_path) == question
    assert question_from_json(None, tmp_path) == ReportConfig()  # written before it was kept
    with pytest.raises(InputError, match="'question' holds"):
        question_from_json({"key_metric": 3}, tmp_path)
    with pytest.raises(InputError, match="'question' holds"):
        question_from_json({"compare": "contest"}, tmp_path)


def test_a_run_report_draws_the_question_first_when_systems_differ_on_it(tmp_path: Path) -> None:
    runs = [result("static", slot_utilization=0.633), result("continuous", slot_utilization=0.758)]
    jobs, _ = run_plot_jobs(runs, TEXTBOOK)
    assert jobs[0].stem == "question"
    assert jobs[0].draw(tmp_path / "question.png").stat().st_size > 0
    alone, _ = run_plot_jobs(runs[:1], TEXTBOOK)  # one bar answers nothing: left out
    assert all(job.stem != "question" for job in alone)

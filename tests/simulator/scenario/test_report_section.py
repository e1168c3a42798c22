"""[report]: the scenario's question (key metric, further metrics, rank or agreement), read and
checked like every other table, written back by describe_scenario, and left out of a sweep
point's cache key (it changes what a report says, not what a run computes)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from scenario_helpers import MINIMAL, error_of, write

from pagesim.simulator.core.config import Comparison, ReportConfig
from pagesim.simulator.scenario.load import describe_scenario, load_scenario, parse_scenario
from pagesim.simulator.studies.points import point_key


def with_report(tmp_path: Path, body: str) -> Path:
    return write(tmp_path, MINIMAL + "\n[report]\n" + body)


def test_a_report_section_is_read_and_written_back(tmp_path: Path) -> None:
    body = (
        'key_metric = "tpot_p50_s"\nmetrics = ["ttft_p50_s", "throughput_tok_s"]\n'
        'compare = "agreement"\nreference = "b"\n'
    )
    scenario = load_scenario(with_report(tmp_path, body))
    want = ReportConfig("tpot_p50_s", ("ttft_p50_s", "throughput_tok_s"), Comparison.AGREEMENT, "b")
    assert scenario.report == want
    again = parse_scenario(tomllib.loads(describe_scenario(scenario)))
    assert again.report == want
    assert load_scenario(write(tmp_path, MINIMAL, "bare.toml")).report == ReportConfig()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            'key_metric = "tpot_p5_s"',
            "s.toml: report.key_metric: unknown metric 'tpot_p5_s' (did you mean 'tpot_p50_s'?); "
            "valid: throughput_req_s, ",
        ),
        ("key_metric = 3", "report.key_metric: expected a summary key (a string), got integer 3"),
        ('key_metric = "mfu"\nmetrics = "mbu"', "report.metrics: expected an array"),
        ('key_metric = "mfu"\nmetrics = ["mbu", 1]', "report.metrics[1]: expected a summary key"),
        ('metrics = ["mbu"]', "report.metrics: needs key_metric"),
        ('key_metric = "mfu"\nmetrics = ["mfu"]', "report.metrics: 'mfu' is listed twice"),
        ('key_metric = "mfu"\ncompare = "contest"', "report.compare: unknown compare 'contest'"),
        ('compare = "agreement"', 'report.compare: "agreement" needs key_metric'),
        ('key_metric = "mfu"\nreference = "a"', 'report.reference: applies to compare = "agr'),
        (
            'key_metric = "mfu"\ncompare = "agreement"\nreference = "c"',
            "report.reference: no system 'c'; systems: a, b",
        ),
        ('key_metric = "mfu"\nquestion = "why"', "report.question: unknown key 'question'"),
    ],
)
def test_a_bad_report_section_is_one_line_naming_the_key(
    tmp_path: Path, body: str, message: str
) -> None:
    text = error_of(with_report(tmp_path, body))
    assert message in text and "\n" not in text


def test_an_override_reaches_the_report_and_is_blamed_when_wrong(tmp_path: Path) -> None:
    path = with_report(tmp_path, 'key_metric = "mfu"')
    assert load_scenario(path, ["report.key_metric=mbu"]).report.key_metric == "mbu"
    assert "report.key_metric: unknown metric 'fast'" in error_of(path, ("report.key_metric=fast",))


def test_the_report_section_leaves_a_points_cache_key_alone(tmp_path: Path) -> None:
    plain = load_scenario(write(tmp_path, MINIMAL, "plain.toml"))
    asked = load_scenario(with_report(tmp_path, 'key_metric = "mfu"'))
    assert point_key(plain, plain.systems[0]) == point_key(asked, asked.systems[0])

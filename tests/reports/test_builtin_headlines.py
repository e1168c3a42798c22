"""Every built-in's report leads with the answer to its own question: run at reduced size, its
first headline names the key metric its [report] declares, and a sweep's report draws a plot.

Reduced size, by one rule for every file (no list of scenario names): at most SMALL requests
(workload or Mooncake trace), no warm-up (a short run would leave nothing after it), the file's
sweep axes as they are. What the headlines say is tested on constructed summaries elsewhere
(test_headlines.py, test_sweep_findings.py); here, only that each built-in asks a question the
report answers first.
"""

from __future__ import annotations

import tomllib

import pytest

from pagesim.reports.findings import derive_findings
from pagesim.reports.headlines import metric_label
from pagesim.reports.plot_jobs import sweep_plot_jobs
from pagesim.reports.sweep_axes import label_axes
from pagesim.reports.sweep_findings import derive_sweep_findings
from pagesim.simulator.scenario.load import list_builtin, load_scenario, resolve_scenario
from pagesim.simulator.studies.executors import SerialExecutor
from pagesim.simulator.studies.runs import run_scenario
from pagesim.simulator.studies.sweep import plan_sweep, run_points

SMALL = 40  # requests per run
BUILTINS = [name for name, _ in list_builtin()]


def reduced(name: str) -> list[str]:
    """--set overrides that shrink a built-in to SMALL requests and drop its warm-up."""
    raw = tomllib.loads(resolve_scenario(name).read_text("utf-8"))
    workload = raw.get("workload", {})
    overrides = []
    if workload.get("num_requests", 0) > SMALL:
        overrides.append(f"workload.num_requests={SMALL}")
    if workload.get("mooncake", {}).get("num_requests", 0) > SMALL:
        overrides.append(f"workload.mooncake.num_requests={SMALL}")
    if raw.get("stop", {}).get("warmup_s"):
        overrides.append("stop.warmup_s=0")
    return overrides


def test_every_builtin_declares_its_key_metric() -> None:
    missing = [name for name in BUILTINS if load_scenario(name).report.key_metric is None]
    assert not missing, f"built-ins without [report] key_metric: {missing}"


@pytest.mark.parametrize("name", BUILTINS)
def test_a_run_report_leads_with_the_key_metric(name: str) -> None:
    run = run_scenario(name, reduced(name))
    question = run.scenario.report
    assert question.key_metric is not None
    first = derive_findings(run.results, question)[0]
    assert first.startswith(metric_label(question.key_metric)), first


@pytest.mark.parametrize("name", [n for n in BUILTINS if load_scenario(n).sweep])
def test_a_sweep_report_leads_with_the_key_metric_and_draws_it(name: str) -> None:
    points = plan_sweep(name, reduced(name))
    question = points[0].scenario.report
    assert question.key_metric is not None
    table = label_axes(run_points(points, SerialExecutor()).table())
    first = derive_sweep_findings(table, question)[0]
    assert first.startswith(metric_label(question.key_metric)), first
    assert sweep_plot_jobs(table, question), f"{name}: its sweep report draws no plot"

"""The folders `pagesim run`, `sweep` and `capacity` write, each from its study's typed result
(simulator.studies.runs): the report (reports.render), the data behind it, and what reproduces it.

run:       scenario.toml and overrides.json as given, then report.html and its data
           (or, without a report, each system's data only); block_maps/ when recorded
sweep:     report.html with sweep.csv and frontier.csv (the cache under cache/ is the sweep's own)
capacity:  capacity.csv (the ranking), evaluations.csv (every rate tried), frontier.csv (the
           sustained ones' Pareto frontiers), report.html of the best configurations at their
           highest sustained rate, and capacity.html

The plotting code (matplotlib and the modules drawing with it) is imported by the functions that
draw, not here: a run without a report (`pagesim run --no-report`) writes its data without
paying for that import (about 0.4 s of CPU; `pagesim bench report` counts it in the report's).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from pagesim import __version__
from pagesim.reports.folder_names import RESERVED_NAMES
from pagesim.reports.frames import unique_slugs
from pagesim.simulator.core.config import ExecutionKind, Scenario
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.scenario.load import describe_scenario
from pagesim.simulator.studies.capacity_search import RATE_PATH
from pagesim.simulator.studies.frontier import FRONTIER_FILE

if TYPE_CHECKING:
    from pagesim.simulator.studies.runs import CapacityStudy, ScenarioRun
    from pagesim.simulator.studies.sweep import SweepRun


def provenance(results: Sequence[RunResult], overrides: Sequence[str]) -> dict[str, object]:
    """What the report's provenance table shows: execution model, version, seed, model, GPU and
    the overrides given (and the profile's device and date when a profile priced the steps)."""
    first: Mapping[str, object] = results[0].provenance if results else {}
    model = first.get("execution_model")
    execution = dict(model) if isinstance(model, Mapping) else {}
    kind = str(execution.get("kind", "roofline"))
    found: dict[str, object] = {
        "execution_model": kind,
        "pagesim_version": __version__,
        "seed": first.get("seed"),
        "model": first.get("model"),
        "gpu": first.get("gpu"),
        "overrides": list(overrides),
        "execution_details": execution,
        # Where each term of a step's cost came from (measured, fitted, extrapolated, estimated).
        "step_cost_sources": execution.get("sources", "not recorded"),
    }
    if kind == "profile":
        found["profile_device"] = execution.get("device")
        found["profile_date"] = execution.get("date")
    return found


def calibration_curves(scenario: Scenario) -> dict[str, object] | None:
    """The profile's measured vs fitted curves, when the scenario is priced by a profile."""
    path = scenario.execution.profile_path
    if scenario.execution.kind is not ExecutionKind.PROFILE or path is None:
        return None
    from pagesim.calibration.profile import calibration_panels

    return calibration_panels(Path(path))


def write_run(
    run: ScenarioRun, out: Path, *, report: bool = True, num_workers: int | None = None
) -> Path:
    """A `pagesim run` folder; returns report.html, or `out` when only the data is written.
    `num_workers` processes draw the plots (default: this one alone)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "scenario.toml").write_text(run.path.read_text())
    (out / "overrides.json").write_text(json.dumps(run.overrides))
    links = []
    if run.block_maps:
        from pagesim.reports.block_map_files import write_block_maps

        links = write_block_maps(run.block_maps, out)
    if report:
        from pagesim.reports.deploy_html import deploy_entries
        from pagesim.reports.render import write_report
        from pagesim.simulator.deploy.commands import deployments

        return write_report(
            run.results,
            out,
            title=f"pagesim: {run.scenario.name}",
            scenario_text=describe_scenario(run.scenario),
            provenance=provenance(run.results, run.overrides),
            calibration=calibration_curves(run.scenario),
            num_workers=num_workers,
            deploy=deploy_entries(deployments(run.scenario)),
            question=run.scenario.report,
            block_maps=links,
        )
    names = unique_slugs([r.system for r in run.results], reserved=RESERVED_NAMES)
    for result, name in zip(run.results, names, strict=True):
        result.write(out / name)
    return out


def write_frontier(table: pd.DataFrame, out: Path) -> None:
    """frontier.csv of a sweep or a search (simulator/studies/frontier.py), when it has one."""
    from pagesim.reports.frontier_plots import sweep_frontier

    frontier = sweep_frontier(table)
    if frontier is not None:
        out.mkdir(parents=True, exist_ok=True)
        frontier.to_csv(out / FRONTIER_FILE, index=False)


def write_sweep(done: SweepRun, out: Path, overrides: Sequence[str]) -> Path:
    """A `pagesim sweep` report (sweep.csv and frontier.csv beside it; the detail point's
    data, if one was asked for); returns report.html."""
    from pagesim.reports.render import write_report

    write_frontier(done.table, out)
    return write_report(
        done.detail_results,
        out,
        title=f"pagesim sweep: {done.first_scenario.name}",
        scenario_text=describe_scenario(done.detail_scenario),
        provenance=provenance(done.detail_results, overrides),
        sweep=done.table,
        detail=done.detail_label,
        question=done.first_scenario.report,
    )


def criteria_text(study: CapacityStudy) -> str:
    """What 'sustained' meant in this search, in one paragraph."""
    criteria = study.criteria
    return (
        f"A rate is sustained when at least {criteria.min_slo_share:.0%} of the requests offered "
        f"(after warm-up) finish meeting the SLO and the p99 wait from arrival to admission is at "
        f"most {criteria.max_queue_delay_s:g} s, with requests arriving for at least "
        f"{study.window_s:g} s at each rate. Goodput per GPU = sustained rate x share "
        "meeting the SLO / tensor-parallel GPUs."
    )


def write_capacity(study: CapacityStudy, out: Path, overrides: Sequence[str]) -> Path:
    """A `pagesim capacity` folder (see the module docstring); returns capacity.html."""
    from pagesim.reports.capacity import capacity_findings, write_capacity_page
    from pagesim.reports.deploy_html import deploy_entries
    from pagesim.reports.render import write_report

    out.mkdir(parents=True, exist_ok=True)
    study.ranking.to_csv(out / "capacity.csv", index=False)
    evaluations = study.evaluations
    evaluations.to_csv(out / "evaluations.csv", index=False)
    write_frontier(evaluations, out)
    scenario = study.configs[0].scenario
    report_name = None
    if study.best:
        keep = ["system", RATE_PATH, "sustained"]
        curves = evaluations[
            keep + [c for c in evaluations.columns if c not in keep and "." not in c]
        ]
        html = write_report(
            study.best,
            out,
            title=f"pagesim capacity: {scenario.name}",
            scenario_text=describe_scenario(scenario),
            provenance=provenance(study.best, overrides),
            sweep=curves,
            detail="each configuration's highest sustained rate",
            deploy=deploy_entries(study.deployments),
            findings=capacity_findings(study.ranking),  # capacity.html's answer, word for word
            question=scenario.report,
        )
        report_name = html.name
    return write_capacity_page(
        study.ranking,
        out,
        title=f"pagesim capacity: {scenario.name}",
        criteria_text=criteria_text(study),
        scenario_text=describe_scenario(scenario),
        report_name=report_name,
    )

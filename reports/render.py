"""Write a report folder: report.html, plots/*.png, per-system CSV/JSON and summary.csv.

out_dir/
  report.html            self-contained: CSS inline, every plot a base64 data URI, no scripts
  report.json            the page's other inputs (title, scenario, provenance, …) for re-rendering
  summary.csv            one row per system (when there are systems' results)
  sweep.csv              when a sweep table was given
  plots/*.png
  <system-slug>/requests.csv, steps.csv, summary.json   (RunResult.write)

A run report leads with findings and the summary by system; a sweep report with the sweep's
findings, curves and table, and shows per-system detail at one point only when asked for. Which
plots are drawn, and drawing them in parallel, is `reports.plot_jobs`'s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.reports import matplotlib_import, plots  # noqa: F401  (matplotlib_import first)
from pagesim.reports.block_map_files import BlockMapLink, block_maps_html, parse_links
from pagesim.reports.deploy_html import deploy_html, write_commands
from pagesim.reports.findings import derive_findings
from pagesim.reports.folder_names import PLOTS_DIR, RESERVED_NAMES
from pagesim.reports.frames import unique_slugs
from pagesim.reports.glossary import SUMMARY_METRICS
from pagesim.reports.html import (
    Plot,
    esc,
    figures_html,
    files_html,
    findings_html,
    glossary_html,
    notes_html,
    page,
    provenance_table,
    summary_table,
    sweep_table,
)
from pagesim.reports.plot_drawing import draw_all
from pagesim.reports.plot_jobs import PlotJob, run_plot_jobs, sweep_plot_jobs
from pagesim.reports.saved import INPUTS_FILE, SavedReport, question_to_json, read_saved
from pagesim.reports.sweep_axes import axis_columns, label_axes
from pagesim.reports.sweep_findings import derive_sweep_findings
from pagesim.simulator.core.config import ReportConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.metrics.result import RunResult


def _json_default(value: object) -> object:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


def _write_data(
    results: Sequence[RunResult], slugs: Sequence[str], out_dir: Path, sweep: pd.DataFrame | None
) -> None:
    rows: list[dict[str, object]] = []
    order = [m.key for m in SUMMARY_METRICS]
    for result, slug in zip(results, slugs, strict=True):
        result.write(out_dir / slug)
        rows.append({"system": result.system, "folder": slug, "scenario": result.scenario})
        rows[-1].update(result.summary)
    extra = [
        k
        for row in rows
        for k in row
        if k not in order and k not in ("system", "folder", "scenario")
    ]
    columns = ["system", "folder", "scenario", *order, *dict.fromkeys(extra)]
    if rows:
        table = pd.DataFrame(rows)
        table.reindex(columns=[c for c in columns if c in table]).to_csv(
            out_dir / "summary.csv", index=False
        )
    if sweep is not None:
        sweep.to_csv(out_dir / "sweep.csv", index=False)


def sweep_plots(
    sweep: pd.DataFrame, plot_dir: Path, question: ReportConfig | None = None
) -> list[Plot]:
    """The sweep plots the table's axes (and the scenario's [report] metrics) call for,
    drawn into `plot_dir`."""
    jobs = sweep_plot_jobs(label_axes(sweep), question or ReportConfig())
    draw_all(jobs, plot_dir, 1)
    return [Plot(plot_dir / f"{job.stem}.png", job.title, job.caption) for job in jobs]


def _calibration_job(calibration: Mapping[str, object]) -> PlotJob:
    plots.parse_calibration(calibration)  # a malformed input fails here, not in a worker
    return PlotJob(
        "calibration",
        "Calibration curves",
        "Kernel and GEMM times measured on the device (median with p10–p90), the fitted "
        "profile the simulator uses, and the analytic roofline.",
        lambda path: plots.plot_calibration(calibration, path),
        0.8,
    )


def write_report(
    results: list[RunResult],
    out_dir: Path,
    *,
    title: str,
    scenario_text: str,
    provenance: dict[str, object],
    findings: list[str] | None = None,
    sweep: pd.DataFrame | None = None,
    calibration: Mapping[str, object] | None = None,
    detail: str | None = None,
    num_workers: int | None = None,
    question: ReportConfig | None = None,
    missing: Sequence[tuple[str, str]] = (),
    block_maps: Sequence[BlockMapLink] = (),
    deploy: Sequence[Mapping[str, object]] | None = None,
) -> Path:
    """Write the report folder (see the module docstring) and return the path of report.html.

    A run report (no `sweep`): findings, the summary by system, the plots worth drawing. A
    sweep report (`sweep`: one row per system and point, with the axes and summary keys) leads
    with the sweep's findings, curves and table; `results` (maybe none) are then per-system
    detail at one point, which `detail` names. `question` (the scenario's [report]) says what
    the headlines answer first; `findings` replaces the derived sentences; `calibration`
    follows `reports.calibration_plots.parse_calibration`; `num_workers` processes draw the
    plots (default: this one alone, reports.plot_drawing says why); `missing` names (system,
    why) the systems compared lack (a capacity search's system that met the SLO nowhere);
    `block_maps` links the pages of a run recorded with --block-map (reports/block_map_files.py).
    Raises ValueError on nothing to report or a malformed calibration input. `deploy`: each
    configuration's vLLM command lines (reports.deploy_html.deploy_entries), shown and written
    to vllm_commands.sh.
    """
    if not results and sweep is None:
        raise ValueError("write_report: no results to report")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    slugs = unique_slugs([r.system for r in results], reserved=RESERVED_NAMES)
    _write_data(results, slugs, out_dir, sweep)
    question = question or ReportConfig()
    shown = label_axes(sweep) if sweep is not None else None  # axis values in words
    run_jobs, notes = run_plot_jobs(results, question, missing) if results else ([], [])
    sweep_jobs = sweep_plot_jobs(shown, question) if shown is not None else []
    extra = [_calibration_job(calibration)] if calibration else []
    draw_all([*sweep_jobs, *run_jobs, *extra], out_dir / PLOTS_DIR, num_workers)
    (out_dir / INPUTS_FILE).write_text(
        json.dumps(
            {
                "title": title,
                "scenario_text": scenario_text,
                "provenance": provenance,
                "findings": findings,
                "calibration": calibration,
                "folders": slugs,
                "detail": detail,
                "question": question_to_json(question),
                "missing": [list(m) for m in missing],
                **({"block_maps": [list(link) for link in block_maps]} if block_maps else {}),
                "deploy": list(deploy or []),
            },
            indent=2,
            default=_json_default,
        )
        + "\n"
    )

    def made(jobs: Sequence[PlotJob]) -> list[Plot]:
        return [Plot(out_dir / PLOTS_DIR / f"{j.stem}.png", j.title, j.caption) for j in jobs]

    if shown is None:
        facts = findings if findings is not None else derive_findings(results, question)
        sections = _run_sections(results, facts, made(run_jobs + extra), notes)
    else:
        facts = findings if findings is not None else derive_sweep_findings(shown, question)
        curves = made(sweep_jobs)
        sections = _sweep_sections(shown, results, facts, curves, question)
        sections += _detail_sections(results, made(run_jobs + extra), notes, detail, len(curves))
    if block_maps:
        sections.append(("block-maps", "Block maps", block_maps_html(block_maps)))
    if deploy:
        write_commands(deploy, out_dir)
        sections.append(("deploy", "Deploy on vLLM", deploy_html(deploy)))
    sections += [
        ("scenario", "Scenario as run", f"<pre>{esc(scenario_text)}</pre>"),
        ("provenance", "Provenance", provenance_table(provenance, results)),
        ("data", "Data files", files_html(results, slugs, sweep is not None)),
        ("glossary", "Glossary of metrics", glossary_html()),
    ]
    path = out_dir / "report.html"
    path.write_text(page(title, _subtitle(results, shown, detail), sections), encoding="utf-8")
    return path


Section = tuple[str, str, str]  # (id, heading, inner HTML)


def _subtitle(results: Sequence[RunResult], sweep: pd.DataFrame | None, detail: str | None) -> str:
    scenarios = sorted({r.scenario for r in results})
    systems = ", ".join(r.system for r in results)
    if sweep is None:
        return f"Scenario {', '.join(scenarios)} · {len(results)} system(s): {systems}"
    axes = axis_columns(sweep)
    points = len(sweep.drop_duplicates(subset=axes)) if axes else len(sweep)
    text = f"Sweep of {points} point(s) over {', '.join(axes) or 'no axis'}"
    if results:
        text += f" · detail at {detail or 'one point'}: {systems}"
    return text


def _run_sections(
    results: Sequence[RunResult], facts: list[str], plots_: list[Plot], notes: list[str]
) -> list[Section]:
    return [
        ("findings", "Headline findings", findings_html(facts)),
        ("summary", "Summary by system", summary_table(results)),
        ("plots", "Plots", figures_html(plots_) + notes_html(notes)),
    ]


def _sweep_sections(
    sweep: pd.DataFrame,
    results: Sequence[RunResult],
    facts: list[str],
    curves: list[Plot],
    question: ReportConfig,
) -> list[Section]:
    lead = [m for m in (question.key_metric, *question.metrics) if m is not None]
    return [
        ("findings", "Headline findings", findings_html(facts)),
        ("curves", "Sweep plots", figures_html(curves) or "<p>No plot: no metric to draw.</p>"),
        ("sweep", "Sweep table", sweep_table(sweep, curated=True, lead=lead)),
    ]


def _detail_sections(
    results: Sequence[RunResult],
    detail_plots: list[Plot],
    notes: list[str],
    detail: str | None,
    num_curves: int,
) -> list[Section]:
    if not results:
        return [
            (
                "detail",
                "Detail at one point",
                "<p>Per-system plots (memory over time, timelines, latency distributions) of one "
                "point are drawn on request: <code>pagesim sweep ... --detail last</code> or "
                "<code>--detail path=value</code>.</p>",
            )
        ]
    where = detail or "one point"
    intro = (
        f"<p>Every system at one point of the sweep, <b>{esc(where)}</b>: the plots of a "
        "single run. Other points: rerun with <code>--detail</code>.</p>"
    )
    body = (
        intro
        + summary_table(results)
        + figures_html(detail_plots, start=num_curves + 1)
        + notes_html(notes)
    )
    return [("detail", f"Detail at {where}", body)]


def render_saved(saved: SavedReport, out_dir: Path) -> Path:
    """Draw a report read back by `reports.saved.read_saved` into `out_dir`."""
    inputs = saved.inputs
    try:
        return write_report(
            saved.results,
            out_dir,
            title=inputs["title"],
            scenario_text=inputs["scenario_text"],
            provenance=inputs["provenance"],
            findings=[str(f) for f in inputs["findings"]] if inputs["findings"] else None,
            sweep=saved.sweep,
            calibration=inputs["calibration"],
            detail=str(inputs["detail"]) if inputs.get("detail") else None,
            question=inputs["question"],
            missing=[(str(s), str(why)) for s, why in inputs.get("missing", [])],
            block_maps=parse_links(inputs.get("block_maps"), INPUTS_FILE),
            deploy=_deploy_entries(inputs.get("deploy")),
        )
    except ValueError as exc:  # a calibration input that does not parse
        raise InputError(f"{INPUTS_FILE}: {exc}") from None


def _deploy_entries(value: object) -> list[Mapping[str, object]] | None:
    """report.json's deploy entries (absent in older folders), each needing its text."""
    if not isinstance(value, list) or not value:
        return None
    if not all(isinstance(e, dict) and isinstance(e.get("text"), str) for e in value):
        raise InputError(f"{INPUTS_FILE}: deploy: each entry needs its command text")
    return value


def rerender_report(run_dir: Path, out_dir: Path | None = None) -> Path:
    """Re-render a report folder written by `write_report` from its CSV/JSON files (InputError
    naming the file when one is missing, damaged or disagrees with the others)."""
    return render_saved(read_saved(run_dir), out_dir or run_dir)

"""Write a report folder: report.html, plots/*.png, per-system CSV/JSON and summary.csv.

out_dir/
  report.html            self-contained: CSS inline, every plot a base64 data URI, no scripts
  report.json            the page's other inputs (title, scenario, provenance, …) for re-rendering
  summary.csv            one row per system
  sweep.csv              when a sweep table was given
  plots/*.png
  <system-slug>/requests.csv, steps.csv, summary.json   (RunResult.write)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.reports import plots
from pagesim.reports.curves import RATE_COLUMN, other_axis, sweep_column
from pagesim.reports.findings import derive_findings
from pagesim.reports.frames import unique_slugs
from pagesim.reports.glossary import SUMMARY_METRICS
from pagesim.reports.html import (
    Plot,
    esc,
    figures_html,
    files_html,
    findings_html,
    glossary_html,
    page,
    provenance_table,
    summary_table,
    sweep_table,
)
from pagesim.reports.output_folder import MANIFEST_FILE
from pagesim.reports.saved import INPUTS_FILE, SavedReport, read_saved
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.metrics.result import RunResult

PLOTS_DIR = "plots"
# Names a report folder uses at its top level: a system's data folder never takes one of them.
RESERVED_NAMES = frozenset(
    {
        PLOTS_DIR,
        INPUTS_FILE,
        MANIFEST_FILE,
        "cache",
        "report.html",
        "summary.csv",
        "sweep.csv",
        "scenario.toml",
        "overrides.json",
        "capacity.csv",
        "capacity.html",
        "evaluations.csv",
    }
)

# (file stem, function, title, caption) of the plots every run gets.
_RUN_PLOTS: tuple[tuple[str, Callable[[Sequence[RunResult], Path], Path], str, str], ...] = (
    (
        "kv_memory",
        plots.plot_kv_memory,
        "KV memory over time",
        "The KV-cache capacity of each system split, step by step, into token states (useful), "
        "reservation, internal and external fragmentation, and free slots; time-bucketed means.",
    ),
    (
        "waste_breakdown",
        plots.plot_waste_breakdown,
        "Memory waste by system",
        "Time-averaged shares of the KV capacity. Waste = reservation + internal + external "
        "fragmentation: memory held that holds no token state and cannot serve another request.",
    ),
    (
        "utilization",
        plots.plot_utilization,
        "Utilization over time",
        "Useful batch slots / batch capacity, model FLOPs / peak FLOPs (MFU) and HBM bytes / "
        "peak bandwidth (MBU), time-weighted within each bucket; idle time counts as zero.",
    ),
    (
        "request_timeline",
        plots.plot_request_timeline,
        "Request timeline",
        "Each bar is one request in a batch slot, from admission to its last token (prefill "
        "orange, decode blue). Gaps are idle slots: static batching holds a slot until the whole "
        "batch ends; continuous batching refills it at once. Hatched requests were preempted at "
        "least once; their bar also spans the time they were out of the batch.",
    ),
    (
        "latency_cdfs",
        plots.plot_latency_cdfs,
        "Latency distributions",
        "Empirical CDFs over finished requests counted after warm-up. Further left is faster; "
        "where a curve meets the dotted p99 line is its 99th-percentile latency.",
    ),
    (
        "preemptions_swaps",
        plots.plot_preemptions_swaps,
        "Preemptions and swaps",
        "Cumulative preemptions (left) and KV blocks copied between GPU and CPU memory (right); "
        "a steep rise marks memory pressure.",
    ),
)


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
    table = pd.DataFrame(rows)
    table.reindex(columns=[c for c in columns if c in table]).to_csv(
        out_dir / "summary.csv", index=False
    )
    if sweep is not None:
        sweep.to_csv(out_dir / "sweep.csv", index=False)


def sweep_plots(sweep: pd.DataFrame, plot_dir: Path) -> list[Plot]:
    """Latency-vs-rate and block-size plots for the axes the sweep table has (maybe none)."""
    made = []
    rate = sweep_column(sweep, RATE_COLUMN)
    if rate is not None and "normalized_latency_mean_s" in sweep:
        facet = other_axis(sweep, rate)
        made.append(
            Plot(
                plots.plot_latency_vs_rate(
                    sweep, plot_dir / "latency_vs_rate.png", rate_column=rate, facet=facet
                ),
                "Normalized latency vs request rate",
                "Mean (solid) and p90 (dashed) end-to-end latency per output token as the arrival "
                "rate grows; the knee is where a system runs out of capacity.",
            )
        )
    block = sweep_column(sweep, "block_size")
    if block is not None and sweep[block].nunique() > 1:
        made.append(
            Plot(
                plots.plot_block_size_ablation(
                    sweep, plot_dir / "block_size_ablation.png", block_column=block
                ),
                "Block-size ablation",
                "KV waste and throughput against the paged block size (tokens per block).",
            )
        )
    return made


def _make_plots(
    results: Sequence[RunResult],
    plot_dir: Path,
    sweep: pd.DataFrame | None,
    calibration: Mapping[str, object] | None,
) -> list[Plot]:
    made = [
        Plot(fn(results, plot_dir / f"{stem}.png"), title, caption)
        for stem, fn, title, caption in _RUN_PLOTS
    ]
    if sweep is not None:
        made += sweep_plots(sweep, plot_dir)
    if calibration:
        made.append(
            Plot(
                plots.plot_calibration(calibration, plot_dir / "calibration.png"),
                "Calibration curves",
                "Kernel and GEMM times measured on the device (median with p10–p90), the fitted "
                "profile the simulator uses, and the analytic roofline.",
            )
        )
    return made


def write_report(
    results: list[RunResult],
    out_dir: Path,
    *,
    title: str,
    scenario_text: str,
    provenance: dict[str, object],
    findings: list[str] | None = None,
    sweep: pd.DataFrame | None = None,
    calibration: dict | None = None,
) -> Path:
    """Write the report folder (see the module docstring) and return the path of report.html.

    `findings` replaces the sentences otherwise derived from the summaries; `sweep` is a table
    with one row per (system, sweep point) (columns: system, rate and/or block_size, summary
    keys); `calibration` follows `reports.curves.parse_calibration`. Raises ValueError on no
    results or a malformed calibration input.
    """
    if not results:
        raise ValueError("write_report: no results to report")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    slugs = unique_slugs([r.system for r in results], reserved=RESERVED_NAMES)
    _write_data(results, slugs, out_dir, sweep)
    made = _make_plots(results, out_dir / PLOTS_DIR, sweep, calibration)
    (out_dir / INPUTS_FILE).write_text(
        json.dumps(
            {
                "title": title,
                "scenario_text": scenario_text,
                "provenance": provenance,
                "findings": findings,
                "calibration": calibration,
                "folders": slugs,
            },
            indent=2,
            default=_json_default,
        )
        + "\n"
    )
    scenarios = sorted({r.scenario for r in results})
    subtitle = f"Scenario {', '.join(scenarios)} · {len(results)} system(s): " + ", ".join(
        r.system for r in results
    )
    sections = [
        (
            "findings",
            "Headline findings",
            findings_html(findings if findings is not None else derive_findings(results)),
        ),
        ("summary", "Summary by system", summary_table(results)),
        ("plots", "Plots", figures_html(made)),
    ]
    if sweep is not None and not sweep.empty:
        sections.append(("sweep", "Sweep", sweep_table(sweep)))
    sections += [
        ("scenario", "Scenario as run", f"<pre>{esc(scenario_text)}</pre>"),
        ("provenance", "Provenance", provenance_table(provenance, results)),
        ("data", "Data files", files_html(results, slugs, sweep is not None)),
        ("glossary", "Glossary of metrics", glossary_html()),
    ]
    path = out_dir / "report.html"
    path.write_text(page(title, subtitle, sections), encoding="utf-8")
    return path


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
        )
    except ValueError as exc:  # a calibration input that does not parse
        raise InputError(f"{INPUTS_FILE}: {exc}") from None


def rerender_report(run_dir: Path, out_dir: Path | None = None) -> Path:
    """Re-render a report folder written by `write_report` from its CSV/JSON files (InputError
    naming the file when one is missing, damaged or disagrees with the others)."""
    return render_saved(read_saved(run_dir), out_dir or run_dir)

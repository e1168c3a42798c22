"""Fidelity report: predicted vs measured step times (PNG) and one self-contained HTML page.

Renders a `calibration.fidelity.FidelityResult`; recomputes nothing. `fidelity_section` is the
HTML fragment (usable as a section of a larger report); `write_fidelity_report` writes the page.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import NullFormatter

from pagesim.reports.html import Plot, esc, figures_html, page
from pagesim.reports.style import (
    figure,
    label,
    legend_below,
    log_scale,
    no_data,
    save,
    time_scale,
)
from pagesim.reports.units import MISSING, format_seconds

if TYPE_CHECKING:
    from pagesim.calibration.fidelity import FidelityResult

SCATTER_PNG = "fidelity_scatter.png"
HTML_FILE = "fidelity.html"
BANDS = (0.05, 0.25)  # shaded relative-error bands around y = x
KINDS = (  # (name, color): what a step computed
    ("decode only", "#1f77b4"),
    ("prefill only", "#d62728"),
    ("mixed", "#2ca02c"),
)


def _kind(steps: pd.DataFrame) -> np.ndarray:
    prefill = steps["num_prefill_seqs"].to_numpy() > 0
    decode = steps["num_decode_seqs"].to_numpy() > 0
    return np.where(prefill & decode, "mixed", np.where(prefill, "prefill only", "decode only"))


def plot_step_scatter(steps: pd.DataFrame, path: Path, title: str = "") -> Path:
    """Log-log scatter of predicted vs measured compute time per step, y = x and error bands."""
    with figure(1, 1, 7.2) as (fig, axes):
        ax = axes[0, 0]
        has_data = not steps.empty and steps["predicted_compute_s"].notna().any()
        if not has_data:
            no_data(ax, "no executed step was priced by a predicting model")
            return save(fig, path)
        measured = steps["measured_compute_s"].to_numpy(dtype=float)
        predicted = steps["predicted_compute_s"].to_numpy(dtype=float)
        ok = np.isfinite(measured) & np.isfinite(predicted) & (measured > 0) & (predicted > 0)
        measured, predicted, kinds = measured[ok], predicted[ok], _kind(steps)[ok]
        inside = steps["is_inside_range"].to_numpy()[ok]
        factor, unit = time_scale(np.concatenate([measured, predicted]))
        lo = min(measured.min(), predicted.min()) * factor / 1.3
        hi = max(measured.max(), predicted.max()) * factor * 1.3
        line = np.geomspace(lo, hi, 50)
        for band, alpha in zip(BANDS, (0.45, 0.2), strict=True):
            ax.fill_between(
                line, line * (1 - band), line * (1 + band), color="#90cdf4", alpha=alpha, lw=0
            )
        ax.plot(line, line, color="#2d3748", lw=1, label="y = x")
        handles: list[Line2D] = [Line2D([], [], color="#2d3748", lw=1)]
        names = ["predicted = measured"]
        for name, color in KINDS:
            pick = kinds == name
            if not pick.any():
                continue
            outside = pick & (inside == False)  # noqa: E712 (object array: None stays neither)
            ax.scatter(
                measured[pick & ~outside] * factor,
                predicted[pick & ~outside] * factor,
                s=10,
                color=color,
                alpha=0.6,
                lw=0,
            )
            if outside.any():
                ax.scatter(
                    measured[outside] * factor,
                    predicted[outside] * factor,
                    s=14,
                    facecolors="none",
                    edgecolors=color,
                    alpha=0.7,
                    lw=0.8,
                )
            handles.append(Line2D([], [], marker="o", ls="", color=color))
            names.append(f"{name} ({int(pick.sum())})")
        if (inside == False).any():  # noqa: E712
            handles.append(Line2D([], [], marker="o", ls="", mfc="none", color="#4a5568"))
            names.append("outside the profile's measured range")
        handles += [
            Line2D([], [], color="#90cdf4", lw=6, alpha=0.6),
            Line2D([], [], color="#90cdf4", lw=6, alpha=0.3),
        ]
        names += [f"±{BANDS[0]:.0%}", f"±{BANDS[1]:.0%}"]
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        log_scale(ax, "x")
        log_scale(ax, "y")
        for axis in (ax.xaxis, ax.yaxis):  # a square log-log panel: major labels are enough
            axis.set_minor_formatter(NullFormatter())
        ax.set_aspect("equal")
        ax.set_xlabel(f"measured compute time per step ({unit})")
        ax.set_ylabel(f"predicted compute time per step ({unit})")
        ax.set_title(label(title or "Step time: predicted vs measured", 90))
        legend_below(fig, handles, names, 3)  # below the panel: inside it would cover points
        return save(fig, path)


def _value(value: object) -> str:
    if isinstance(value, dict | list | tuple):
        return f"<code>{esc(json.dumps(value, default=str))}</code>"
    return esc(value)


def _pct(value: float | None) -> str:
    if value is None or value != value:
        return MISSING
    return f"{value:+.1f}%"


def _abs_pct(value: float | None) -> str:
    if value is None or value != value:
        return MISSING
    return f"{value:.1f}%"


def _share(value: float | None) -> str:
    return MISSING if value is None else f"{value:.1%}"


def error_tables(result: FidelityResult) -> str:
    e = result.step_error
    step_rows = [
        ("steps compared", f"{e.num_steps:,}"),
        ("median |error|", _abs_pct(e.median_abs_pct)),
        ("p90 |error|", _abs_pct(e.p90_abs_pct)),
        ("bias (mean signed error)", _pct(e.bias_pct)),
        ("median signed error", _pct(e.median_bias_pct)),
    ]
    steps = "".join(
        f"<tr><th>{esc(k)}</th><td class='num'>{esc(v)}</td></tr>" for k, v in step_rows
    )
    head = (
        "<tr><th>metric</th><th>quantile</th><th>simulated</th><th>measured</th><th>error</th></tr>"
    )
    rows = "".join(
        f"<tr><td>{esc(r.metric.upper())}</td><td>{esc(r.quantile)}</td>"
        f"<td class='num'>{esc(_seconds(r.simulated_s))}</td>"
        f"<td class='num'>{esc(_seconds(r.measured_s))}</td>"
        f"<td class='num'>{esc(_pct(r.pct_error))}</td></tr>"
        for r in result.request_errors
    )
    return (
        "<h3>Step time on the same plans (compute_s)</h3>"
        "<p>Every plan the executor ran was also priced by the predicting model; error = "
        "(predicted − measured) / measured.</p>"
        f"<table>{steps}</table>"
        "<h3>Request latency, simulated run vs measured run</h3>"
        "<p>Finished requests after warm-up; error = (simulated − measured) / measured. The "
        "measured durations drive the measured run's clock, so its schedule differs from the "
        "simulation's.</p>"
        f"<table>{head}{rows}</table>"
    )


def _seconds(value: float) -> str:
    return MISSING if value != value else format_seconds(value)


def held_out_html(result: FidelityResult) -> str:
    h = result.held_out
    rows = [
        ("scenario", h.scenario),
        ("system", result.system),
        ("predicting model", h.predictor),
        ("profile", h.profile_path or "none (roofline: datasheet peaks × efficiencies)"),
        ("how the profile was made", h.calibration),
        ("calibration grid", h.grid or MISSING),
        ("executed steps inside the profile's measured range", _share(h.fraction_inside_range)),
        ("executed steps equal to a calibration grid point", _share(h.fraction_on_grid_points)),
    ]
    return (
        "<table>"
        + "".join(f"<tr><th>{esc(k)}</th><td>{_value(v)}</td></tr>" for k, v in rows)
        + "</table>"
    )


def execution_html(result: FidelityResult) -> str:
    rows: list[tuple[str, object]] = [("backend", result.backend), ("device", result.device)]
    rows += [(k, v) for k, v in result.executor.items() if k not in ("backend", "device")]
    rows.append(("wall time of the check", f"{result.wall_s} s"))
    return (
        "<table>"
        + "".join(f"<tr><th>{esc(k)}</th><td>{_value(v)}</td></tr>" for k, v in rows)
        + "</table>"
    )


def fidelity_section(result: FidelityResult, scatter: Path) -> str:
    """The HTML fragment: error tables, the scatter, held-out statement, execution provenance."""
    plot = Plot(
        scatter,
        "Step time, predicted vs measured",
        "One point per executed step (log-log); the line is y = x, the shaded bands ±5% and ±25%. "
        "Hollow points fell outside the profile's measured range (extrapolated).",
    )
    device_note = (
        "<p><b>CPU (NumPy) figures</b>: they exercise the pipeline and say nothing about any "
        "GPU.</p>"
        if result.backend == "numpy"
        else ""
    )
    return (
        device_note
        + error_tables(result)
        + figures_html([plot])
        + "<h3>Held-out honesty</h3>"
        + held_out_html(result)
        + "<h3>How it was measured</h3>"
        + execution_html(result)
    )


def write_fidelity_report(result: FidelityResult, out: Path) -> Path:
    """Scatter PNG and the self-contained fidelity page under `out`; returns the HTML path."""
    out.mkdir(parents=True, exist_ok=True)
    title = f"{result.scenario} / {result.system} on {result.device}"
    scatter = plot_step_scatter(result.steps, out / SCATTER_PNG, title)
    html = page(
        f"pagesim fidelity: {title}",
        f"simulated ({result.held_out.predictor}) vs executed ({result.backend}, "
        f"{result.layer_subset})",
        [("fidelity", "Fidelity: simulated vs measured", fidelity_section(result, scatter))],
    )
    path = out / HTML_FILE
    path.write_text(html)
    return path

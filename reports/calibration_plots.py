"""Calibration plot: measured vs fitted vs roofline cost curves, in the dictionary format that
`parse_calibration` documents (the profile's `calibration.profile.calibration_panels`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot

import numpy as np

from pagesim.reports.style import (
    figure,
    label,
    legend_below,
    log_scale,
    save,
    system_color,
    time_scale,
)


@dataclass(frozen=True)
class CalibrationPanel:
    """One measured cost curve. Times in seconds; arrays are 1-D.

    x, measured_s (and p10/p90 when given) have one entry per measured point; fitted_s and
    roofline_s are evaluated at model_x (defaults to x).
    """

    title: str
    x_label: str
    x: np.ndarray
    measured_s: np.ndarray
    measured_p10_s: np.ndarray | None = None
    measured_p90_s: np.ndarray | None = None
    model_x: np.ndarray | None = None
    fitted_s: np.ndarray | None = None
    roofline_s: np.ndarray | None = None
    log_x: bool = False
    log_y: bool = False


def parse_calibration(calibration: Mapping[str, object]) -> tuple[str, list[CalibrationPanel]]:
    """(device, panels) from the calibration input format; ValueError names what is wrong.

    Format (JSON-friendly; lists or arrays; times in seconds)::

        {"device": "NVIDIA H200",                     # optional, shown in the title
         "panels": [
           {"title": "decode attention", "x_label": "total KV tokens",
            "x": [...], "measured_s": [...],            # required, same length
            "measured_p10_s": [...], "measured_p90_s": [...],   # optional, as x
            "model_x": [...],                           # optional x of the two curves below
            "fitted_s": [...], "roofline_s": [...],     # optional, as model_x (or x)
            "log_x": true, "log_y": false}]}            # optional

    A single panel dict (with "x" at the top level) is accepted too.
    """
    raw = calibration.get("panels", [calibration] if "x" in calibration else None)
    if not isinstance(raw, Sequence) or isinstance(raw, str) or not raw:
        raise ValueError("calibration: expected a non-empty list under 'panels'")
    return str(calibration.get("device", "")), [_panel(i, entry) for i, entry in enumerate(raw)]


def _array(
    entry: Mapping[str, object], key: str, where: str, length: int | None = None
) -> np.ndarray | None:
    """entry[key] as a 1-D float array of `length` values; None when absent."""
    if entry.get(key) is None:
        return None
    try:
        values = np.asarray(entry[key], dtype=float).ravel()
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: {key!r} must be numbers ({err})") from None
    if length is not None and len(values) != length:
        raise ValueError(f"{where}: {key!r} has {len(values)} values, expected {length}")
    return values


def _panel(i: int, entry: object) -> CalibrationPanel:
    if not isinstance(entry, Mapping):
        raise ValueError(f"calibration panels[{i}]: expected a mapping, got {type(entry).__name__}")
    where = f"calibration panels[{i}] ({entry.get('title', 'untitled')})"
    x = _array(entry, "x", where)
    measured = _array(entry, "measured_s", where, None if x is None else len(x))
    if x is None or len(x) == 0 or measured is None:
        raise ValueError(f"{where}: 'x' and 'measured_s' are required")
    model_x = _array(entry, "model_x", where)
    n_model = len(model_x) if model_x is not None else len(x)
    return CalibrationPanel(
        title=str(entry.get("title", f"curve {i + 1}")),
        x_label=str(entry.get("x_label", "x")),
        x=x,
        measured_s=measured,
        measured_p10_s=_array(entry, "measured_p10_s", where, len(x)),
        measured_p90_s=_array(entry, "measured_p90_s", where, len(x)),
        model_x=model_x,
        fitted_s=_array(entry, "fitted_s", where, n_model),
        roofline_s=_array(entry, "roofline_s", where, n_model),
        log_x=bool(entry.get("log_x", False)),
        log_y=bool(entry.get("log_y", False)),
    )


def plot_calibration(calibration: Mapping[str, object], path: Path) -> Path:
    """Measured (points, p10–p90 bars) vs fitted (line) vs roofline (dashed), one panel per curve.

    Input format: see `parse_calibration`.
    """
    device, panels = parse_calibration(calibration)
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    with figure(nrows, ncols, 1.2 + 3.4 * nrows) as (fig, axes):
        for ax in axes.ravel()[len(panels) :]:
            ax.set_visible(False)
        for ax, p in zip(axes.ravel(), panels, strict=False):
            scale, unit = time_scale(p.measured_s)
            model_x = p.model_x if p.model_x is not None else p.x
            if p.measured_p10_s is not None and p.measured_p90_s is not None:
                err = np.vstack([p.measured_s - p.measured_p10_s, p.measured_p90_s - p.measured_s])
                ax.errorbar(
                    p.x,
                    scale * p.measured_s,
                    yerr=scale * np.clip(err, 0, None),
                    fmt="o",
                    ms=4,
                    color="black",
                    capsize=2,
                    label="measured (median, p10–p90)",
                )
            else:
                ax.plot(p.x, scale * p.measured_s, "o", ms=4, color="black", label="measured")
            if p.fitted_s is not None:
                ax.plot(
                    model_x, scale * p.fitted_s, "-", color=system_color(0), label="fitted profile"
                )
            if p.roofline_s is not None:
                ax.plot(
                    model_x, scale * p.roofline_s, "--", color=system_color(1), label="roofline"
                )
            ax.set_title(label(p.title, 50), loc="left")
            ax.set_xlabel(label(p.x_label, 50))
            ax.set_ylabel(f"time ({unit})")
            if p.log_x:
                log_scale(ax, "x")
            if p.log_y:
                log_scale(ax, "y")
        legend: dict[str, object] = {}
        for ax in axes.ravel()[: len(panels)]:
            for handle, name in zip(*ax.get_legend_handles_labels(), strict=True):
                legend.setdefault(name, handle)
        handles, names = list(legend.values()), list(legend)
        shown = ["measured"]
        shown += ["fitted"] if any(p.fitted_s is not None for p in panels) else []
        shown += ["roofline"] if any(p.roofline_s is not None for p in panels) else []
        fig.suptitle(
            "Calibration: " + " vs ".join(shown) + (f" on {label(device, 40)}" if device else "")
        )
        legend_below(fig, handles, names, 3)
        return save(fig, path)

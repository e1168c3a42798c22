"""Shared look of every plot: Agg backend, colors, safe labels, saving that always closes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")  # before pyplot: plots are files, never windows

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogFormatter
from PIL import Image

DPI = 110
WIDTH_IN = 10.0  # about 1100 px: the HTML page's content width
SYSTEM_COLORS = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
)
KV_COLORS = {  # token states strong, reservation light, waste warm, free pale
    "kv_token_slots": "#2b6cb0",
    "kv_reserved_slots": "#90cdf4",
    "kv_internal_frag_slots": "#dd6b20",
    "kv_external_frag_slots": "#9f7aea",
    "kv_free_slots": "#e2e8f0",
}
NO_DATA_COLOR = "#718096"
LINE_STYLES = ("-", "--", "-.", ":")  # with colors, so that overlapping curves stay apart
TIME_LABEL = "simulated time (s)"  # the x-axis of plots over a run

plt.rcParams.update(
    {
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.titlesize": 11,
        "axes.labelsize": 10,
        "legend.fontsize": 9,
        "legend.framealpha": 0.9,
        "figure.titlesize": 13,
        "text.usetex": False,
    }
)


def time_label(results: Sequence[Any]) -> str:
    """The x-axis label of plots over a run (`results`: RunResults); it says so when a CPU
    profile priced the steps, whose seconds are a CPU's, far slower than any GPU's (a toy of
    four requests then spans thousands of simulated seconds)."""
    for result in results:
        model = result.provenance.get("execution_model")
        if isinstance(model, dict) and model.get("device") == "cpu":
            return f"{TIME_LABEL}; steps priced by a CPU profile, not a GPU"
    return TIME_LABEL


def system_color(index: int) -> str:
    return SYSTEM_COLORS[index % len(SYSTEM_COLORS)]


def label(text: object, width: int = 32) -> str:
    """Text safe for matplotlib (a '$' would start mathtext) and short enough for a legend."""
    text = " ".join(str(text).split())
    short = text if len(text) <= width else text[: width - 1] + "…"
    return short.replace("\\", "\\\\").replace("$", r"\$")


def no_data(ax: Axes, text: str) -> None:
    """Say in the panel why it is empty, instead of leaving a blank frame."""
    ax.text(
        0.5,
        0.5,
        text,
        transform=ax.transAxes,
        ha="center",
        va="center",
        color=NO_DATA_COLOR,
        fontsize=10,
        style="italic",
    )


@contextmanager
def figure(nrows: int, ncols: int, height_in: float, **kwargs: Any) -> Iterator[tuple[Figure, Any]]:
    """A figure with a grid of axes (always a 2-D array), closed however the block exits."""
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(WIDTH_IN, height_in),
        dpi=DPI,
        facecolor="white",
        squeeze=False,
        layout="constrained",
        **kwargs,
    )
    try:
        yield fig, axes
    finally:
        plt.close(fig)


def save(fig: Figure, path: Path) -> Path:
    """Write the figure as PNG. One draw (layout and rendering together) and the canvas's
    pixels encoded directly: `savefig` with a layout engine draws twice, once only to lay out,
    which made it the report's largest cost; the pixels are the same."""
    path.parent.mkdir(parents=True, exist_ok=True)
    assert isinstance(fig.canvas, FigureCanvasAgg)  # reports draw with Agg (matplotlib.use)
    canvas: Any = fig.canvas  # FigureCanvasAgg's draw and buffer_rgba are untyped
    canvas.draw()
    width, height = canvas.get_width_height(physical=True)
    pixels = Image.frombuffer("RGBA", (width, height), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
    pixels.save(path, format="png", dpi=(DPI, DPI))
    return path


def time_scale(seconds: np.ndarray) -> tuple[float, str]:
    """(factor, unit) that shows these seconds as µs, ms or s, judged by the largest."""
    finite = np.abs(seconds[np.isfinite(seconds)])
    peak = float(finite.max()) if len(finite) else 1.0
    if peak < 1e-3:
        return 1e6, "µs"
    if peak < 1:
        return 1e3, "ms"
    return 1.0, "s"


def _plain(value: float, _: object = None) -> str:
    return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:g}"


def log_scale(ax: Axes, axis: str = "x") -> None:
    """A base-10 log axis labeled 0.01, 1, 100 rather than mathtext powers (plainer, and faster:
    mathtext parsing dominates drawing a log axis). Minor ticks get labels only when the axis
    spans about a decade or less (some of them up to one decade, all of them up to half of one),
    so a narrow range still has numbers on it and a wider one has no colliding labels."""
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_formatter(FuncFormatter(_plain))
    target.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.5)))


def legend_below(fig: Figure, handles: Sequence[Any], labels: Sequence[str], ncol: int) -> None:
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=max(1, ncol), frameon=False)

"""Shared look of every plot: Agg backend, colors, safe labels, saving that always closes."""

from __future__ import annotations

import math
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
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
from PIL import Image

from pagesim.reports.axis_drawing import measured_once
from pagesim.reports.layout import PAD_PT as LAYOUT_PAD_PT
from pagesim.reports.layout import place_panels
from pagesim.reports.minor_marks import mark_minor
from pagesim.reports.text_drawing import ReportCanvas

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


# Titles stay where they are put, above the axes (axes.titley set, not None): matplotlib's
# automatic placement measures every y tick label of an axes at each layout pass and at the
# draw, to see whether the axis's offset text ("1e6" over the axis) is in the title's way:
# ~8% of drawing a report's plots (instructions, textbook_static_vs_continuous). Nothing else
# can be in the way (no report plot has ticks on top); `save` draws a figure whose axes show
# an offset text again with automatic placement, as matplotlib's default would.
FIXED_TITLES: dict[Any, Any] = {"axes.titley": 1.0}  # rc_context keys are typed Literals


@contextmanager
def figure(nrows: int, ncols: int, height_in: float, **kwargs: Any) -> Iterator[tuple[Figure, Any]]:
    """A figure with a grid of axes (always a 2-D array), closed however the block exits.

    Its panels are placed by `reports.layout.place_panels` when it is saved, not by a
    matplotlib layout engine (see there why). The figure is pyplot's to close but not to
    manage: a figure `plt.subplots` makes calls pyplot's redraw hook on every change to every
    artist (~10% of drawing a report's plots), for windows a report never opens. `plt.close`
    still hears of it (tests keep it open so)."""
    with plt.rc_context(FIXED_TITLES):
        fig = Figure(figsize=(WIDTH_IN, height_in), dpi=DPI, facecolor="white")
        ReportCanvas(fig)  # Agg's, its texts drawn whole (reports/text_drawing.py)
        try:
            yield fig, fig.subplots(nrows, ncols, squeeze=False, **kwargs)
        finally:
            plt.close(fig)


# zlib's fastest level: on a report's plots (flat colors, thin lines) it makes files about as
# small as Pillow's default level 6 does with the alpha channel (~590 vs ~594 KiB for
# spec_decode's six plots) in ~60% of the time; encoding was a quarter of drawing a plot.
PNG_COMPRESS_LEVEL = 1
# A report's plot has a few flat colors and their anti-aliased edges: 256 colors chosen by
# Pillow's fast octree (no dithering) keep every pixel within 15 of 255 of its drawn color
# (mean 0.6-1.2, spec_decode's plots), and a one-byte-a-pixel PNG takes about half the time to
# encode, octree included, and half the bytes (which the page then embeds) of RGB's.
PNG_COLORS = 256
FAST_OCTREE: Any = 2  # Image.Quantize.FASTOCTREE: ints, as every Pillow this project takes has them
NO_DITHER: Any = 0  # Image.Dither.NONE
NEAR_WHITE = 4  # of 255: octree colours this pale are written white (see _white_kept)


def save(fig: Figure, path: Path) -> Path:
    """Write the figure as PNG. One draw (layout and rendering together) and the canvas's
    pixels encoded directly: `savefig` with a layout engine draws twice, once only to lay out,
    which made it the report's largest cost; the pixels are the same. Written as RGB: every
    figure is opaque (a white face), so the alpha channel is 255 throughout and only costs
    encoding time; then as 256 colors (PNG_COLORS says why)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    assert isinstance(fig.canvas, FigureCanvasAgg)  # reports draw with Agg (matplotlib.use)
    canvas: Any = fig.canvas  # FigureCanvasAgg's draw and buffer_rgba are untyped
    place_panels(fig)
    with measured_once(fig):  # each axis's ticks worked out once (reports/axis_drawing.py)
        canvas.draw()
        if _shows_offset_text(fig):
            for ax in fig.axes:
                ax._autotitlepos = True  # type: ignore[attr-defined]  # matplotlib's placement
            canvas.draw()
    width, height = canvas.get_width_height(physical=True)
    pixels = Image.frombuffer("RGBA", (width, height), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
    opaque = pixels.convert("RGB")
    colors = opaque.quantize(colors=PNG_COLORS, method=FAST_OCTREE, dither=NO_DITHER)
    colors.putpalette(_white_kept(colors.getpalette() or []))
    colors.save(path, format="png", dpi=(DPI, DPI), compress_level=PNG_COMPRESS_LEVEL)
    return path


def _white_kept(palette: list[int]) -> list[int]:
    """The octree's colours with those within NEAR_WHITE of white made white: it averages each
    colour with its neighbours (white with the palest anti-aliased edges), and a figure's face
    is white on a white page."""
    kept = list(palette)
    for start in range(0, len(kept) - 2, 3):
        if min(kept[start : start + 3]) >= 255 - NEAR_WHITE:
            kept[start : start + 3] = [255, 255, 255]
    return kept


def _shows_offset_text(fig: Figure) -> bool:
    """Whether some axes of the drawn figure writes an offset or a power of ten over its y
    axis, where a title placed at a fixed height could cover it."""
    return any(
        ax.get_visible() and ax.yaxis.offsetText.get_visible() and ax.yaxis.offsetText.get_text()
        for ax in fig.axes
    )


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
    """A tick's number, written the same way along a whole axis: 0.05, 2, 300, 4,000."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:g}"


# Labelled ticks per decade of a log axis, coarsest first: the first that puts MIN_LOG_TICKS on
# the axis, none of its ends further than END_GAP of its length from a tick, is used; so a
# narrow axis still has a number near every curve, and a wide one no more than fit. A ladder
# whose neighbouring labels would touch on the axis as drawn is never used (finer ladders are
# only denser): the finest that fits is, when none reaches MIN_LOG_TICKS.
_LOG_SUBS: tuple[tuple[float, ...], ...] = (
    (1.0,),
    (1.0, 2.0, 5.0),
    (1.0, 2.0, 3.0, 5.0),
    (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0),
    (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0),
)
MIN_LOG_TICKS = 4
END_GAP = 0.2
LABEL_GAP = 1.1  # neighbouring labels' centres at least 1.1 x (half-width + half-width) apart


def _log_subs(
    low: float, high: float, room_px: float | None = None, size_px: Any = None
) -> tuple[float, ...]:
    """The labelled ticks per decade for a log axis from `low` to `high` (see _LOG_SUBS):
    `room_px` the axis's length as drawn and `size_px(text)` a label's extent along it, when
    known, keep neighbouring labels apart."""
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    span = math.log10(high / low)
    fitting = _LOG_SUBS[0]
    for subs in _LOG_SUBS:
        ticks = [s * 10.0**e for e in range(first, last + 1) for s in subs]
        inside = sorted(t for t in ticks if low <= t <= high)
        if room_px is not None and size_px is not None:
            sizes = [float(size_px(_plain(t))) for t in inside]
            apart = all(
                room_px * math.log10(b / a) / span >= LABEL_GAP * (wa + wb) / 2
                for a, b, wa, wb in zip(inside, inside[1:], sizes, sizes[1:], strict=False)
            )
            if not apart:
                return fitting
        fitting = subs
        if len(inside) >= MIN_LOG_TICKS and (
            math.log10(inside[0] / low) <= END_GAP * span
            and math.log10(high / inside[-1]) <= END_GAP * span
        ):
            return subs
    return fitting


def log_scale(ax: Axes, axis: str = "x") -> None:
    """A base-10 log axis over what is plotted so far, its ticks labelled in plain numbers
    (0.02, 0.05, 0.1 rather than mathtext powers or "6e-01": plainer, one format along the
    axis, and faster: mathtext parsing dominates drawing a log axis). The labelled ticks per
    decade are chosen by `_log_subs`, against the axis's length in the figure as it stands;
    the other ninths of a decade get unlabelled minor ticks."""
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    low, high = sorted(ax.get_xlim() if axis == "x" else ax.get_ylim())
    finite = 0 < low < high and math.isfinite(high)
    subs = _log_subs(low, high, *_label_room(ax, axis)) if finite else _LOG_SUBS[0]
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(LogLocator(base=10, subs=subs))
    target.set_major_formatter(FuncFormatter(_plain))
    minor = tuple(float(k) for k in range(1, 10) if k not in subs)
    mark_minor(ax, axis, minor)  # one artist, not a Tick each (reports/minor_marks.py)
    target.set_minor_formatter(NullFormatter())


def _label_room(ax: Axes, axis: str) -> tuple[float, Any]:
    """The axis's length in pixels and a label's extent along it (width on x, height on y)."""
    from matplotlib.font_manager import FontProperties

    fig = ax.get_figure()
    box = ax.get_window_extent()
    label_size = plt.rcParams["xtick.labelsize" if axis == "x" else "ytick.labelsize"]
    size_pt = FontProperties(size=label_size).get_size_in_points()
    if axis == "y" or fig is None:
        height_px = size_pt * (fig.dpi if fig is not None else 100.0) / 72
        return float(box.height), lambda _text: height_px
    figure = fig.get_figure(root=True) if hasattr(fig, "get_figure") else fig
    return float(box.width), lambda text: _text_width_px(figure, text, size_pt)  # type: ignore[arg-type]


def plain_ticks(ax: Axes, axis: str, values: Sequence[float]) -> None:
    """Ticks at exactly `values` (a sweep's points), in plain numbers; a log axis (base 2 when
    every value is a power of two, as batch and block sizes are) when they are positive and
    span a factor of 8 or more, so that 1, 2, 4, 8 do not crowd into one label."""
    ticks = sorted({float(v) for v in values if math.isfinite(v)})
    if not ticks:
        return
    if ticks[0] > 0 and ticks[-1] / ticks[0] >= 8:
        powers_of_two = all(t == 2 ** round(math.log2(t)) for t in ticks)
        base = 2 if powers_of_two else 10
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=base)
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_ticks(ticks, [_plain(t) for t in ticks])
    target.set_minor_formatter(NullFormatter())  # a log axis would label its minor ticks


def _text_width_px(fig: Figure, text: str, size_pt: float) -> float:
    from matplotlib.font_manager import FontProperties

    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    width, _, _ = renderer.get_text_width_height_descent(
        text, FontProperties(size=size_pt), ismath=False
    )
    return float(width)


def legend_below(fig: Figure, handles: Sequence[Any], labels: Sequence[str], ncol: int) -> None:
    """The figure's legend under its panels, in at most `ncol` columns: fewer when entries that
    wide would not fit the figure's width (a legend cut at the edge hides names)."""
    if not handles:
        return
    size_pt = float(plt.rcParams["legend.fontsize"])
    em_px = size_pt * fig.dpi / 72
    # An entry is its handle (2 em), the gap to its text (0.8 em) and the text; columns are
    # 2 em apart (matplotlib's legend defaults).
    widest = max((_text_width_px(fig, str(t), size_pt) for t in labels), default=0.0)
    entry_px = widest + 2.8 * em_px
    room_px = 0.96 * fig.bbox.width
    ncol = max(1, min(ncol, len(labels)))
    while ncol > 1 and ncol * entry_px + (ncol - 1) * 2 * em_px > room_px:
        ncol -= 1
    # At the foot of the figure; `place_panels` keeps the panels above it.
    fig.legend(
        handles,
        labels,
        loc="lower center",
        bbox_to_anchor=(0.5, LAYOUT_PAD_PT / 72 / fig.get_figheight()),
        ncol=ncol,
        frameon=False,
    )

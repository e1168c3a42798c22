"""Where a report figure's panels go: margins sized from what is drawn around each panel.

matplotlib's constrained layout measures every text of every panel as laid out (each tick
label's bounding box, twice over: it iterates) before the figure is drawn, which then lays the
same texts out again: about a quarter of drawing a report's plots (CPU time, 11 plots of
disaggregated_vs_colocated, 7 December 2026). `place_panels` sizes the margins from the texts
themselves instead: the tick labels the axis will show (its locator's ticks inside the view,
written by its formatter), axis labels, titles, the figure's title and its legend below, and
any text a panel holds that reaches past its frame, each measured once by string and font size
(`text_size_px`, cached), then sets the grid's margins and gaps (`Figure.subplots_adjust`). The
panels are where constrained layout would put them to within a few pixels: decorations are not
cut and do not overlap, only the slack differs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.text import Annotation, Text

from pagesim.reports.text_drawing import measure

SIDES = ("left", "right", "top", "bottom")
MAX_PASSES = 4  # of measuring and placing (two, mostly; see place_panels)
PAD_PT = 4.0  # around the figure's edge and between a panel's decorations and the next panel's
LINE_SPACING = 1.2  # matplotlib's default spacing of the lines of one text
_RC: Any = mpl.rcParams  # read with keys built from the axis name, which its stubs refuse


@lru_cache(maxsize=4096)
def text_size_px(
    text: str, size_pt: float, dpi: float, weight: str = "normal"
) -> tuple[float, float]:
    """(width, height) in pixels of one line of `text` in the default font at `size_pt`, as the
    Agg renderer lays it out (cached: tick labels repeat across panels and plots)."""
    renderer = _renderer(dpi)
    prop = FontProperties(size=size_pt, weight=weight)
    ismath = "$" in text.replace(r"\$", "")
    width, height, _ = measure(renderer, text, prop, ismath)
    return float(width), float(height)


@lru_cache(maxsize=8)
def _renderer(dpi: float) -> Any:
    """An Agg renderer of one pixel, for measuring text only."""
    from matplotlib.backends.backend_agg import RendererAgg

    make: Any = RendererAgg  # untyped in matplotlib's stubs
    return make(1, 1, dpi)


def _block_px(
    text: Text | str, size_pt: float, dpi: float, weight: str = "normal"
) -> tuple[float, float]:
    """(width, height) of a text of one or more lines."""
    content = text.get_text() if isinstance(text, Text) else text
    lines = content.split("\n")
    sizes = [text_size_px(line or "lp", size_pt, dpi, weight) for line in lines]
    line_px = text_size_px("lp", size_pt, dpi, weight)[1]
    width = max(w for w, _ in sizes)
    height = line_px * (1 + LINE_SPACING * (len(lines) - 1))
    return width, height


def _text_size(text: Text, dpi: float) -> tuple[float, float]:
    return _block_px(text, float(text.get_fontsize()), dpi, str(text.get_fontweight()))


def _pt(points: float, dpi: float) -> float:
    return points * dpi / 72.0


@dataclass
class Margins:
    """Pixels a panel's decorations take beyond its frame, on each side."""

    left: float = 0.0
    right: float = 0.0
    top: float = 0.0
    bottom: float = 0.0


def _tick_labels(ax: Axes, which: str) -> list[str]:
    """The major tick labels `ax`'s x or y axis will show: its locator's ticks inside the view,
    as its formatter writes them."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    low, high = sorted(ax.get_xbound() if which == "x" else ax.get_ybound())
    locs = np.asarray(axis.get_majorticklocs(), dtype=float)
    span = high - low
    inside = locs[(locs >= low - 1e-9 * abs(span)) & (locs <= high + 1e-9 * abs(span))]
    if len(inside) == 0:
        return []
    written = axis.get_major_formatter().format_ticks(list(inside))
    return [str(s) for s in written if str(s)]  # an unlabelled tick takes no room


def _labels_shown(ax: Axes, which: str) -> bool:
    params = (ax.xaxis if which == "x" else ax.yaxis).get_tick_params()
    key = "labelbottom" if which == "x" else "labelleft"
    return bool(params.get(key, True))


def _tick_out_px(which: str, dpi: float) -> float:
    """A major tick's length outside the frame plus the gap to its label."""
    size = float(_RC[f"{which}tick.major.size"])
    pad = float(_RC[f"{which}tick.major.pad"])
    outside = size if _RC[f"{which}tick.direction"] == "out" else 0.0
    return _pt(outside + pad, dpi)


def _tick_size_pt(ax: Axes, which: str) -> float:
    size = (ax.xaxis if which == "x" else ax.yaxis).get_tick_params().get("labelsize")
    key = f"{which}tick.labelsize"
    return float(FontProperties(size=size or _RC[key]).get_size_in_points())


def panel_margins(ax: Axes, dpi: float) -> Margins:
    """What `ax` draws beyond its frame: tick labels, axis labels, titles, offset text."""
    found = Margins()
    y_labels = _tick_labels(ax, "y") if _labels_shown(ax, "y") else []
    if y_labels:
        size = _tick_size_pt(ax, "y")
        found.left += max(_block_px(s, size, dpi)[0] for s in y_labels) + _tick_out_px("y", dpi)
    if ax.get_ylabel():
        found.left += _text_size(ax.yaxis.label, dpi)[1] + _pt(_RC["axes.labelpad"], dpi)
    x_labels = _tick_labels(ax, "x") if _labels_shown(ax, "x") else []
    if x_labels:
        size = _tick_size_pt(ax, "x")
        found.bottom += max(_block_px(s, size, dpi)[1] for s in x_labels) + _tick_out_px("x", dpi)
        # The last label is centred on its tick: half of it may reach past the right edge.
        found.right = max(found.right, _block_px(x_labels[-1], size, dpi)[0] / 2)
        found.left = max(found.left, _block_px(x_labels[0], size, dpi)[0] / 2)
    if ax.get_xlabel():
        found.bottom += _text_size(ax.xaxis.label, dpi)[1] + _pt(_RC["axes.labelpad"], dpi)
    titles = [t for t in (ax.title, ax._left_title, ax._right_title) if t.get_text()]  # type: ignore[attr-defined]
    if titles:
        found.top += max(_text_size(t, dpi)[1] for t in titles)
        found.top += _pt(_RC["axes.titlepad"], dpi)
    offset = ax.yaxis.get_major_formatter()
    if y_labels and hasattr(offset, "get_offset") and offset.get_offset():
        found.top += _block_px(offset.get_offset(), _tick_size_pt(ax, "y"), dpi)[1]
    return found


def _titles_overflow(ax: Axes, box: Any, dpi: float) -> Margins:
    """How far `ax`'s titles reach past the sides of its frame `box` (pixels): one wider than
    its panel runs into the next."""
    found = Margins()
    for title, align in ((ax._left_title, 0.0), (ax.title, 0.5), (ax._right_title, 1.0)):  # type: ignore[attr-defined]
        if title.get_text():
            width = _text_size(title, dpi)[0]
            left = box.x0 + align * (box.width - width)
            found.left = max(found.left, box.x0 - left)
            found.right = max(found.right, left + width - box.x1)
    return found


def _texts_overflow(ax: Axes, box: Any, dpi: float) -> Margins:
    """How far the texts `ax` holds (bar values, notes) reach past its frame `box` (pixels),
    each text's extent estimated from its anchor, alignment and measured size."""
    found = _titles_overflow(ax, box, dpi)
    renderer = None
    for text in ax.texts:
        if not text.get_visible() or not text.get_text():
            continue
        if isinstance(text, Annotation):  # placed relative to its point: laid out exactly
            renderer = renderer or ax.figure.canvas.get_renderer()  # type: ignore[attr-defined]
            extent = text.get_window_extent(renderer)
            found.left = max(found.left, box.x0 - extent.x0)
            found.right = max(found.right, extent.x1 - box.x1)
            found.bottom = max(found.bottom, box.y0 - extent.y0)
            found.top = max(found.top, extent.y1 - box.y1)
            continue
        x, y = text.get_transform().transform(text.get_unitless_position())
        if not (math.isfinite(x) and math.isfinite(y)):
            continue
        width, height = _text_size(text, dpi)
        if text.get_rotation() % 180 == 90:
            width, height = height, width
        ha, va = text.get_horizontalalignment(), text.get_verticalalignment()
        left = x - {"left": 0.0, "center": width / 2, "right": width}[ha]
        bottom = (
            y
            - {
                "bottom": 0.0,
                "baseline": 0.0,
                "center": height / 2,
                "center_baseline": height / 2,
                "top": height,
            }[va]
        )
        found.left = max(found.left, box.x0 - left)
        found.right = max(found.right, left + width - box.x1)
        found.bottom = max(found.bottom, box.y0 - bottom)
        found.top = max(found.top, bottom + height - box.y1)
    return found


def _place_title(fig: Figure, dpi: float) -> float:
    """Put the figure's title (if any) at the top edge, less the pad; the pixels it takes."""
    title = fig._suptitle  # type: ignore[attr-defined]
    if title is None or not title.get_text():
        return 0.0
    title.set_y(1 - _pt(PAD_PT, dpi) / float(fig.bbox.height))
    title.set_verticalalignment("top")
    return _text_size(title, dpi)[1] + _pt(PAD_PT, dpi)


def _legends_bottom_px(fig: Figure, renderer: Any) -> float:
    """The height up to which the figure's legends (at its foot: `style.legend_below`) reach."""
    return max(
        (float(legend.get_window_extent(renderer).y1) for legend in fig.legends), default=0.0
    )


def place_panels(fig: Figure) -> None:
    """Set the margins and gaps of `fig`'s grid of panels from what each draws around it."""
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_subplotspec() is not None]
    if not panels:
        return
    dpi = float(fig.dpi)
    grid = panels[0].get_subplotspec().get_gridspec()  # type: ignore[union-attr]
    nrows, ncols = grid.get_geometry()
    width_px, height_px = float(fig.bbox.width), float(fig.bbox.height)
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    bottom_extra = _legends_bottom_px(fig, renderer)
    top_extra = _place_title(fig, dpi)
    margins = {ax: Margins() for ax in panels}
    # Measured, placed, measured again where the panels now are, until nothing grows: a
    # panel's size picks its ticks (a shorter axis, fewer and maybe wider labels), and the
    # texts it holds reach past its frame by what its data limits put where. Margins only
    # grow, so that labels of every tick set seen have room, and it settles.
    for _ in range(MAX_PASSES):
        grown = False
        for ax in panels:
            found = panel_margins(ax, dpi)
            over = _texts_overflow(ax, ax.get_position().transformed(fig.transFigure), dpi)
            for side in SIDES:
                setattr(found, side, max(getattr(found, side), getattr(over, side)))
            now = margins[ax]
            for side in SIDES:
                if getattr(found, side) > getattr(now, side) + 0.5:
                    setattr(now, side, getattr(found, side))
                    grown = True
        if not grown:
            break
        _adjust(fig, panels, margins, nrows, ncols, width_px, height_px, top_extra, bottom_extra)


def _adjust(
    fig: Figure,
    panels: Sequence[Axes],
    margins: dict[Axes, Margins],
    nrows: int,
    ncols: int,
    width_px: float,
    height_px: float,
    top_extra: float,
    bottom_extra: float,
) -> None:
    dpi = float(fig.dpi)
    pad = _pt(PAD_PT, dpi)
    rows: dict[int, list[Margins]] = {}
    cols: dict[int, list[Margins]] = {}
    for ax in panels:
        spec = ax.get_subplotspec()
        assert spec is not None
        for r in spec.rowspan:
            rows.setdefault(r, []).append(margins[ax])
        for c in spec.colspan:
            cols.setdefault(c, []).append(margins[ax])

    def most(group: list[Margins] | None, side: str) -> float:
        return max((getattr(m, side) for m in group or []), default=0.0)

    left = pad + most(cols.get(0), "left")
    right = pad + most(cols.get(ncols - 1), "right")
    top = pad + top_extra + most(rows.get(0), "top")
    bottom = pad + bottom_extra + most(rows.get(nrows - 1), "bottom")
    wgap = max(
        (
            most(cols.get(c), "right") + most(cols.get(c + 1), "left") + pad
            for c in range(ncols - 1)
        ),
        default=0.0,
    )
    hgap = max(
        (
            most(rows.get(r), "bottom") + most(rows.get(r + 1), "top") + pad
            for r in range(nrows - 1)
        ),
        default=0.0,
    )
    cell_w = max(1.0, (width_px - left - right - (ncols - 1) * wgap) / ncols)
    cell_h = max(1.0, (height_px - top - bottom - (nrows - 1) * hgap) / nrows)
    fig.subplots_adjust(
        left=min(left / width_px, 0.45),
        right=max(1 - right / width_px, 0.55),
        top=max(1 - top / height_px, 0.55),
        bottom=min(bottom / height_px, 0.45),
        wspace=wgap / cell_w,
        hspace=hgap / cell_h,
    )

"""Drawing a report figure's texts in one call a string, each string rasterized once a report.

Texts are most of what a report's plots cost to draw: a figure holds 30 to 90 (tick labels,
titles, bar values, legend entries), and matplotlib 3.11 lays each out with libraqm and draws
it glyph by glyph in Python (`RendererAgg._draw_text_glyphs_and_boxes`), about 0.6 ms a tick
label, after measuring it (0.3-0.5 ms) in a cache that lives as long as one figure's renderer.
`ReportCanvas` gives each figure a renderer that draws a string the way matplotlib did up to
3.10, FreeType rasterizing the whole string into one bitmap placed at whole pixels (about 0.2
ms), keeps those bitmaps and the strings' measurements for every figure of the process (the
same tick labels recur across panels and plots), and leaves everything else to matplotlib:
mathtext, texts with font features or a language, and a matplotlib without the per-glyph path
(it draws whole strings itself already). Same font, size and hinting; glyphs within a pixel.
"""

from __future__ import annotations

import math
from types import MethodType
from typing import Any

import numpy as np
from matplotlib.backends import backend_agg
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.font_manager import FontProperties

# matplotlib 3.11 draws glyph by glyph; the FT2Font calls below are those its draw_text made
# up to 3.10, and its Agg renderer takes a bitmap as an array.
GLYPH_BY_GLYPH = hasattr(RendererAgg, "_draw_text_glyphs_and_boxes")
MAX_CACHED = 8192  # strings kept (bitmaps of a few hundred bytes each), then the cache restarts

Bitmap = tuple[np.ndarray, float, float, float]  # image, x and y offsets, descent (pixels)
_bitmaps: dict[tuple[object, ...], Bitmap] = {}
_extents: dict[tuple[object, ...], tuple[float, float, float]] = {}


class ReportCanvas(FigureCanvasAgg):
    """Agg's canvas, its renderer drawing and measuring plain texts as the module says."""

    def get_renderer(self) -> Any:
        renderer = super().get_renderer()  # type: ignore[no-untyped-call]
        if GLYPH_BY_GLYPH and not getattr(renderer, "_whole_strings", False):
            renderer.draw_text = MethodType(_draw_text, renderer)
            renderer.get_text_width_height_descent = MethodType(measure, renderer)
            renderer._whole_strings = True
        return renderer


def _hinting() -> Any:
    """FreeType's load flags for rcParams["text.hinting"], as matplotlib's Agg reads them."""
    flag: Any = backend_agg.get_hinting_flag  # untyped
    return flag()


def _key(renderer: Any, s: str, prop: FontProperties, *more: object) -> tuple[object, ...]:
    return (s, prop.copy(), float(renderer.dpi), _hinting(), *more)


def measure(
    renderer: Any, s: str, prop: FontProperties, ismath: bool | str
) -> tuple[float, float, float]:
    """RendererAgg's measure of a plain string, kept for every renderer of the process (and
    for reports/layout.py, which measures the same strings before the figure is drawn)."""
    if ismath:
        return RendererAgg.get_text_width_height_descent(renderer, s, prop, ismath)  # type: ignore[no-untyped-call,no-any-return]
    key = _key(renderer, s, prop)
    found = _extents.get(key)
    if found is None:
        found = _lay_out(renderer, s, prop, key)
    return found


def _lay_out(
    renderer: Any, s: str, prop: FontProperties, key: tuple[object, ...]
) -> tuple[float, float, float]:
    """Lay `s` out once (FreeType's layout is most of the cost of either), keeping its measure
    as RendererAgg.get_text_width_height_descent takes it and its anti-aliased bitmap, which
    nearly every string measured is drawn with."""
    font = renderer._prepare_font(prop)
    font.set_text(s, 0.0, flags=_hinting())
    width, height = font.get_width_height()
    found = (width / 64.0, height / 64.0, font.get_descent() / 64.0)
    if len(_extents) >= MAX_CACHED:
        _extents.clear()
    _extents[key] = found
    _keep_bitmap((*key, True), font, antialiased=True)
    return found


def _keep_bitmap(key: tuple[object, ...], font: Any, antialiased: bool) -> Bitmap:
    """The string `font` has laid out, rasterized at the origin and kept under `key`."""
    font.draw_glyphs_to_bitmap(antialiased=antialiased)
    x_offset, y_offset = font.get_bitmap_offset()
    image = np.array(font.get_image(), dtype=np.uint8, copy=True)
    found = (image, x_offset / 64.0, y_offset / 64.0, font.get_descent() / 64.0)
    if len(_bitmaps) >= MAX_CACHED:
        _bitmaps.clear()
    _bitmaps[key] = found
    return found


def _bitmap(renderer: Any, s: str, prop: FontProperties, antialiased: bool) -> Bitmap:
    """The string rasterized by FreeType at the origin: its alpha image and where it goes."""
    key = _key(renderer, s, prop, antialiased)
    found = _bitmaps.get(key)
    if found is None:
        font = renderer._prepare_font(prop)
        font.set_text(s, 0, flags=_hinting())
        found = _keep_bitmap(key, font, antialiased)
    return found


def _draw_text(
    renderer: Any,
    gc: Any,
    x: float,
    y: float,
    s: str,
    prop: FontProperties,
    angle: float,
    ismath: bool | str = False,
    mtext: Any = None,
) -> None:
    shaped = mtext is not None and (
        mtext.get_fontfeatures() is not None or mtext.get_language() is not None
    )
    if ismath or shaped:
        RendererAgg.draw_text(renderer, gc, x, y, s, prop, angle, ismath, mtext)  # type: ignore[no-untyped-call]
        return
    image, x_offset, y_offset, descent = _bitmap(renderer, s, prop, bool(gc.get_antialiased()))
    x_descent = descent * math.sin(math.radians(angle))
    y_descent = descent * math.cos(math.radians(angle))
    left = round(x + x_offset + x_descent)
    top = round(y + y_offset + y_descent)
    renderer._renderer.draw_text_image(image, left, top + 1, angle, gc)

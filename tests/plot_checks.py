"""Is a figure legible? Text measured with the renderer that drew it, for every report test.

`draw_figures` draws plot jobs (reports.plot_jobs) and keeps their figures open; `problems`
lists what a reader could not read in one: tick labels on an axis that overlap each other or
fall outside the figure, titles, axis labels and legends cut by its edge, and an axis whose tick
labels mix number formats ("6e-01" beside "1"). Extents are the drawn text's bounding boxes
(matplotlib's get_window_extent), in pixels of the PNG the report embeds.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.axis import Axis
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from pagesim.reports.plot_jobs import PlotJob

TOLERANCE_PX = 0.5  # bounding boxes touching within this are not an overlap
_SCIENTIFIC = re.compile(r"\de[-+]?\d")


@contextmanager
def kept_figures() -> Iterator[list[Figure]]:
    """Figures the reports' plotting closes are kept open (and listed) inside the block, and
    closed after it."""
    kept: list[Figure] = []
    real_close = plt.close

    def keep(fig: Any = None) -> None:
        if isinstance(fig, Figure):
            kept.append(fig)
        else:
            real_close(fig)

    plt.close = keep  # type: ignore[assignment]
    try:
        yield kept
    finally:
        plt.close = real_close
        for fig in kept:
            real_close(fig)


def draw_figures(jobs: Sequence[PlotJob], plot_dir: Path) -> Iterator[tuple[str, Figure]]:
    """Draw each job (in this process) and yield (its stem, its figure): open until the next
    one is drawn (read it in the loop, not after a list() of them)."""
    for job in jobs:
        with kept_figures() as figures:
            job.draw(plot_dir / f"{job.stem}.png")
            assert len(figures) == 1, f"{job.stem}: drew {len(figures)} figures"
            yield job.stem, figures[0]


def illegible(jobs: Sequence[PlotJob], plot_dir: Path) -> list[str]:
    """Every problem of every job's figure, each line naming the plot (empty: all legible)."""
    return [f"{stem}: {p}" for stem, fig in draw_figures(jobs, plot_dir) for p in problems(fig)]


def _extent(text: Text, renderer: Any) -> Bbox | None:
    if not text.get_visible() or not text.get_text().strip():
        return None
    box: Bbox = text.get_window_extent(renderer)
    return box if box.width > 0 and box.height > 0 else None


def _shown_tick_labels(axis: Axis) -> list[Text]:
    """The labels of the ticks drawn: visible, non-empty, within the axis's view."""
    low, high = sorted(axis.get_view_interval())
    span = high - low
    shown = []
    for minor in (False, True):
        ticks = axis.get_minor_ticks() if minor else axis.get_major_ticks()
        locs = axis.get_minorticklocs() if minor else axis.get_majorticklocs()
        for tick, loc in zip(ticks, locs, strict=False):
            if not low - 1e-9 * span <= loc <= high + 1e-9 * span:
                continue
            for text in (tick.label1, tick.label2):
                if text.get_visible() and text.get_text().strip():
                    shown.append(text)
    return shown


def _overlap(a: Bbox, b: Bbox) -> bool:
    return (
        min(a.x1, b.x1) - max(a.x0, b.x0) > TOLERANCE_PX
        and min(a.y1, b.y1) - max(a.y0, b.y0) > TOLERANCE_PX
    )


def _outside(box: Bbox, fig: Figure) -> bool:
    frame = fig.bbox
    return (
        box.x0 < frame.x0 - TOLERANCE_PX
        or box.y0 < frame.y0 - TOLERANCE_PX
        or box.x1 > frame.x1 + TOLERANCE_PX
        or box.y1 > frame.y1 + TOLERANCE_PX
    )


def problems(fig: Figure) -> list[str]:
    """What a reader could not read in the (drawn) figure, one line each; empty when legible."""
    fig.canvas.draw()  # as saved (style.save placed the panels before drawing)
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    found = []
    for number, ax in enumerate(a for a in fig.axes if a.get_visible()):
        name = f"axes {number} ({ax.get_title(loc='left') or ax.get_title() or 'untitled'})"
        for which, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            labels = _shown_tick_labels(axis)
            boxes = [(t.get_text(), _extent(t, renderer)) for t in labels]
            shown = [(text, box) for text, box in boxes if box is not None]
            for i, (text, box) in enumerate(shown):
                if _outside(box, fig):
                    found.append(f"{name}: {which} tick label {text!r} is cut by the figure edge")
                for other, other_box in shown[i + 1 :]:
                    if _overlap(box, other_box):
                        found.append(f"{name}: {which} tick labels {text!r} and {other!r} overlap")
            texts = [text for text, _ in shown]
            scientific = [t for t in texts if _SCIENTIFIC.search(t)]
            if scientific and len(scientific) < len(texts):
                found.append(f"{name}: {which} tick labels mix formats: {texts}")
        for text in (ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label):
            box = _extent(text, renderer)
            if box is not None and _outside(box, fig):
                found.append(f"{name}: {text.get_text()!r} is cut by the figure edge")
    legends = list(fig.legends) + [a.get_legend() for a in fig.axes if a.get_legend()]
    for legend in legends:
        box = legend.get_window_extent(renderer)
        if _outside(box, fig):
            shown = [t.get_text() for t in legend.get_texts()]
            found.append(f"legend {shown} is cut by the figure edge")
    suptitle = fig._suptitle
    if suptitle is not None:
        box = _extent(suptitle, renderer)
        if box is not None and _outside(box, fig):
            found.append(f"title {suptitle.get_text()!r} is cut by the figure edge")
    return found + collisions(fig, renderer)


def collisions(fig: Figure, renderer: Any) -> list[str]:
    """Decorations of the drawn figure that overlap one another: a panel's tick labels, axis
    labels and titles against another panel's (and its frame), against its own other texts,
    and against the figure's title and legends. Where a layout puts them is what this checks."""
    pieces: list[tuple[str, object, Bbox]] = []  # (what, whose, box)
    for number, ax in enumerate(a for a in fig.axes if a.get_visible()):
        pieces.append((f"axes {number} frame", ax, ax.bbox))
        for which, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            boxes = [_extent(t, renderer) for t in _shown_tick_labels(axis)]
            shown = [b for b in boxes if b is not None]
            if shown:
                pieces.append((f"axes {number} {which} tick labels", ax, Bbox.union(shown)))
        for text in (ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label):
            box = _extent(text, renderer)
            if box is not None:
                pieces.append((f"axes {number} {text.get_text()!r}", ax, box))
    suptitle = fig._suptitle
    if suptitle is not None and (box := _extent(suptitle, renderer)) is not None:
        pieces.append((f"title {suptitle.get_text()!r}", fig, box))
    for legend in fig.legends:
        pieces.append(("the legend below", legend, legend.get_window_extent(renderer)))
    found = []
    for i, (what, whose, box) in enumerate(pieces):
        for other, other_whose, other_box in pieces[i + 1 :]:
            frames = what.endswith("frame") or other.endswith("frame")
            if (whose is other_whose and frames) or not _overlap(box, other_box):
                continue  # a panel's own decorations sit on its frame's edge
            if whose is other_whose and "tick labels" in what and "tick labels" in other:
                continue  # an x and a y tick label meet at the corner by design
            found.append(f"{what} overlaps {other}")
    return found


def tick_texts(axis: Axis) -> list[str]:
    """The drawn tick labels of an axis, in order (for tests that read them)."""
    return [t.get_text() for t in _shown_tick_labels(axis)]

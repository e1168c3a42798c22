"""Drawing an axis with its ticks worked out and measured once, not three times.

matplotlib's `Axis.draw` updates its ticks (locations, labels, one `Tick` each) and measures
their labels to draw them; then, to place the axis label clear of those labels, it updates the
ticks and measures the labels again (`_update_label_position`), and the spine, to know how far
the tick marks reach, updates them a third time. Nothing changes in between: the same ticks,
the same boxes. `measured_once(fig)` has every axis of the figure, while it is drawn, hand
those later calls what the first one found: 5-6% of drawing a report's plots
(disaggregated_vs_colocated's 9, CPU time, 7 December 2026), the same pixels.

An axis whose label is aligned with other panels' (`Figure.align_xlabels`: no report plot
does) is drawn as matplotlib draws it, since it measures those panels' ticks too; so is every
axis of a matplotlib without these steps.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import MethodType
from typing import Any

from matplotlib.axis import Axis
from matplotlib.figure import Figure

_STEPS = ("_update_ticks", "_get_ticklabel_bboxes", "_get_axis_name")


def _alone(axis: Any) -> bool:
    """Whether `axis`'s label is placed from its own ticks only (no aligned siblings)."""
    groups = axis.get_figure(root=False)._align_label_groups
    grouper = groups.get(axis._get_axis_name())
    return grouper is None or list(grouper.get_siblings(axis.axes)) == [axis.axes]


def _draw_measured_once(axis: Any, renderer: Any) -> None:
    """matplotlib's `Axis.draw`, its later tick updates and label measures answered from the
    first ones."""
    if not _alone(axis):
        type(axis).draw(axis, renderer)
        return
    ticks = axis._update_ticks()
    boxes = axis._get_ticklabel_bboxes(ticks, renderer)
    axis._update_ticks = lambda: ticks
    axis._get_ticklabel_bboxes = lambda _ticks, _renderer=None: boxes
    try:
        type(axis).draw(axis, renderer)
    finally:
        del axis._update_ticks, axis._get_ticklabel_bboxes


@contextmanager
def measured_once(fig: Figure) -> Iterator[None]:
    """Inside the block, every axis of `fig` draws as the module docstring says."""
    if not all(hasattr(Axis, step) for step in _STEPS):
        yield
        return
    axes: list[Any] = [axis for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)]
    for axis in axes:
        axis.draw = MethodType(_draw_measured_once, axis)
    try:
        yield
    finally:
        for axis in axes:
            del axis.draw

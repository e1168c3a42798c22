"""A log axis's unlabelled minor ticks drawn as one artist instead of one Tick each.

matplotlib builds a `Tick` for every minor tick of an axis (two tick lines, a grid line and two
labels, each a full artist): a log axis over three decades has about twenty, and building them
was a fifth of drawing the latency distributions (30 ms a report, spec_decode and
memory_waste_contiguous_vs_paged, 7 December 2026). `MinorMarks` draws the same marks, at the
same places (a LogLocator's, over the axis's view as drawn), length, width and colour (the
rcParams of minor ticks), as the markers of one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.markers import TICKDOWN, TICKLEFT, TICKRIGHT, TICKUP
from matplotlib.ticker import LogLocator, NullLocator

_RC: Any = mpl.rcParams  # read with keys built from the axis name, which its stubs refuse


class MinorMarks(Line2D):
    """Tick marks at `subs` of every decade of `ax`'s x or y axis (base 10), outside its frame
    on the bottom or left spine as the axis's own minor ticks would be."""

    def __init__(self, ax: Axes, axis: str, subs: Sequence[float]) -> None:
        self._which = axis
        self._locator = LogLocator(base=10, subs=tuple(subs))
        self._ax = ax
        out = _RC[f"{axis}tick.direction"] == "out"
        marker: Any = (
            (TICKDOWN if out else TICKUP) if axis == "x" else (TICKLEFT if out else TICKRIGHT)
        )
        super().__init__(
            [],
            [],
            linestyle="none",
            marker=marker,
            markersize=_RC[f"{axis}tick.minor.size"],
            markeredgewidth=_RC[f"{axis}tick.minor.width"],
            color=_RC[f"{axis}tick.color"],
            clip_on=False,
            transform=ax.get_xaxis_transform() if axis == "x" else ax.get_yaxis_transform(),
            zorder=2.5,
        )
        self.set_in_layout(False)

    def draw(self, renderer: Any) -> None:
        low, high = sorted(self._ax.get_xlim() if self._which == "x" else self._ax.get_ylim())
        if not 0 < low < high:
            return
        locs = np.asarray(self._locator.tick_values(low, high), dtype=float)
        locs = locs[(locs >= low) & (locs <= high)]
        if self._which == "x":
            self.set_data(locs, np.zeros(len(locs)))
        else:
            self.set_data(np.zeros(len(locs)), locs)
        super().draw(renderer)


def mark_minor(ax: Axes, axis: str, subs: Sequence[float]) -> None:
    """Replace `ax`'s minor ticks on `axis` ("x" or "y") by MinorMarks at `subs` (none: none)."""
    (ax.xaxis if axis == "x" else ax.yaxis).set_minor_locator(NullLocator())
    if subs:
        ax.add_line(MinorMarks(ax, axis, subs))

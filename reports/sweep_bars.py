"""Bars of the metrics a scenario asks about: one panel per metric, a bar per sweep point named by
what differs (a sweep over models, dtypes, traces: "KV capacity per model" as a picture, not
only a column of sweep.csv) or per system of a run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import EngFormatter

from pagesim.reports.curves import panel
from pagesim.reports.style import figure, label, no_data, save, system_color
from pagesim.reports.sweep_axes import point_names


def plot_sweep_bars(sweep: pd.DataFrame, path: Path, *, metrics: Sequence[str], title: str) -> Path:
    """Each of `metrics` (a panel each) at every row of `sweep` (a sweep's points, or a run's
    systems), one horizontal bar per row named by `point_names`, with its value written beside
    it. Rows missing a value show none."""
    names = [label(n, 36) for n in point_names(sweep)]
    # One panel a row: the points' names take the left of every panel, its title the width.
    height = len(metrics) * (0.9 + 0.38 * len(names)) + 0.6
    with figure(max(1, len(metrics)), 1, height) as (fig, axes):
        y = np.arange(len(names))[::-1]  # the first point on top
        colors = [system_color(i) for i in range(len(names))]
        for ax, column in zip(axes.ravel(), metrics, strict=False):
            heading, scale = panel(column)
            ax.set_title(label(heading, 60), loc="left")
            values = scale * pd.to_numeric(sweep[column], errors="coerce").to_numpy(float)
            if not np.isfinite(values).any():
                no_data(ax, f"no values of {column}")
                continue
            ax.barh(y, np.nan_to_num(values), color=colors, height=0.6)
            top = float(np.nanmax(np.abs(values))) or 1.0
            for yi, value in zip(y, values, strict=True):
                if np.isfinite(value):
                    ax.text(value + 0.02 * top, yi, _number(value), va="center", fontsize=8)
            ax.set_xlim(0, top * 1.25)
            if top >= 1e4:  # 702,336 tokens: ticks as 200k, 400k, not 200000 running together
                ax.xaxis.set_major_formatter(EngFormatter(sep=""))
            ax.set_yticks(y, names)
            ax.grid(axis="y", visible=False)
        fig.suptitle(label(title, 90))
        return save(fig, path)


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"

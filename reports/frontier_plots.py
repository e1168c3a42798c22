"""The Pareto-frontier plot: throughput per GPU vs per user, and cost vs p99 TTFT, every point
labelled by its configuration, the frontier bold and joined, the dominated points faint.

Renders a frontier table (simulator/studies/frontier.py); never recomputes a run.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

from pagesim.reports.html import Plot, figures_html
from pagesim.reports.style import (
    figure,
    label,
    legend_below,
    log_scale,
    no_data,
    save,
    system_color,
)
from pagesim.simulator.studies.frontier import (
    COST_LATENCY,
    FRONTIER_FILE,
    THROUGHPUT,
    Frontier,
    cost_label,
    has_frontier,
    sweep_frontier_table,
)

MAX_LABELS = 60  # more points than this: only the frontier's are labelled (the CSV has them all)
FAINT = 0.25
WIDE = 30.0  # an axis whose values span more than this ratio is drawn on a log scale
TITLE = "Pareto frontier"
CAPTION = (
    "Left: output tokens/s per GPU against tokens/s per user (1 / median TPOT), both better "
    "higher. Right: cost per million tokens (prompt + output tokens served; GPU-hours without "
    "prices) against p99 TTFT, both better lower. Bold points joined by a line are on the "
    "frontier: no other configuration is as good on both axes and better on one; faint ones are "
    "dominated. Every configuration is labelled; frontier.csv has the values."
)
_AXIS_WORDS = {
    THROUGHPUT.x: "output tokens/s per user (1 / median TPOT)",
    THROUGHPUT.y: "output tokens/s per GPU",
    COST_LATENCY.x: "p99 TTFT (s)",
}


def _panel(ax: Axes, table: pd.DataFrame, frontier: Frontier, colors: dict[str, str]) -> None:
    x = pd.to_numeric(table[frontier.x], errors="coerce").to_numpy(float)
    y = pd.to_numeric(table[frontier.y], errors="coerce").to_numpy(float)
    ax.set_xlabel(_AXIS_WORDS.get(frontier.x, frontier.x))
    ax.set_ylabel(_AXIS_WORDS.get(frontier.y, cost_label(table)))
    usable = np.isfinite(x) & np.isfinite(y)
    if not usable.any():
        no_data(ax, "no configuration has both values")
        return
    on = table[frontier.flag].to_numpy(bool)
    groups = table["system"].astype(str).to_numpy() if "system" in table else None
    for i in np.flatnonzero(usable):
        color = colors[str(groups[i])] if groups is not None else system_color(0)
        alpha = 1.0 if on[i] else FAINT
        ax.plot(x[i], y[i], "o", color=color, alpha=alpha, ms=6 if on[i] else 4)
    for values, axis in ((x[usable], "x"), (y[usable], "y")):
        positive = values[values > 0]
        if len(positive) == len(values) and positive.max() > WIDE * positive.min():
            log_scale(ax, axis)
    order = np.flatnonzero(on)
    order = order[np.argsort(x[order])]
    ax.plot(x[order], y[order], "-", color="#2d3748", lw=1.2, alpha=0.8)
    show_all = usable.sum() <= MAX_LABELS
    names = table["config"].astype(str)
    if groups is not None and len(set(groups)) == 1:  # one system: the legend names it
        names = names.str.removeprefix(f"{groups[0]} ")
    for i in np.flatnonzero(usable & (on | show_all)):
        ax.annotate(
            label(names.iloc[i], 40),
            (x[i], y[i]),
            xytext=(4, 3),
            textcoords="offset points",
            fontsize=7 if on[i] else 6,
            alpha=1.0 if on[i] else 0.45,
        )


def plot_frontier(table: pd.DataFrame, path: Path, title: str = TITLE) -> Path:
    """Two panels (THROUGHPUT, COST_LATENCY) of a frontier table; colors by system."""
    systems = list(dict.fromkeys(table["system"].astype(str))) if "system" in table else []
    colors = {name: system_color(i) for i, name in enumerate(systems)}
    with figure(1, 2, 5.2) as (fig, axes):
        for ax, frontier in zip(axes[0], (THROUGHPUT, COST_LATENCY), strict=True):
            if table.empty:
                no_data(ax, "no configuration met the criteria")
                continue
            _panel(ax, table, frontier, colors)
        handles = [Line2D([], [], color=colors[s], marker="o", ls="") for s in systems]
        legend_below(fig, handles, [label(s) for s in systems], min(4, max(1, len(systems))))
        fig.suptitle(title)
        return save(fig, path)


def sweep_frontier(sweep: pd.DataFrame) -> pd.DataFrame | None:
    """The frontier table of a sweep (or a rate search's evaluations), or None when the table
    lacks what a frontier needs."""
    if not has_frontier(sweep):
        return None
    return sweep_frontier_table(sweep)


def frontier_plot(table: pd.DataFrame, plot_dir: Path) -> Plot:
    """Draw a frontier table into plot_dir/frontier.png: the report's figure."""
    return Plot(plot_frontier(table, plot_dir / "frontier.png"), TITLE, CAPTION)


def frontier_section(table: pd.DataFrame, plot_dir: Path, start: int = 1) -> str:
    """The HTML of a search page's frontier section: the figure (numbered `start`) and the
    CSV's name."""
    return figures_html([frontier_plot(table, plot_dir)], start) + (
        f"<p>Every fleet that met the SLO, with its values and frontier flags: "
        f'<a href="{FRONTIER_FILE}">{FRONTIER_FILE}</a>.</p>'
    )

"""Systems side by side: one panel per metric, a horizontal bar per system.

Each bar's value is written at its end, so a panel has no value axis (its ticks, a third of
drawing the figure, would only repeat the values); the unit is in the panel's title.
Horizontal, because systems' names are long and alike ("disaggregated P:D TP1:TP1 3P1D" beside
"... TP2:TP1 2P1D"): on the y-axis each is written once, whole, on the left of the first panel,
where tilted labels under vertical bars were cut short to the same text. A system the figure
should show but cannot (a colocated fleet that never met the SLO) keeps its row, empty, with the
reason written under its name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes

from pagesim.reports.style import NO_DATA_COLOR, figure, label, save, system_color

ROW_IN = 0.42  # figure height per system row
NAME_WIDTH = 48  # characters of a system's name shown
PER_ROW = 5  # panels side by side; more wrap to a second row of panels, names on its left too
NO_AXIS_IN = 0.4  # the height a value axis (tick labels, unit) would take, which a panel lacks


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    values: Sequence[float | None]  # one per system shown, None where it has no value


def figure_height(num_rows: int) -> float:
    return 1.3 + ROW_IN * max(2, num_rows)


def system_rows(
    ax: Axes, names: Sequence[str], missing: Sequence[tuple[str, str]], *, labelled: bool
) -> None:
    """The y-axis of a panel: systems top to bottom, then the missing ones, each with its
    reason on a second line, in gray."""
    rows = [label(n, NAME_WIDTH) for n in names]
    rows += [f"{label(name, NAME_WIDTH)}\n{label(why, NAME_WIDTH)}" for name, why in missing]
    ax.set_yticks(np.arange(len(rows)), rows if labelled else [])
    if labelled:
        for text in ax.get_yticklabels()[len(names) :]:
            text.set_color(NO_DATA_COLOR)
            text.set_fontstyle("italic")
    ax.set_ylim(len(rows) - 0.5, -0.5)  # the first system on top
    ax.grid(axis="y", visible=False)


def plot_side_by_side(
    path: Path,
    names: Sequence[str],
    panels: Sequence[Panel],
    title: str,
    missing: Sequence[tuple[str, str]] = (),
) -> Path:
    """A panel per metric, a bar per system (colored as elsewhere in the report), its value
    written at the bar's end; `missing` are (name, why) rows drawn empty with their reason.
    More than PER_ROW panels wrap into rows as even as they divide (7: 4 and 3)."""
    rows_of_panels = max(1, -(-len(panels) // PER_ROW))
    columns = max(1, -(-len(panels) // rows_of_panels))
    height = rows_of_panels * (figure_height(len(names) + len(missing)) - NO_AXIS_IN)
    with figure(rows_of_panels, columns, height) as (fig, axes):
        for ax in axes.ravel()[len(panels) :]:
            ax.set_visible(False)
        for index, panel in enumerate(panels):
            col = index % columns
            ax = axes[index // columns, col]
            heading = f"{panel.title} ({panel.unit})" if panel.unit else panel.title
            ax.set_title(label(heading, 34), loc="left", fontsize=9)
            ax.set_xticks([])  # each bar's value is written at its end: no axis to repeat it
            heights = np.array([np.nan if v is None else v for v in panel.values], dtype=float)
            rows = np.arange(len(names))
            colors = [system_color(i) for i in range(len(names))]
            ax.barh(rows, np.nan_to_num(heights), color=colors)
            top = float(np.nanmax(heights, initial=0.0))
            for row, h in enumerate(heights):
                text = "-" if np.isnan(h) else f"{h:.3g}"
                ax.text(0 if np.isnan(h) else h, row, f" {text}", va="center", fontsize=8)
            for empty in range(len(names), len(names) + len(missing)):
                ax.text(0, empty, " -", va="center", fontsize=8, color=NO_DATA_COLOR)
            ax.set_xlim(0, 1.3 * top if top > 0 else 1.0)  # room for the values written
            system_rows(ax, names, missing, labelled=col == 0)
        fig.suptitle(title)
        return save(fig, path)

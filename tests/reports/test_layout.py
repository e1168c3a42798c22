"""Report figures are laid out by reports/layout.py from their measured texts (issue 29 item 2:
cheaper than constrained layout) and their texts drawn whole by reports/text_drawing.py: nothing
cut by the figure's edge, no decoration over another panel's, the legend below clear of the
panels, and texts that look as matplotlib's own drawing makes them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from PIL import Image
from plot_checks import collisions, kept_figures, problems

from pagesim.reports import text_drawing
from pagesim.reports.layout import text_size_px
from pagesim.reports.style import DPI, figure, legend_below, save


def test_the_check_finds_a_legend_over_a_label_and_labels_over_a_panel() -> None:
    """The check can fail: panels squeezed together and a legend over the axis labels."""
    fig = Figure(figsize=(6, 2.5), dpi=DPI)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2)
    fig.subplots_adjust(wspace=0.0, bottom=0.1)
    for ax in axes:
        ax.plot([0, 1], [0, 1e6])
        ax.set_xlabel("simulated time (s)")
    fig.legend([Line2D([], [])], ["a system"], loc="lower center")
    fig.canvas.draw()
    found = "\n".join(collisions(fig, fig.canvas.get_renderer()))  # type: ignore[attr-defined]
    assert "axes 1 y tick labels overlaps" in found or "overlaps axes 1 y tick labels" in found
    assert "the legend below" in found


def test_the_margins_make_room_for_wide_labels_and_the_legend(tmp_path: Path) -> None:
    with kept_figures() as figures, figure(2, 2, 5.0) as (fig, axes):
        for ax in axes.flat:
            ax.plot([0, 1, 2], [0, 2.5e6, 1e6])
            ax.set_title("panel", loc="left")
            ax.set_xlabel("simulated time (s)")
        axes[0, 0].set_ylabel("requests\nwaiting")
        legend_below(fig, [Line2D([], [])] * 6, [f"system {i}" for i in range(6)], 4)
        fig.suptitle("A figure")
        save(fig, tmp_path / "wide.png")
    (drawn,) = figures
    assert problems(drawn) == []
    legend = drawn.legends[0].get_window_extent(drawn.canvas.get_renderer())  # type: ignore[attr-defined]
    lowest = min(ax.get_tightbbox().y0 for ax in drawn.axes)  # type: ignore[union-attr]
    assert legend.y1 <= lowest  # two rows of entries, under the lowest x label


@settings(max_examples=12, deadline=None)
@given(
    rows=st.integers(1, 3),
    cols=st.integers(1, 3),
    scale=st.sampled_from([1e-3, 1.0, 37.0, 1e4, 3e6]),
    titled=st.booleans(),
    ylabel_lines=st.integers(0, 2),
    entries=st.integers(0, 9),
    share_y=st.booleans(),
)
def test_no_figure_shape_cuts_or_overlaps_its_texts(
    rows: int,
    cols: int,
    scale: float,
    titled: bool,
    ylabel_lines: int,
    entries: int,
    share_y: bool,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    path = tmp_path_factory.mktemp("shapes") / "figure.png"
    with (
        kept_figures() as figures,
        figure(rows, cols, 1.0 + 2.2 * rows, sharey=share_y) as (
            fig,
            axes,
        ),
    ):
        for i, ax in enumerate(axes.flat):
            ax.plot(np.arange(5.0), scale * (1 + np.arange(5.0) * (i + 1)))
            if titled:
                ax.set_title(f"panel {i}: a title", loc="left")
            ax.set_ylabel("\n".join(["share (%)"] * ylabel_lines))
            ax.set_xlabel("simulated time (s)")
        handles = [Line2D([], [], color="C0")] * entries
        legend_below(fig, handles, [f"system number {i}" for i in range(entries)], 4)
        fig.suptitle("Utilization over time")
        save(fig, path)
    (drawn,) = figures
    assert problems(drawn) == []


def test_a_text_drawn_whole_looks_as_matplotlib_draws_it() -> None:
    """The same ink within a pixel or so: the string placed at whole pixels, its glyphs the
    same FreeType bitmaps."""

    def draw(canvas_class: type[FigureCanvasAgg]) -> np.ndarray:
        fig = Figure(figsize=(3, 1), dpi=DPI, facecolor="white")
        canvas = canvas_class(fig)
        fig.text(0.1, 0.5, "simulated time (s) → 0.25 µs", fontsize=10)
        fig.text(0.02, 0.1, "share of KV capacity (%)", rotation=90, fontsize=8)
        canvas.draw()
        return np.asarray(canvas.buffer_rgba())[..., 0].astype(float)

    ours, theirs = draw(text_drawing.ReportCanvas), draw(FigureCanvasAgg)
    ink_ours, ink_theirs = np.argwhere(ours < 128), np.argwhere(theirs < 128)
    assert abs(len(ink_ours) - len(ink_theirs)) <= 0.1 * len(ink_theirs)
    assert np.abs(ink_ours.min(axis=0) - ink_theirs.min(axis=0)).max() <= 1
    assert np.abs(ink_ours.max(axis=0) - ink_theirs.max(axis=0)).max() <= 1
    assert np.abs(ours - theirs).mean() < 3  # of 255, over the whole image


def test_a_measure_is_kept_for_every_figure_and_agrees_with_matplotlibs() -> None:
    fig = Figure(figsize=(3, 1), dpi=DPI)
    canvas = text_drawing.ReportCanvas(fig)
    text = fig.text(0.1, 0.5, "0.75", fontsize=10)
    canvas.draw()
    ours = text.get_window_extent()
    plain = Figure(figsize=(3, 1), dpi=DPI)
    FigureCanvasAgg(plain)
    theirs = plain.text(0.1, 0.5, "0.75", fontsize=10)
    plain.canvas.draw()
    assert ours.width == pytest.approx(theirs.get_window_extent().width)
    assert ours.height == pytest.approx(theirs.get_window_extent().height)
    assert text_size_px("0.75", 10.0, float(DPI))[0] == pytest.approx(ours.width)


def test_a_report_png_is_written_with_the_texts(tmp_path: Path) -> None:
    with figure(1, 1, 2.0) as (fig, axes):
        axes[0, 0].set_title("a title", loc="left")
        path = save(fig, tmp_path / "t.png")
    pixels = np.asarray(Image.open(path).convert("L"))
    assert (pixels[:30] < 100).any()  # the title's ink at the top

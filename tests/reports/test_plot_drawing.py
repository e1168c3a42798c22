"""How a report's plots are drawn cheaply without changing what they show (issue 29 item 2):
the work dealt into shares of about equal cost, titles placed at a fixed height unless an axis
writes its offset text where a title would cover it, PNGs written opaque."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, NullFormatter
from PIL import Image
from plot_checks import kept_figures

from pagesim.reports.axis_drawing import measured_once
from pagesim.reports.minor_marks import mark_minor
from pagesim.reports.plot_drawing import shares
from pagesim.reports.style import figure, save


def test_the_dearest_plots_go_first_each_to_the_lightest_share() -> None:
    assert shares([1.3, 0.5, 1.3, 1.0, 0.8], 2) == [[0, 3], [2, 4, 1]]
    assert shares([1.0, 1.0], 3) == [[0], [1], []]


@given(
    st.lists(st.floats(min_value=0.0, max_value=10.0), max_size=30),
    st.integers(min_value=1, max_value=8),
)
def test_every_plot_is_in_one_share_and_no_share_outweighs_another_by_more_than_one_plot(
    costs: list[float], num_shares: int
) -> None:
    dealt = shares(costs, num_shares)
    assert len(dealt) == num_shares
    assert sorted(i for share in dealt for i in share) == list(range(len(costs)))
    totals = [sum(costs[i] for i in share) for share in dealt]
    assert max(totals) - min(totals) <= max(costs, default=0.0) + 1e-9


def test_a_title_stays_clear_of_the_offset_text_over_its_axis(tmp_path: Path) -> None:
    """Large values with small differences make matplotlib write '1e7' (or '+1e7') over the
    y axis: the title then moves above it, as matplotlib's own placement would put it."""
    with kept_figures() as figures, figure(1, 2, 3.0) as (fig, axes):
        axes[0, 0].plot([0, 1, 2], 1e7 + np.array([0.0, 1.0, 2.0]))
        axes[0, 0].set_title("offset", loc="left")
        axes[0, 1].plot([0, 1, 2], [0.0, 1.0, 2.0])
        axes[0, 1].set_title("plain", loc="left")
        save(fig, tmp_path / "offset.png")
    (drawn,) = figures
    renderer = drawn.canvas.get_renderer()  # type: ignore[attr-defined]
    ax = drawn.axes[0]
    offset = ax.yaxis.offsetText
    assert offset.get_text()
    title = ax._left_title.get_window_extent(renderer)
    assert title.y0 >= offset.get_window_extent(renderer).y1
    assert drawn.axes[1]._left_title.get_window_extent(renderer).y0 >= ax.bbox.y1


def test_a_plot_is_written_opaque_at_the_reports_resolution(tmp_path: Path) -> None:
    with figure(1, 1, 2.0) as (fig, axes):
        axes[0, 0].plot([0, 1], [0, 1])
        path = save(fig, tmp_path / "line.png")
    with Image.open(path) as image:
        assert image.mode == "P" and "transparency" not in image.info  # 256 opaque colors
        assert image.size == (1100, 220)
        assert round(image.info["dpi"][0]) == 110


def test_a_plots_256_colors_stay_close_to_the_colors_drawn(tmp_path: Path) -> None:
    with kept_figures() as figures, figure(1, 2, 3.0) as (fig, axes):
        for i, ax in enumerate(axes[0]):
            ax.stackplot(np.arange(50), np.random.default_rng(i).random((5, 50)))
            ax.set_title("anti-aliased edges of five colors", loc="left")
        path = save(fig, tmp_path / "stack.png")
    (drawn,) = figures
    canvas: Any = drawn.canvas
    shown = np.asarray(canvas.buffer_rgba())[..., :3].astype(int)
    with Image.open(path) as image:
        written = np.asarray(image.convert("RGB")).astype(int)
    assert np.abs(written - shown).max() <= 24
    assert np.abs(written - shown).mean() < 2
    assert (written[0, 0] == 255).all() and (written[-1, -1] == 255).all()  # the face: white


@pytest.mark.parametrize("axis", ["x", "y"])
def test_minor_marks_draw_the_pixels_matplotlibs_minor_ticks_draw(axis: str) -> None:
    """One artist for a log axis's unlabelled minor ticks, not a Tick each: the same image."""

    def drawn(ours: bool) -> np.ndarray:
        fig = Figure(figsize=(4, 3), dpi=110, facecolor="white")
        canvas = FigureCanvasAgg(fig)
        ax = fig.subplots()
        ax.plot([0.03, 70.0], [0.03, 70.0])
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
        target = ax.xaxis if axis == "x" else ax.yaxis
        target.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        subs = (3.0, 4.0, 6.0, 7.0, 8.0, 9.0)
        if ours:
            mark_minor(ax, axis, subs)
        else:
            target.set_minor_locator(LogLocator(base=10, subs=subs))
        target.set_minor_formatter(NullFormatter())
        canvas.draw()
        return np.asarray(canvas.buffer_rgba()).astype(int)

    theirs, ours = drawn(False), drawn(True)
    assert (theirs != 255).any()
    assert np.abs(ours - theirs).max() == 0


_FRESH_IMPORT = """
import matplotlib  # the package imported first, as other code may have: no help is skipped yet
import pagesim.reports.render
from matplotlib.artist import Artist, kwdoc
from matplotlib.lines import Line2D

assert Line2D.set.__doc__ is None, "matplotlib was imported before reports.matplotlib_import"
line = Line2D([0], [0])
line.set(color="red", lw=3, linestyle="--")  # an alias and the full names, as before
assert (line.get_color(), line.get_linewidth(), line.get_linestyle()) == ("red", 3, "--")


class Later(Line2D):  # defined after the import: matplotlib's own step again
    pass


assert "linewidth" in (Later.set.__doc__ or ""), "matplotlib's step was not put back"
assert "linewidth" in kwdoc(Line2D)
print("ok")
"""


def test_a_report_imports_matplotlib_without_the_artists_set_help_and_puts_it_back() -> None:
    """reports.matplotlib_import: render imports it before any plotting module, the artists it
    defines set every property as before, and a class defined later has its help again."""
    done = subprocess.run(
        [sys.executable, "-c", _FRESH_IMPORT], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def _labelled_panels(ours: bool) -> tuple[np.ndarray, int]:
    """Two panels with axis labels, a log axis and an offset text, drawn with each axis's ticks
    measured once (ours) or as matplotlib draws them: the pixels and the tick updates made."""
    fig = Figure(figsize=(6, 3), dpi=110, facecolor="white")
    canvas = FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    left.plot([0, 1, 2], 1e7 + np.array([0.0, 1.0, 2.0]))
    left.set_xlabel("simulated time (s)")
    left.set_ylabel("tokens")
    right.plot([0.03, 70.0], [1, 2])
    right.set_xscale("log")
    right.set_xlabel("TTFT (s)")
    real = Axis._update_ticks
    calls = []

    def counted(axis: Any) -> Any:
        calls.append(axis)
        return real(axis)

    Axis._update_ticks = counted  # type: ignore[method-assign]
    try:
        if ours:
            with measured_once(fig):
                canvas.draw()
        else:
            canvas.draw()
    finally:
        Axis._update_ticks = real  # type: ignore[method-assign]
    return np.asarray(canvas.buffer_rgba()).copy(), len(calls)


def test_an_axis_measured_once_draws_the_same_pixels_with_a_third_of_the_tick_updates() -> None:
    theirs, their_updates = _labelled_panels(ours=False)
    ours, our_updates = _labelled_panels(ours=True)
    assert (theirs == ours).all()
    assert (their_updates, our_updates) == (12, 4)  # 2 panels x 2 axes, 3 times and once

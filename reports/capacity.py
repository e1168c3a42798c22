"""Capacity-search output: the max-sustainable-rate plot and a capacity.html page.

Both render the ranking table of `simulator.studies.capacity_search.CapacityRun.ranking()` (one row
per configuration, best goodput per GPU first: config, system, max_rate_per_s, failed_rate_per_s,
goodput_per_gpu, num_gpus, ...) and never recompute the search. The answer in words is
`capacity_findings`'s, one function: capacity.html and the report.html beside it (the curves of
every evaluated rate) both lead with its sentences, so the two pages cannot disagree.

The same idea in other layers: `pagesim capacity`'s [capacity] table is simulator/core/capacity.py,
read by simulator/scenario/capacity.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.reports.html import Plot, esc, figures_html, findings_html, page, sweep_table
from pagesim.reports.style import figure, label, legend_below, no_data, save, system_color

MAX_BARS = 40  # more configurations than this: the best 40 are drawn (the CSV has them all)


def _rate(value: object) -> float | None:
    number = pd.to_numeric(pd.Series([value]), errors="coerce").iloc[0]
    return None if pd.isna(number) else float(number)


def capacity_findings(ranking: pd.DataFrame) -> list[str]:
    """The search's answer, one sentence per configuration, best goodput per GPU first: the
    highest rate it sustained, the lowest it did not, and its goodput per GPU there."""
    found = []
    for _, row in ranking.iterrows():
        name, ok, bad = (
            str(row["config"]),
            _rate(row["max_rate_per_s"]),
            _rate(row["failed_rate_per_s"]),
        )
        if ok is None:
            lowest = f" (it failed at {bad:.3g} req/s, the lowest rate tried)" if bad else ""
            found.append(f"{name} sustains no rate tried{lowest}.")
            continue
        limit = f", fails at {bad:.3g} req/s" if bad is not None else ", the highest rate tried"
        share, per_gpu = _rate(row.get("slo_share")), _rate(row.get("goodput_per_gpu"))
        met = f", {share:.1%} of requests meeting the SLO" if share is not None else ""
        good = f": goodput {per_gpu:.3g} req/s per GPU" if per_gpu is not None else ""
        found.append(f"{name} sustains up to {ok:.3g} req/s{limit}{good}{met}.")
    return found


def plot_max_rate(ranking: pd.DataFrame, path: Path) -> Path:
    """Horizontal bars: each configuration's highest sustained rate (req/s), best ranked on top,
    colored by system; an empty hatched box reaches to the lowest failed rate (where the limit
    lies, as the search bracketed it); the label gives goodput/GPU."""
    shown = ranking.head(MAX_BARS)
    systems = list(dict.fromkeys(shown["system"].astype(str))) if "system" in shown else []
    height = max(2.5, 0.38 * len(shown) + 1.4)
    with figure(1, 1, height) as (fig, axes):
        ax = axes[0, 0]
        ax.set_xlabel("highest sustained request rate (req/s)")
        if shown.empty:
            no_data(ax, "no configuration to show")
            return save(fig, path)
        rates = pd.to_numeric(shown["max_rate_per_s"], errors="coerce").to_numpy(float)
        failed = pd.to_numeric(shown["failed_rate_per_s"], errors="coerce").to_numpy(float)
        per_gpu = pd.to_numeric(shown["goodput_per_gpu"], errors="coerce").to_numpy(float)
        y = np.arange(len(shown))[::-1]  # the best at the top
        colors = [system_color(systems.index(str(s))) for s in shown["system"]]
        ax.barh(y, np.nan_to_num(rates), color=colors, height=0.65, label="sustained")
        # The search's bracket, not a measurement: the limit lies between the bar's end and
        # the lowest rate that failed. Drawn as an empty hatched box so it cannot pass for data.
        gap = np.where(np.isfinite(failed), failed - np.nan_to_num(rates), np.nan)
        ax.barh(
            y,
            gap,
            left=np.nan_to_num(rates),
            height=0.65,
            facecolor="none",
            edgecolor="#a0aec0",
            hatch="///",
            lw=0.6,
            label="the limit lies here (up to the lowest failed rate)",
        )
        top = np.nanmax(np.concatenate([rates, failed, [1e-9]]))
        for yi, rate, fail, good in zip(y, rates, failed, per_gpu, strict=True):
            text = "none sustained" if np.isnan(rate) else f"{rate:.3g} req/s · {good:.3g} good/GPU"
            after = np.nanmax([0.0, rate, fail])  # right of the bar and of its tick
            ax.text(after + 0.015 * top, yi, text, va="center", fontsize=8)
        ax.set_yticks(y, [label(c, 40) for c in shown["config"]])
        ax.set_xlim(0, top * 1.35)
        handles, names = ax.get_legend_handles_labels()
        legend_below(fig, handles, names, 2)
        fig.suptitle("Highest sustainable request rate per configuration (ranked by goodput/GPU)")
        return save(fig, path)


def write_capacity_page(
    ranking: pd.DataFrame,
    out_dir: Path,
    *,
    title: str,
    criteria_text: str,
    scenario_text: str,
    report_name: str | None = "report.html",
) -> Path:
    """capacity.html beside the run's report: the plot, the ranked table, the criteria."""
    out_dir = Path(out_dir)
    plot = Plot(
        plot_max_rate(ranking, out_dir / "plots" / "max_sustainable_rate.png"),
        "Highest sustainable rate",
        "Bars: the highest request rate each configuration sustained; hatched boxes: the search's "
        "bracket, up to the lowest rate it did not sustain (the true limit lies inside). Ranked "
        "by goodput per GPU (sustained rate x share meeting the SLO / GPUs).",
    )
    link = (
        f"<p>Latency-vs-rate curves of every evaluated rate, and the best configurations at "
        f'their highest sustained rate: <a href="{esc(report_name)}">{esc(report_name)}</a>. '
        'Every evaluation: <a href="evaluations.csv">evaluations.csv</a>.</p>'
        if report_name
        else ""
    )
    sections = [
        ("answer", "Answer", findings_html(capacity_findings(ranking))),
        ("criteria", "Sustainable means", f"<p>{esc(criteria_text)}</p>{link}"),
        ("plot", "Capacity", figures_html([plot])),
        ("ranking", "Ranking", sweep_table(ranking)),
        ("scenario", "Scenario", f"<pre>{esc(scenario_text)}</pre>"),
    ]
    subtitle = f"{len(ranking)} configuration(s), ranked by goodput per GPU"
    path = out_dir / "capacity.html"
    path.write_text(page(title, subtitle, sections), encoding="utf-8")
    return path

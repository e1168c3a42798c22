"""Fleet-search output: capacity.csv / capacity.json (the ranking and the answer), evaluations.csv
(every fleet simulated), report.html of the best fleets, and capacity.html with a GPUs-per-shape
plot. Renders `simulator.studies.fleet_study.FleetStudy`; never recomputes the search.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from pagesim.reports.deploy_html import deploy_entries, deploy_html
from pagesim.reports.folders import provenance
from pagesim.reports.frontier_plots import frontier_section
from pagesim.reports.html import Plot, esc, figures_html, page, sweep_table
from pagesim.reports.render import write_report
from pagesim.reports.style import figure, label, legend_below, no_data, save, system_color
from pagesim.simulator.scenario.load import describe_scenario
from pagesim.simulator.studies.frontier import FRONTIER_FILE

if TYPE_CHECKING:
    from pagesim.simulator.studies.fleet_study import FleetStudy

MAX_BARS = 40  # more shapes than this: the best 40 are drawn (the CSV has them all)
COST_NOTE = (
    "Cost per hour = GPUs x the scenario's price per GPU-hour. Cost per million tokens = the "
    "fleet's cost over the run (first arrival to last finish) / the prompt + output tokens of the "
    "finished requests x 10^6 (input and output counted alike)."
)


def criteria_text(study: FleetStudy) -> str:
    c, s = study.criteria, study.settings
    if s.max_gpus is not None:  # a disaggregated scenario's search
        return (
            f"A fleet meets the SLO when at least {c.min_slo_share:.0%} of the requests offered "
            f"(after warm-up) finish meeting it and the p99 wait from arrival to admission is at "
            f"most {c.max_queue_delay_s:g} s, on the scenario's own traffic. For each system x "
            f"prefill degree x decode degree, every prefill and decode count in "
            f"{s.min_replicas}..{s.max_replicas} of at most {s.max_gpus} GPUs is a candidate, "
            "fewest GPUs first; a candidate with at least the replicas of one that met is not "
            "simulated (adding a replica is assumed never to break the SLO). Per shape the "
            f"answer is the fewest GPUs, then the most goodput per GPU. {COST_NOTE}"
        )
    return (
        f"A fleet meets the SLO when at least {c.min_slo_share:.0%} of the requests offered "
        f"(after warm-up) finish meeting it and the p99 wait from arrival to admission is at most "
        f"{c.max_queue_delay_s:g} s, on the scenario's own traffic. For each GPU x "
        f"tensor-parallel degree x router, the search bisects the pool size in "
        f"{s.min_replicas}..{s.max_replicas}, assuming that meeting the SLO is monotone in the "
        f"number of replicas. {COST_NOTE}"
    )


def plot_fleet_gpus(ranking: pd.DataFrame, path: Path, currency: str) -> Path:
    """Horizontal bars: each shape's GPUs in the fewest replicas that met the SLO, best on top,
    colored by GPU; a hatched box reaches to the GPUs of the largest size that failed (the
    answer cannot lie below it); the label gives the cost per hour when prices are known."""
    shown = ranking.head(MAX_BARS)
    gpus = list(dict.fromkeys(shown["gpu"].astype(str))) if "gpu" in shown else []
    with figure(1, 1, max(2.5, 0.38 * len(shown) + 1.4)) as (fig, axes):
        ax = axes[0, 0]
        ax.set_xlabel("GPUs (replicas x tensor-parallel degree)")
        if shown.empty:
            no_data(ax, "no fleet shape to show")
            return save(fig, path)
        num = pd.to_numeric(shown["num_gpus"], errors="coerce").to_numpy(float)
        failed = _column(shown, "failed_replicas") * _column(shown, "tensor_parallel")
        cost = pd.to_numeric(shown["cost_per_hour"], errors="coerce").to_numpy(float)
        y = np.arange(len(shown))[::-1]
        colors = [system_color(gpus.index(str(g))) for g in shown["gpu"]]
        ax.barh(y, np.nan_to_num(num), color=colors, height=0.65)
        ax.barh(
            y,
            np.where(np.isfinite(failed) & np.isfinite(num), num - failed, np.nan),
            left=failed,
            height=0.65,
            facecolor="none",
            edgecolor="#a0aec0",
            hatch="///",
            lw=0.6,
            label="from the largest fleet that failed",
        )
        top = np.nanmax(np.concatenate([num, failed, [1.0]]))
        sizes = _column(shown, "prefill_replicas"), _column(shown, "decode_replicas")
        for i, (yi, n, c, note) in enumerate(zip(y, num, cost, shown["why_not"], strict=True)):
            text = "none met" if math.isnan(n) else f"{n:.0f} GPUs"
            if not math.isnan(n) and not math.isnan(sizes[0][i]):  # a disaggregated search's
                text += f" ({sizes[0][i]:.0f} + {sizes[1][i]:.0f} replicas)"
            if not math.isnan(c):
                text += f" · {c:.4g} {currency}/h"
            if math.isnan(n) and str(note).startswith("cannot run"):
                text = "cannot run the model"
            ax.text(np.nan_to_num(n) + 0.015 * top, yi, text, va="center", fontsize=8)
        ax.set_yticks(y, [label(c, 44) for c in shown["config"]])
        ax.set_xlim(0, top * 1.45)
        handles = [Patch(color=system_color(i)) for i in range(len(gpus))]
        handles += ax.get_legend_handles_labels()[0][:1]
        legend_below(fig, handles, [*gpus, "from the largest fleet that failed"], 3)
        fig.suptitle("Fewest GPUs meeting the SLO per fleet shape (ranked by GPUs, then cost)")
        return save(fig, path)


def _column(frame: pd.DataFrame, name: str) -> np.ndarray:
    """A numeric column, all NaN where the ranking has none (a disaggregated search's)."""
    if name not in frame:
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[name], errors="coerce").to_numpy(float)


def _json_value(value: object) -> object:
    if value is None or value is pd.NA:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, np.generic):
        return value.item()
    return value


def never_met(ranking: pd.DataFrame) -> list[tuple[str, str]]:
    """(system, why) of the systems no fleet of which met the SLO: the report's best fleets
    lack them, and its side-by-side plot says so in their place."""
    if ranking.empty or "num_gpus" not in ranking:
        return []
    found = []
    for system, rows in ranking.groupby("system", sort=False):
        if rows["num_gpus"].isna().all():
            runs = rows["num_evaluations"] if "num_evaluations" in rows else pd.Series()
            tried = pd.to_numeric(runs, errors="coerce").sum()
            count = f" ({tried:.0f} simulated)" if tried > 0 else ""
            found.append((str(system), f"no fleet met the SLO{count}"))
    return found


def write_fleet_capacity(study: FleetStudy, out: Path, overrides: Sequence[str]) -> Path:
    """A fleet-search folder (see the module docstring); returns capacity.html."""
    out.mkdir(parents=True, exist_ok=True)
    study.ranking.to_csv(out / "capacity.csv", index=False)
    study.evaluations.to_csv(out / "evaluations.csv", index=False)
    study.frontier.to_csv(out / FRONTIER_FILE, index=False)
    settings = study.settings
    records = [
        {str(k): _json_value(v) for k, v in row.items()}
        for row in study.ranking.astype(object).to_dict("records")
    ]
    summary = {
        "answer": study.answer,
        "criteria": {
            "min_slo_share": study.criteria.min_slo_share,
            "max_queue_delay_s": study.criteria.max_queue_delay_s,
        },
        "replicas": [settings.min_replicas, settings.max_replicas],
        "max_gpus": settings.max_gpus,
        "currency": settings.currency,
        "price_per_gpu_hour": dict(settings.price_per_gpu_hour),
        "cost_per_mtok_counts": "prompt + output tokens of finished requests",
        "ranking": records,
    }
    (out / "capacity.json").write_text(json.dumps(summary, indent=1) + "\n")
    scenario = study.scenario
    report_name = None
    if study.best:
        html = write_report(
            study.best,
            out,
            title=f"pagesim capacity: {scenario.name}",
            scenario_text=describe_scenario(scenario),
            provenance=provenance(study.best, overrides),
            findings=study.answer,
            deploy=deploy_entries(study.deployments),
            question=scenario.report,
            missing=never_met(study.ranking),
        )
        report_name = html.name
    plot = Plot(
        plot_fleet_gpus(study.ranking, out / "plots" / "fleet_gpus.png", settings.currency),
        "Fewest GPUs per fleet shape",
        "Bars: the GPUs of the fewest replicas that met the SLO, per GPU x degree x router; "
        "hatched: up from the largest fleet that failed. Ranked by GPUs, then cost.",
    )
    link = (
        f'<p>The best fleets, run at their size: <a href="{esc(report_name)}">'
        f"{esc(report_name)}</a>. Every fleet simulated: "
        '<a href="evaluations.csv">evaluations.csv</a>.</p>'
        if report_name
        else ""
    )
    answer = "".join(f"<li>{esc(line)}</li>" for line in study.answer)
    sections = [
        ("answer", "Answer", f"<ul>{answer}</ul>{link}"),
        ("criteria", "Meeting the SLO", f"<p>{esc(criteria_text(study))}</p>"),
        ("plot", "Fleets", figures_html([plot])),
        ("frontier", "Pareto frontier", frontier_section(study.frontier, out / "plots", 2)),
        ("ranking", "Ranking", sweep_table(study.ranking)),
        ("deploy", "Deploy on vLLM", deploy_html(deploy_entries(study.deployments))),
        ("scenario", "Scenario", f"<pre>{esc(describe_scenario(scenario))}</pre>"),
    ]
    subtitle = f"{len(study.ranking)} fleet shape(s), ranked by GPUs and by cost"
    path = out / "capacity.html"
    path.write_text(page(f"pagesim capacity: {scenario.name}", subtitle, sections), "utf-8")
    return path

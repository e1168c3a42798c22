"""The HTML page: one self-contained file (inline CSS, images as data URIs, no scripts).

Every string that reaches the page goes through `esc` (or is built from escaped parts): system
names, findings, the scenario text and provenance values all come from user input.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pagesim.reports.frames import as_number
from pagesim.reports.glossary import (
    REPLICA_METRICS,
    SUMMARY_BY_KEY,
    SUMMARY_METRICS,
    SummaryMetric,
    Unit,
    glossary_sections,
    replica_metric,
)
from pagesim.reports.sweep_axes import axis_columns
from pagesim.reports.units import MISSING, format_number, format_value
from pagesim.simulator.metrics.result import RunResult

PROVENANCE_KEYS = {  # shown first, in this order, "not recorded" when absent
    "execution_model": "Execution model",
    "profile_device": "Profile device",
    "profile_date": "Profile date",
    "pagesim_version": "pagesim version",
    "seed": "Seed",
}
MAX_SWEEP_ROWS = 500

CSS = """
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI","DejaVu Sans",sans-serif;color:#1a202c;
background:#f7fafc;margin:0}
main{max-width:1160px;margin:0 auto;padding:24px 32px 64px;background:#fff}
h1{font-size:26px;margin:0 0 4px}h2{font-size:20px;margin:36px 0 10px;border-bottom:1px solid
#e2e8f0;padding-bottom:4px}h3{font-size:16px;margin:20px 0 6px}
.sub{color:#4a5568;margin:0 0 12px}nav a{margin-right:14px;color:#2b6cb0}
ul.findings li{margin:4px 0}
table{border-collapse:collapse;font-size:13.5px;margin:8px 0}
th,td{border:1px solid #e2e8f0;padding:4px 10px;text-align:left;vertical-align:top;
overflow-wrap:normal;word-break:normal;hyphens:none}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
th{background:#edf2f7}th.key{white-space:nowrap}
p.note{color:#4a5568;font-style:italic}
tr.group th{background:#fff;border:none;padding-top:12px;font-size:14px}
figure{margin:22px 0}figure img{max-width:100%;height:auto;border:1px solid #e2e8f0}
figcaption{color:#4a5568;font-size:14px;margin-top:4px}
pre{background:#f7fafc;border:1px solid #e2e8f0;padding:12px;overflow-x:auto;font-size:13px}
code{font-size:13px}dt{font-family:monospace;font-weight:600;margin-top:6px}
dd{margin:0 0 4px 18px}.wide{overflow-x:auto}
"""


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


@dataclass(frozen=True, slots=True)
class Plot:
    path: Path
    title: str
    caption: str


def img_tag(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{esc(alt)}">'


def findings_html(findings: Sequence[str]) -> str:
    if not findings:
        return "<p>No findings: the summaries hold no comparable metrics.</p>"
    return '<ul class="findings">' + "".join(f"<li>{esc(f)}</li>" for f in findings) + "</ul>"


def summary_table(results: Sequence[RunResult]) -> str:
    """Metrics as rows (grouped), systems as columns; rows no system has are left out."""
    head = "<tr><th>metric</th>" + "".join(f"<th>{esc(r.system)}</th>" for r in results) + "</tr>"
    rows: list[str] = []
    section = None
    known = {m.key for m in SUMMARY_METRICS}
    extra = sorted({k for r in results for k in r.summary} - known)
    # (key, row name, unit, group): the glossary's metrics in order, then keys it does not know.
    metrics: list[tuple[str, str, Unit | None, str]] = [
        (m.key, m.label, m.unit, m.section) for m in SUMMARY_METRICS
    ]
    replicas = [m for key in extra if (m := replica_metric(key)) is not None]
    metrics += [(m.key, m.label, m.unit, m.section) for m in _by_replica(replicas)]
    named = {m.key for m in replicas}
    metrics += [(key, key, None, "Other") for key in extra if key not in named]
    for key, name, unit, group in metrics:
        values = [r.summary.get(key) for r in results]
        if all(v is None for v in values):
            continue
        if group != section:
            section = group
            rows.append(
                f'<tr class="group"><th colspan="{len(results) + 1}">{esc(group)}</th></tr>'
            )
        cells = "".join(f'<td class="num">{esc(format_value(v, unit))}</td>' for v in values)
        rows.append(f'<tr><th title="{esc(key)}">{esc(name)}</th>{cells}</tr>')
    return f'<div class="wide"><table>{head}{"".join(rows)}</table></div>'


def _by_replica(metrics: list[SummaryMetric]) -> list[SummaryMetric]:
    """`replica_<i>_*` rows ordered by replica number, then as the glossary lists the figures."""
    order = {m.key.removeprefix("replica_<i>_"): n for n, m in enumerate(REPLICA_METRICS)}

    def key(m: SummaryMetric) -> tuple[int, int]:
        number, _, figure = m.key.removeprefix("replica_").partition("_")
        return int(number), order.get(figure, len(order))

    return sorted(metrics, key=key)


def _cell(value: object, unit: Unit | None = None) -> str:
    number = as_number(value)
    if number is not None:
        text = format_value(number, unit) if unit else format_number(number)
        return f'<td class="num">{esc(text)}</td>'
    return f"<td>{esc(MISSING if value is None or value != value else value)}</td>"


# The columns a sweep report's table shows, after the axes and the system (sweep.csv has all).
SWEEP_TABLE_METRICS = (
    "throughput_req_s",
    "goodput_req_s",
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "normalized_latency_mean_s",
    "normalized_latency_p90_s",
    "kv_waste_share",
    "kv_saved_of_unshared_share",
    "slot_utilization",
    "kv_capacity_tokens",
    "num_preemptions",
    "num_rejected",
)


def _header(column: str) -> str:
    """A sweep table header: a metric's glossary label, an axis by its last key."""
    metric = SUMMARY_BY_KEY.get(column)
    if metric is not None:
        return f'<th title="{esc(column)}">{esc(metric.label)}</th>'
    return f'<th title="{esc(column)}">{esc(column.rsplit(".", 1)[-1])}</th>'


def sweep_table(sweep: pd.DataFrame, *, curated: bool = False, lead: Sequence[str] = ()) -> str:
    """A table of `sweep` (at most MAX_SWEEP_ROWS rows). `curated`: the axes, the system, the
    `lead` metrics (the scenario's [report] ones) and SWEEP_TABLE_METRICS (those not all zero
    or missing), headed by their glossary labels and formatted by unit; otherwise every column
    as it is."""
    columns = [str(c) for c in sweep.columns]
    if curated:
        axes = axis_columns(sweep)
        wanted = [c for c in lead if c in sweep]
        metrics = wanted + [
            c
            for c in SWEEP_TABLE_METRICS
            if c in sweep
            and c not in wanted
            and (pd.to_numeric(sweep[c], errors="coerce").fillna(0) != 0).any()
        ]
        columns = axes + (["system"] if "system" in sweep else []) + metrics
    shown = sweep[columns].head(MAX_SWEEP_ROWS)
    head = "<tr>" + "".join(_header(c) for c in columns) + "</tr>"
    units = [SUMMARY_BY_KEY[c].unit if curated and c in SUMMARY_BY_KEY else None for c in columns]
    body = "".join(
        "<tr>" + "".join(_cell(v, unit) for v, unit in zip(row, units, strict=True)) + "</tr>"
        for row in shown.itertuples(index=False)
    )
    more = f"<p>First {MAX_SWEEP_ROWS} of {len(sweep)} rows.</p>" if len(sweep) > len(shown) else ""
    if curated and len(columns) < len(sweep.columns):
        more += (
            f'<p class="note">{len(columns)} of {len(sweep.columns)} columns; every one is in '
            '<a href="sweep.csv">sweep.csv</a>.</p>'
        )
    return f'<div class="wide"><table>{head}{body}</table></div>{more}'


def _value(value: object) -> str:
    """A provenance value: a mapping as one `key = value` line per key (the knobs in force and
    where each default came from), a list one item a line, anything else as text."""
    if isinstance(value, Mapping) and value:
        return "<br>".join(
            f"<code>{esc(key)}</code> = {esc(json.dumps(item, default=str))}"
            for key, item in sorted(value.items(), key=lambda kv: str(kv[0]))
        )
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        return "<br>".join(esc(item) for item in value)
    if isinstance(value, Mapping | list | tuple):
        return f"<code>{esc(json.dumps(value, default=str, sort_keys=True))}</code>"
    return esc(value)


def _missing_provenance(key: str, provenance: Mapping[str, object]) -> str:
    uses_roofline = str(provenance.get("execution_model", "")).lower().startswith("roofline")
    return "not used (roofline)" if uses_roofline and key.startswith("profile_") else "not recorded"


def provenance_table(provenance: Mapping[str, object], results: Sequence[RunResult]) -> str:
    """The run's provenance (the keys everyone asks for first), then each system's own."""
    rows = [
        f'<tr><th class="key">{esc(name)}</th>'
        f"<td>{_value(provenance.get(key, _missing_provenance(key, provenance)))}</td></tr>"
        for key, name in PROVENANCE_KEYS.items()
    ]
    rows += [
        f'<tr><th class="key">{esc(key)}</th><td>{_value(value)}</td></tr>'
        for key, value in provenance.items()
        if key not in PROVENANCE_KEYS
    ]
    table = f"<table>{''.join(rows)}</table>"
    keys = list(dict.fromkeys(k for r in results for k in r.provenance))
    if not keys:
        return table
    head = "<tr><th>key</th>" + "".join(f"<th>{esc(r.system)}</th>" for r in results) + "</tr>"
    body = "".join(
        f'<tr><th class="key">{esc(key)}</th>'
        + "".join(f"<td>{_value(r.provenance.get(key, MISSING))}</td>" for r in results)
        + "</tr>"
        for key in keys
    )
    return f'{table}<h3>Per system</h3><div class="wide"><table>{head}{body}</table></div>'


def glossary_html() -> str:
    parts = []
    for title, entries in glossary_sections():
        items = "".join(f"<dt>{esc(e.name)}</dt><dd>{esc(e.definition)}</dd>" for e in entries)
        parts.append(f"<h3>{esc(title)}</h3><dl>{items}</dl>")
    return "".join(parts)


def files_html(results: Sequence[RunResult], slugs: Sequence[str], has_sweep: bool) -> str:
    items = (
        ['<li><a href="summary.csv">summary.csv</a>: one row per system</li>'] if results else []
    )
    if has_sweep:
        items.append('<li><a href="sweep.csv">sweep.csv</a>: one row per sweep point</li>')
    for result, slug in zip(results, slugs, strict=True):
        links = ", ".join(
            f'<a href="{esc(slug)}/{name}">{name}</a>'
            for name in ("requests.csv", "steps.csv", "summary.json")
        )
        items.append(f"<li>{esc(result.system)}: {links}</li>")
    return f"<ul>{''.join(items)}</ul><p>PNG plots are in <code>plots/</code>.</p>"


def page(title: str, subtitle: str, sections: Sequence[tuple[str, str, str]]) -> str:
    """The whole document; `sections` are (id, heading, inner HTML already escaped)."""
    nav = " ".join(f'<a href="#{esc(sid)}">{esc(head)}</a>' for sid, head, _ in sections)
    body = "".join(
        f'<section id="{esc(sid)}"><h2>{esc(head)}</h2>{inner}</section>'
        for sid, head, inner in sections
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>"
        f'<header><h1>{esc(title)}</h1><p class="sub">{esc(subtitle)}</p>'
        f"<nav>{nav}</nav></header>{body}</main></body></html>\n"
    )


def figures_html(plots: Sequence[Plot], start: int = 1) -> str:
    return "".join(
        f"<figure>{img_tag(p.path, p.title)}<figcaption><b>Figure {i}. {esc(p.title)}.</b> "
        f"{esc(p.caption)}</figcaption></figure>"
        for i, p in enumerate(plots, start=start)
    )


def notes_html(notes: Sequence[str]) -> str:
    """Lines saying which plots were left out and why."""
    return "".join(f'<p class="note">{esc(n)}</p>' for n in notes)

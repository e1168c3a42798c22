"""Reports: files written, images embedded, strings escaped, empty frames survived, display math.

Built on synthetic RunResults (reports.synthetic): three systems with a few hundred requests and
a few thousand steps, plus a system whose name is HTML and which served nothing.
"""

from __future__ import annotations

import base64
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest
from report_helpers import (
    HOSTILE_SYSTEM,
    empty_result,
    synthetic_calibration,
    synthetic_report_results,
    synthetic_results,
    synthetic_sweep,
    write_synthetic_report,
)

from pagesim.reports import plot_jobs, plots
from pagesim.reports.curves import other_axis, sweep_column
from pagesim.reports.findings import derive_findings
from pagesim.reports.frames import (
    MAX_BUCKETS,
    activity_means,
    assign_lanes,
    bucket_edges,
    cdf_points,
    cumulative_counts,
    state_means,
    unique_slugs,
)
from pagesim.reports.glossary import SUMMARY_METRICS, glossary_sections
from pagesim.reports.html import provenance_table
from pagesim.reports.render import rerender_report, sweep_plots, write_report
from pagesim.simulator.metrics.result import REQUEST_COLUMNS, STEP_COLUMNS, RunResult


@pytest.fixture(scope="module")
def results() -> list[RunResult]:
    return synthetic_report_results()


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic report, written once per session (test_report_browser.py shares it)."""
    html = tmp_path_factory.getbasetemp() / "synthetic-report" / "report.html"
    return html if html.exists() else write_synthetic_report(html.parent)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _tags(html: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(html)
    return parser.tags


def test_write_report_writes_every_file(report: Path, results: list[RunResult]) -> None:
    out = report.parent
    assert report.name == "report.html"
    for name in ("summary.csv", "sweep.csv", "report.json"):
        assert (out / name).is_file(), name
    expected = {
        "kv_memory",
        "waste_breakdown",
        "memory_saved",
        "utilization",
        "request_timeline",
        "latency_cdfs",
        "preemptions_swaps",
        "latency_vs_rate",
        "block_size_ablation",
        "calibration",
    }
    assert {p.stem for p in (out / "plots").glob("*.png")} == expected
    folders = json.loads((out / "report.json").read_text())["folders"]
    assert folders == ["static", "orca-max", "vllm-paged", "script-alert-x-script"]
    for folder, result in zip(folders, results, strict=True):
        for name in ("requests.csv", "steps.csv", "summary.json"):
            assert (out / folder / name).is_file(), (folder, name)
        back = RunResult.read(out / folder)
        assert back.system == result.system
        assert len(back.requests) == len(result.requests)


def test_every_image_is_embedded_and_nothing_is_fetched(report: Path) -> None:
    html = report.read_text()
    imgs = [attrs for tag, attrs in _tags(html) if tag == "img"]
    assert len(imgs) == len(list((report.parent / "plots").glob("*.png")))
    for attrs in imgs:
        src = attrs["src"] or ""
        assert src.startswith("data:image/png;base64,"), src[:60]
        png = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert mpimg.imread(io.BytesIO(png), format="png").shape[0] > 100  # a whole, decodable PNG
        assert attrs.get("alt")
    # No src= anywhere that is not a data URI; no scripts, stylesheets, fonts or URLs to fetch.
    assert all(s.startswith("data:") for s in re.findall(r'src\s*=\s*"([^"]*)"', html))
    lowered = html.lower()
    for needle in ("<script", "<link", "<iframe", "@import", "url(", "http://", "https://"):
        assert needle not in lowered, needle


def test_html_escapes_every_embedded_string(report: Path) -> None:
    html = report.read_text()
    assert HOSTILE_SYSTEM not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    assert "<i>test</i>" not in html and "Report &lt;i&gt;test&lt;/i&gt;" in html
    assert "&lt;llama &amp; friends&gt;" in html
    assert not any(tag == "script" for tag, _ in _tags(html))


def test_html_has_the_sections_a_reader_needs(report: Path) -> None:
    html = report.read_text()
    sections = ("findings", "curves", "sweep", "detail", "scenario", "provenance", "glossary")
    for section in sections:
        assert f'<section id="{section}">' in html
    # A sweep report leads with its curves; the systems' own plots come as detail, labelled.
    assert html.index('id="curves"') < html.index('id="sweep"') < html.index('id="detail"')
    assert "Detail at the last rate" in html
    assert html.count("<figcaption>") == 10
    assert "Execution model" in html and "not used (roofline)" in html
    for metric in ("ttft_p99_s", "kv_external_frag_slots", "normalized_latency_s"):
        assert f"<dt>{metric}</dt>" in html
    assert "req/s" in html and "%" in html and " ms" in html  # readable units in the table


def test_summary_csv_has_one_row_per_system(report: Path, results: list[RunResult]) -> None:
    table = pd.read_csv(report.parent / "summary.csv")
    assert list(table["system"]) == [r.system for r in results]
    assert table.loc[0, "throughput_req_s"] == pytest.approx(results[0].summary["throughput_req_s"])
    assert list(table.columns[:3]) == ["system", "folder", "scenario"]


def _with_summary(system: str, **summary: float) -> RunResult:
    return RunResult("s", system, pd.DataFrame(), pd.DataFrame(), summary=dict(summary))


def test_findings_are_measured_facts(results: list[RunResult]) -> None:
    findings = derive_findings(results)
    assert findings[0].startswith("orca-max and vllm-paged had the highest throughput")  # a tie
    assert "0.601 requests/s" in findings[0]
    assert any("p99 time to first token" in f for f in findings)
    assert any(f.startswith("vllm-paged wasted the least KV memory") for f in findings)
    assert all(re.search(r"\d", f) for f in findings)
    assert derive_findings([empty_result("idle")]) == []


def test_findings_compare_best_and_worst_with_numbers() -> None:
    a = _with_summary("a", throughput_req_s=4.0, throughput_tok_s=800.0, ttft_p99_s=0.25)
    b = _with_summary("b", throughput_req_s=1.0, ttft_p99_s=2.0, num_rejected=1, num_preemptions=3)
    assert derive_findings([a, b]) == [
        "a had the highest throughput: 4 requests/s (800 output tok/s), 4× the lowest "
        "(b, 1 requests/s).",
        "a had the lowest p99 time to first token: 250 ms, against 2 s for b.",
        "Rejected as never servable: b 1 request.",
        "Preempted running requests: b 3 times.",
    ]


@pytest.fixture(scope="module")
def sparse_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Systems that served nothing, lost every request, or came without a summary."""
    (full,) = synthetic_results(num_requests=60, num_steps=400, systems=("vllm-paged",))
    bare = RunResult("s", "no summary $x$", full.requests, full.steps, summary={})
    rejected = full.requests.assign(status="rejected", admitted_s=np.nan, finish_s=np.nan)
    never = RunResult("s", "all rejected", rejected, full.steps.iloc[0:0], summary={})
    return write_report(
        [empty_result("idle"), bare, never],
        tmp_path_factory.mktemp("sparse"),
        title="t",
        scenario_text="",
        provenance={},
        findings=["Paged attention <wins>."],
    )


def test_plots_survive_empty_frames_and_missing_summaries(sparse_report: Path) -> None:
    pngs = sorted((sparse_report.parent / "plots").glob("*.png"))
    # No sweep, no calibration, no preemptions, no sharing: five per-run plots, and a note.
    assert [p.stem for p in pngs] == [
        "kv_memory",
        "latency_cdfs",
        "request_timeline",
        "utilization",
        "waste_breakdown",
    ]
    assert all(mpimg.imread(p).shape[1] > 500 for p in pngs)
    assert len(pd.read_csv(sparse_report.parent / "summary.csv")) == 3
    assert "No system preempted or swapped a request" in sparse_report.read_text()


def test_given_findings_replace_derived_ones(sparse_report: Path) -> None:
    html = sparse_report.read_text()
    assert "Paged attention &lt;wins&gt;." in html
    assert "had the highest throughput" not in html


def test_rerender_keeps_the_inputs(
    sparse_report: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plot_jobs, "RUN_PLOTS", ())  # plots are tested above; this is inputs
    again = rerender_report(sparse_report.parent, tmp_path)
    assert again == tmp_path / "report.html"
    assert "Paged attention &lt;wins&gt;." in again.read_text()
    assert pd.read_csv(tmp_path / "summary.csv")["system"].tolist() == [
        "idle",
        "no summary $x$",
        "all rejected",
    ]


def test_sweep_tables_named_by_scenario_paths(tmp_path: Path) -> None:
    """The CLI names axes by their dotted path; a second axis becomes panels."""
    rates = synthetic_sweep().dropna(subset=["rate"])
    two_workloads = pd.concat([rates.assign(trace="alpaca"), rates.assign(trace="sharegpt")])
    table = two_workloads.rename(
        columns={"rate": "workload.arrival.rate_per_s", "trace": "workload.trace_name"}
    )
    made = sweep_plots(table, tmp_path)
    assert [p.path.name for p in made] == ["latency_vs_rate.png"]
    assert sweep_column(table, "rate") == "workload.arrival.rate_per_s"
    assert other_axis(table, "workload.arrival.rate_per_s") == "workload.trace_name"
    blocks = pd.DataFrame(
        {"systems.block_size": [1, 16, 256], "kv_waste_share": [0.01, 0.02, 0.3]}
    ).assign(throughput_tok_s=500.0)
    assert [p.path.name for p in sweep_plots(blocks, tmp_path)] == ["block_size_ablation.png"]
    assert sweep_plots(blocks.iloc[:1], tmp_path) == []  # one block size is no ablation


def test_sweep_plots_without_usable_rows(tmp_path: Path) -> None:
    empty = pd.DataFrame({"system": ["a"], "rate": [float("nan")], "block_size": [None]})
    assert plots.plot_latency_vs_rate(empty, tmp_path / "rate.png").is_file()
    assert plots.plot_block_size_ablation(empty, tmp_path / "block.png").is_file()


def test_calibration_input_is_validated() -> None:
    device, panels = plots.parse_calibration(synthetic_calibration())
    assert device == "synthetic GPU" and panels[0].fitted_s is not None and len(panels) == 2
    bad = {"panels": [{"title": "gemm", "x": [1, 2, 3], "measured_s": [1e-3, 2e-3]}]}
    with pytest.raises(ValueError, match=r"gemm.*'measured_s' has 2 values, expected 3"):
        plots.parse_calibration(bad)
    with pytest.raises(ValueError, match="'x' and 'measured_s' are required"):
        plots.parse_calibration({"panels": [{"x": [1.0]}]})
    with pytest.raises(ValueError, match="non-empty list"):
        plots.parse_calibration({})


def test_slugs_are_safe_distinct_and_avoid_the_plots_folder() -> None:
    slugs = unique_slugs(["plots", HOSTILE_SYSTEM, "a b", "A/B", "", "../x"], reserved={"plots"})
    assert slugs == ["plots-2", "script-alert-x-script", "a-b", "a-b-2", "system", "x"]
    assert all(re.fullmatch(r"[a-z0-9._-]+", s) and not s.startswith(".") for s in slugs)


def test_time_buckets_are_exact_time_weighted_means() -> None:
    steps = pd.DataFrame(
        {"start_s": [0.0, 1.0, 3.0], "duration_s": [1.0, 1.0, 1.0], "u": [1.0, 0.5, 1.0]}
    )
    edges = np.array([0.0, 2.0, 4.0])
    # Activity: idle time [2, 3) counts as zero.
    assert activity_means(steps, ["u"], edges)["u"] == pytest.approx([0.75, 0.5])
    # State: each value holds until the next step starts ([1, 3) holds 0.5).
    assert state_means(steps, ["u"], edges)["u"] == pytest.approx([0.75, 0.75])
    counts = cumulative_counts(steps, ["u"], np.array([-1.0, 0.0, 2.0, 4.0]))["u"]
    assert counts == pytest.approx([0.0, 1.0, 1.5, 2.5])
    assert list(bucket_edges(steps)) == [0.0, 1.0, 3.0, 4.0]


def test_long_steps_frames_are_downsampled() -> None:
    n = 1_000_000
    steps = pd.DataFrame(
        {"start_s": np.arange(n) * 0.01, "duration_s": np.full(n, 0.01), "u": np.full(n, 0.4)}
    )
    edges = bucket_edges(steps)
    assert len(edges) == MAX_BUCKETS + 1
    assert activity_means(steps, ["u"], edges)["u"] == pytest.approx(np.full(MAX_BUCKETS, 0.4))
    x, y = cdf_points(np.random.default_rng(0).exponential(size=n))
    assert len(x) <= 1000 and y[-1] == 1.0 and np.all(np.diff(x) >= 0)


def test_lanes_reuse_a_slot_as_soon_as_it_frees() -> None:
    start = np.array([0.0, 0.0, 1.0, 2.0, 2.5])
    end = np.array([2.0, 1.0, 3.0, 4.0, 3.0])
    assert list(assign_lanes(start, end)) == [0, 1, 1, 0, 2]


def test_glossary_covers_every_column_and_summary_key() -> None:
    names = {e.name for _, entries in glossary_sections() for e in entries}
    assert set(REQUEST_COLUMNS) | set(STEP_COLUMNS) <= names
    assert {m.key for m in SUMMARY_METRICS} <= names
    assert {"ttft_p99_s", "kv_waste_share", "mbu", "kv_capacity_tokens"} <= names


def test_provenance_shows_each_knob_and_its_source_on_its_own_line() -> None:
    """Issue 12, item 1: the knobs in force and where each default came from are readable in
    the report, a line per knob, not one JSON blob."""
    result = RunResult(
        "s",
        "v1",
        pd.DataFrame(),
        pd.DataFrame(),
        {},
        {
            "era": "vLLM V1 engine",
            "system": {"watermark": 0.0, "max_num_seqs": 1024},
            "defaults_from": {"watermark": "vLLM V1: no admission watermark"},
            "era_notes": ["historical: x", "pagesim extension: y"],
        },
    )
    page = provenance_table({}, [result])
    assert "<code>max_num_seqs</code> = 1024<br><code>watermark</code> = 0.0" in page
    assert "<code>watermark</code> = &quot;vLLM V1: no admission watermark&quot;" in page
    assert "historical: x<br>pagesim extension: y" in page

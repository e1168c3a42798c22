"""How the `pagesim` commands print: aligned tables, progress bars, and the few results whose
terminal form is more than a table. Only typer's public API; no simulation, no files.

Results arrive typed from the library (simulator.studies, calibration.fidelity); importing this
module imports typer only, so `pagesim --help` stays fast.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from pathlib import Path

    from pagesim.calibration.fidelity import FidelityResult
    from pagesim.reports.output_folder import OutputFolder
    from pagesim.simulator.metrics.result import RunResult
    from pagesim.simulator.studies.fleet_study import FleetStudy
    from pagesim.simulator.studies.resolved import CheckedScenario, ResolvedSystem
    from pagesim.simulator.studies.runs import CapacityStudy
    from pagesim.simulator.studies.sweep import SweepRun

Column = tuple[str, str, str]  # (row key, header, format spec; "" prints str(value))

SUMMARY_COLUMNS: list[Column] = [
    ("system", "system", ""),
    ("num_finished", "done", "d"),
    ("num_rejected", "rej", "d"),
    ("throughput_req_s", "req/s", ".3f"),
    ("throughput_tok_s", "tok/s", ".1f"),
    ("ttft_p50_s", "TTFT p50 s", ".3f"),
    ("tpot_p50_s", "TPOT p50 s", ".4f"),
    ("e2e_p99_s", "E2E p99 s", ".2f"),
    ("kv_waste_share", "KV waste", ".1%"),
    ("slot_utilization", "slots", ".1%"),
    ("num_preemptions", "preempt", "d"),
]
CAPACITY_COLUMNS: list[Column] = [
    ("config", "configuration", ""),
    ("num_gpus", "GPUs", "d"),
    ("max_rate_per_s", "max req/s", ".3g"),
    ("failed_rate_per_s", "fails at", ".3g"),
    ("slo_share", "SLO met", ".1%"),
    ("queue_delay_p99_s", "queue p99 s", ".3g"),
    ("goodput_per_gpu", "goodput/GPU", ".3g"),
    ("energy_per_output_token_j", "J/token", ".3g"),
    ("num_evaluations", "runs", "d"),
]
FLEET_COLUMNS: list[Column] = [
    ("rank_by_gpus", "#", ""),
    ("system", "system", ""),
    ("gpu", "GPU", ""),
    ("tensor_parallel", "TP", "d"),
    ("router", "router", ""),
    ("replicas", "replicas", "d"),
    ("num_gpus", "GPUs", "d"),
    ("cost_per_hour", "cost/h", ".4g"),
    ("cost_per_mtok", "per Mtok", ".3g"),
    ("rank_by_cost", "cost #", ""),
    ("slo_share", "SLO met", ".1%"),
    ("ttft_p99_s", "TTFT p99 s", ".3g"),
    ("queue_delay_p99_s", "queue p99 s", ".3g"),
    ("energy_per_output_token_j", "J/token", ".3g"),
    ("num_evaluations", "runs", "d"),
    ("why_not", "note", ""),
]
DISAGG_COLUMNS: list[Column] = [  # a disaggregated scenario's search
    ("rank_by_gpus", "#", ""),
    ("system", "system", ""),
    ("roles", "roles", ""),
    ("gpu", "GPU", ""),
    ("prefill_tensor_parallel", "P TP", "d"),
    ("decode_tensor_parallel", "D TP", "d"),
    ("prefill_replicas", "P", "d"),
    ("decode_replicas", "D", "d"),
    ("num_gpus", "GPUs", "d"),
    ("goodput_req_s_per_gpu", "goodput/GPU", ".3g"),
    ("cost_per_hour", "cost/h", ".4g"),
    ("slo_share", "SLO met", ".1%"),
    ("ttft_p99_s", "TTFT p99 s", ".3g"),
    ("tpot_p99_s", "TPOT p99 s", ".3g"),
    ("energy_per_output_token_j", "J/token", ".3g"),
    ("num_evaluations", "runs", "d"),
    ("why_not", "note", ""),
]


def echo_table(rows: Sequence[Mapping[Any, object]], columns: Sequence[Column]) -> None:
    """Print rows as an aligned table (`table_lines`)."""
    for line in table_lines(rows, columns):
        typer.echo(line)


def table_lines(rows: Sequence[Mapping[Any, object]], columns: Sequence[Column]) -> list[str]:
    """Rows as an aligned table, the header first: the first column left-aligned, the others
    right; a missing value prints as '-'."""
    cells = [[header for _, header, _ in columns]]
    for row in rows:
        cells.append([_cell(row.get(key), fmt) for key, _, fmt in columns])
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    return [
        "  ".join(
            c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in cells
    ]


def _cell(value: object, fmt: str) -> str:
    """One value as text: '-' when missing or NaN; plain text when it does not suit `fmt` (a
    float where a count was expected, a word where a number was)."""
    if value is None or value != value:
        return "-"
    if not fmt:
        return str(value)
    if fmt.endswith("d") and isinstance(value, float) and value.is_integer():
        value = int(value)
    try:
        return format(value, fmt)
    except (ValueError, TypeError):
        return str(value)


def echo_summaries(results: Sequence[RunResult]) -> None:
    """One row per system: the headline figures of its summary; then, on stderr, each warning
    about how its steps were priced (a profile of another GPU, utilizations above 100%)."""
    echo_table([{"system": r.system, **r.summary} for r in results], SUMMARY_COLUMNS)
    for r in results:
        found = r.provenance.get("warnings")
        for text in found if isinstance(found, list) else ():
            typer.echo(f"warning: {r.system}: {text}", err=True)


def rejected_everything(result: RunResult) -> str | None:
    """Why a system rejected every request it was offered (its first reason), or None."""
    num_requests = result.summary.get("num_requests")
    if not isinstance(num_requests, int) or not num_requests:
        return None
    if result.summary.get("num_rejected") != num_requests:
        return None
    reasons = result.requests.get("rejection_reason")
    first = str(reasons.iloc[0]) if reasons is not None and len(reasons) else ""
    return first or "no reason recorded"


def echo_warnings(results: Sequence[RunResult]) -> bool:
    """A warning line for each system that served nothing because it rejected every request,
    and for systems that measured nothing (every request inside the warm-up); a utilization
    past 100% is among the provenance warnings `echo_summaries` prints.
    Returns True when every system
    rejected everything: the run failed (the caller exits 1 once the output, evidence of why,
    is written)."""
    from pagesim.reports.findings import warmup_warning

    reasons = [(r.system, rejected_everything(r)) for r in results]
    for system, reason in reasons:
        if reason is not None:
            typer.echo(f"warning: {system} rejected every request ({reason})", err=True)
    if (measured_nothing := warmup_warning(results)) is not None:
        typer.echo(f"warning: {measured_nothing}", err=True)
    return bool(reasons) and all(reason is not None for _, reason in reasons)


def kept_after_interrupt(out: Path, folder: OutputFolder | None) -> str:
    """What an interrupted command leaves of its output folder `out`, in words (`folder` is
    None when it was interrupted before the folder was opened)."""
    cache = out / "cache"
    try:
        entries = cache.glob("*.json") if cache.is_dir() else ()
        num_points = sum(1 for p in entries if not p.name.startswith("."))  # not staging
    except OSError:
        num_points = 0
    created = folder is not None and folder.created
    kept = f"{out} is as it was" if not created else "no output was written"
    if num_points:
        kept += (
            f"; {num_points} simulated point(s) are cached in {cache}: the same command "
            "resumes from them"
        )
    return kept


def echo_replaced(folder: OutputFolder, scenario: str) -> None:
    """Say so when the output replaced a different scenario's (or command's) folder."""
    from pagesim.reports.output_folder import describe

    previous = folder.previous
    if folder.created or (
        previous and previous.get("scenario") == scenario and previous.get("kind") == folder.kind
    ):
        return
    typer.echo(f"replaced {folder.final}: it held {describe(previous)}", err=True)


def echo_checked(checked: CheckedScenario) -> None:
    """`pagesim validate`: each kind of replica (a pool's, when there are pools) with its policy
    and KV blocks, each system's fleet, how steps are priced, then the verdict."""
    for replicas in checked.replicas:
        capacity = replicas.capacity
        typer.echo(
            f"{replicas.label}: {replicas.system.policy.value}, {capacity.num_gpu_blocks:,} KV "
            f"blocks of {capacity.block_size} tokens"
        )
    for line in _fleet_lines(checked):
        typer.echo(line)
    typer.echo(f"steps priced by the {checked.execution}")
    num_systems = len(checked.scenario.systems)
    typer.echo(f"{checked.path}: valid ({num_systems} systems)")


def _fleet_lines(checked: CheckedScenario) -> list[str]:
    """Each system's fleet: replicas, GPUs, routers, KV blocks; a P/D fleet's link and terms."""
    lines = []
    for fleet in checked.fleets:
        lines.append(
            f"{fleet.runs}'s fleet: {fleet.num_replicas:,} replicas on {fleet.num_gpus:,} GPUs, "
            f"{fleet.routers}; {fleet.blocks_text}"
        )
        if fleet.link:
            lines.append(f"{fleet.runs}'s {fleet.link}")
    return lines


def echo_resolved(checked: CheckedScenario, systems: Sequence[ResolvedSystem]) -> None:
    """`pagesim scenarios show --resolved`: per kind of replica (per pool, when there are
    pools), its era, knobs with sources, capacity; each fleet; how steps are priced."""
    typer.echo(f"# {checked.path}: the values a run uses")
    typer.echo(f"# steps priced by the {checked.execution}")
    for line in _fleet_lines(checked):
        typer.echo(f"# {line}")
    for system in systems:
        where = f"{system.where}; " if system.where else ""
        typer.echo(f"\n[{system.name}]  # {where}{system.era}")
        knobs = [knob for knob in system.knobs if knob.name not in ("name", "policy")]
        typer.echo(f"policy = {system.policy!r}")
        width = max(len(knob.name) for knob in knobs)
        for knob in knobs:
            value = "unset" if knob.value is None else repr(knob.value)
            if isinstance(knob.value, float):
                value = f"{knob.value:.4g}"
            typer.echo(f"{knob.name:<{width}} = {value:<10}  # {knob.source}")
        host = system.host_overhead
        typer.echo(f"# host overhead per step ({host.name}): {host.value}; {host.source}")
        capacity = system.capacity
        typer.echo(
            f"# KV cache: {capacity.num_gpu_blocks:,} blocks of {capacity.block_size} tokens "
            f"({capacity.num_token_slots:,} tokens), {capacity.num_cpu_blocks:,} CPU blocks"
        )
        for note in system.notes:
            typer.echo(f"# note: {note}")


def echo_golden(name: str, problems: Sequence[str]) -> None:
    """`pagesim scenarios golden`: whether one built-in scenario matches its golden summary."""
    typer.echo(f"{name}: {'differs' if problems else 'matches'}")


def _metric_format(key: str) -> str:
    """How the sweep table prints a [report] metric, by its glossary unit."""
    from pagesim.reports.glossary import SUMMARY_BY_KEY, Unit

    unit = SUMMARY_BY_KEY[key].unit if key in SUMMARY_BY_KEY else None
    formats = {Unit.SHARE: ".1%", Unit.TOKENS: ",.0f", Unit.COUNT: ",.4g", Unit.BYTES: ".4g"}
    return formats.get(unit, ".4g") if unit is not None else ".4g"


def echo_sweep(done: SweepRun) -> None:
    """`pagesim sweep`: one row per point (its axis values in words, then the summary and the
    scenario's [report] metrics), and the counts."""
    from pagesim.reports.headlines import metric_label
    from pagesim.reports.sweep_axes import label_axes

    axes = list(done.points.records[0].point.axes)
    rows = label_axes(done.table).to_dict("records")
    report = done.first_scenario.report
    shown = {key for key, _, _ in SUMMARY_COLUMNS}
    asked = [m for m in (report.key_metric, *report.metrics) if m is not None and m not in shown]
    extra = [(m, metric_label(m), _metric_format(m)) for m in asked]
    echo_table(rows, [(k, k.rsplit(".", 1)[-1], "") for k in axes] + SUMMARY_COLUMNS + extra)
    ran = done.points
    typer.echo(
        f"{len(ran.records)} points: {ran.num_computed} simulated, {ran.num_cached} from the "
        f"cache, in {ran.wall_s:.1f} s"
    )


def echo_capacity(done: CapacityStudy) -> None:
    """`pagesim capacity`: the ranking, and how many runs it took."""
    echo_table(done.ranking.to_dict("records"), CAPACITY_COLUMNS)
    typer.echo(
        f"{len(done.configs)} configurations, {done.search.num_computed} runs simulated, "
        f"{done.search.num_cached} from the cache"
    )


def echo_fleet_capacity(done: FleetStudy) -> None:
    """`pagesim capacity` on a [capacity] scenario: the ranked fleets, the answer, the runs."""
    table = done.ranking.astype(object)
    rows = table.where(table.notna(), None).to_dict("records")
    for row in rows:  # the whole note is in capacity.csv
        note = str(row["why_not"] or "")
        row["why_not"] = note if len(note) <= 70 else note[:67] + "..."
    echo_table(rows, DISAGG_COLUMNS if "prefill_replicas" in table else FLEET_COLUMNS)
    search = done.search
    typer.echo(
        f"{len(done.shapes)} fleet shapes, {search.num_computed} runs simulated, "
        f"{search.num_cached} from the cache; prices in {done.settings.currency} per GPU-hour, "
        "cost per million tokens counts input + output tokens"
    )
    for line in done.answer:
        typer.echo(line)


@contextmanager
def progress_bar(total: int, label: str) -> Iterator[Callable[[int], None]]:
    """A `simulator.studies.runs.Progress`: a bar of `total` steps on stderr."""
    with typer.progressbar(length=total, label=label, file=sys.stderr) as bar:
        yield bar.update


def echo_fidelity(result: FidelityResult, html: Path) -> None:
    """`pagesim validate-fidelity`: where it ran, the step-time error, the request-level errors,
    and where the files are (the report has the rest)."""
    e = result.step_error
    where = "CPU/NumPy" if result.backend == "numpy" else f"{result.device}"
    typer.echo(
        f"{result.scenario} / {result.system} on {where} ({result.layer_subset}), predicted by "
        f"{result.held_out.predictor}"
    )
    typer.echo(
        f"step time, {e.num_steps} steps: median |err| {e.median_abs_pct:.1f}%, "
        f"p90 |err| {e.p90_abs_pct:.1f}%, bias {e.bias_pct:+.1f}%"
    )
    for metric in ("ttft", "tpot", "e2e"):
        p50 = result.request_error(metric, "p50").pct_error
        p95 = result.request_error(metric, "p95").pct_error
        typer.echo(f"{metric.upper():5s} error: p50 {p50:+.1f}%  p95 {p95:+.1f}%")
    inside = result.held_out.fraction_inside_range
    if inside is not None:
        typer.echo(f"steps inside the profile's measured range: {inside:.1%}")
    typer.echo(f"steps: {result.files.get('steps_csv')}\nreport: {html}")

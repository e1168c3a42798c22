"""`pagesim calibrate error-table`: how far the roofline is from Vidur's measurements, before and
after the fit, per operator and per step shape, and the imported profiles' error on held-out
points, as one Markdown page (calibration/profiles/ERRORS.md is its output) of the rows that
step_error_rows.py computes.

A *measured step* is what Vidur measured of it, all layers: linear layers + small operators
(mlp.csv at the step's token count) + two all-reduces per layer (the node's single-node medians
near the message size; t > 1, where measured) + attention (only where Vidur measured it:
Llama-2-70B at TP 2 on A100, decode up to 128 sequences). The roofline is compared on exactly the
same terms; the LM head and the host overhead are left out of both (Vidur did not measure them).

- *before*: pagesim's roofline before the fit: one set of factors for every GPU (GEMM 0.7,
  weights 0.85, attention 0.8), max(compute, memory) per step, all-reduce at 300 GB/s with no
  per-call latency, no small operators, prefill attention at the GEMM efficiency.
- *after*: `RooflineModel.breakdown` with the GPU preset's factors (core/presets/): the linear
  layers GEMM by GEMM with tile and wave quantization (execution/gemm.py), the all-reduce from the
  measured medians up to 4 MiB (as measured, falling with size where NCCL's measured regimes
  do) and latency + bytes / bandwidth above. The grid's all-reduce messages up to 4 MiB fall on
  the knots of that table, so the *all-reduce* part of a step's error is zero by construction
  there; the rest of a step's error (linear, small operators, attention) is the fitted model's.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from pagesim.calibration.allreduce_errors import (
    ALLREDUCE_TARGET,
    AllReducePoint,
    abs_stats,
    allreduce_points,
    allreduce_summary,
    allreduce_table,
    between_knots,
    falls_with_size,
    pct,
)
from pagesim.calibration.roofline_fit import read_gpu_measurements
from pagesim.calibration.step_error_rows import TENSOR_PARALLEL, TERMS, StepError, step_errors
from pagesim.calibration.vidur_import import import_vidur
from pagesim.calibration.vidur_layout import VIDUR_GPUS, measured_combinations
from pagesim.simulator.core.catalog import get_model
from pagesim.simulator.core.hardware import ALLREDUCE_KNOT_BYTES

STEP_TARGETS = (0.10, 0.25)  # issue 13: per-step median and worst error after the fit


def summary_tables(rows: list[StepError]) -> list[str]:
    lines = [
        "| GPU | steps | median / worst error, before | median / worst error, after |",
        "|---|---|---|---|",
    ]
    by_gpu: dict[str, list[StepError]] = defaultdict(list)
    for r in rows:
        by_gpu[r.gpu].append(r)
    for gpu, group in by_gpu.items():
        for kind in ("decode", "prefill", None):
            chosen = [r for r in group if kind is None or r.kind == kind]
            what = f"{kind} steps" if kind else "**all steps**"
            lines.append(
                f"| {gpu} | {what} ({len(chosen)}) | {abs_stats([r.before_err for r in chosen])} "
                f"| {abs_stats([r.after_err for r in chosen])} |"
            )
    return lines


def shape_table(rows: list[StepError], gpu: str) -> list[str]:
    """Per step shape: error after the fit (before in brackets) for each model and TP."""
    chosen = [r for r in rows if r.gpu == gpu]
    columns = sorted({(r.model, r.tensor_parallel) for r in chosen})
    shapes = list(dict.fromkeys(r.shape for r in chosen))
    head = "| step | " + " | ".join(f"{m} TP{t}" for m, t in columns) + " |"
    lines = [head, "|---|" + "---|" * len(columns)]
    cell = {(r.shape, r.model, r.tensor_parallel): r for r in chosen}
    for shape in shapes:
        values = []
        for m, t in columns:
            r = cell.get((shape, m, t))
            values.append("" if r is None else f"{pct(r.after_err)} ({pct(r.before_err)})")
        lines.append(f"| {shape} | " + " | ".join(values) + " |")
    return lines


def operator_table(rows: list[StepError]) -> list[str]:
    lines = [
        "| GPU | operator | points | median / worst error, before | median / worst error, after |",
        "|---|---|---|---|---|",
    ]
    for gpu in dict.fromkeys(r.gpu for r in rows):
        for term in TERMS:
            values = [r.terms[term] for r in rows if r.gpu == gpu and term in r.terms]
            if not values:
                continue
            before = [b / m - 1 for m, b, _ in values if m > 0]
            after = [a / m - 1 for m, _, a in values if m > 0]
            lines.append(
                f"| {gpu} | {term.replace('_', ' ')} | {len(values)} | {abs_stats(before)} | "
                f"{abs_stats(after)} |"
            )
    return lines


def target_lines(
    rows: list[StepError],
    points: list[AllReducePoint],
    between_knots_errors: dict[tuple[str, int], list[float]],
) -> list[str]:
    """Where the fitted roofline misses issue 13's targets, named step by step."""
    median_target, worst_target = STEP_TARGETS
    lines = []
    for gpu in ("a100-80gb", "h100-sxm"):
        errors = [abs(r.after_err) for r in rows if r.gpu == gpu]
        if not errors:
            continue
        median, worst = float(np.median(errors)), max(errors)
        met = median <= median_target and worst <= worst_target
        lines.append(
            f"- {gpu}: median {100 * median:.0f}% (target ≤ {100 * median_target:.0f}%), worst "
            f"{100 * worst:.0f}% (target ≤ {100 * worst_target:.0f}%): "
            + ("met." if met else "**not met** at:")
        )
        for r in rows:
            if r.gpu == gpu and abs(r.after_err) > worst_target:
                parts = ", ".join(
                    f"{term.replace('_', ' ')} {pct(a / m - 1)}"
                    for term, (m, _, a) in r.terms.items()
                    if m > 0
                )
                lines.append(
                    f"  - {r.model} TP{r.tensor_parallel} {r.shape}: {pct(r.after_err)} "
                    f"(per term: {parts})"
                )

    def within(errors: list[float]) -> int:
        return sum(abs(e) <= ALLREDUCE_TARGET for e in errors)

    large = [p for p in points if p.size_bytes > ALLREDUCE_KNOT_BYTES[-1]]
    misses = [p for p in points if abs(p.error) > ALLREDUCE_TARGET]
    groups: dict[tuple[str, int], list[AllReducePoint]] = defaultdict(list)
    for p in points:
        groups[(p.node, p.num_workers)].append(p)
    falling = sorted(
        {
            (p.node, p.num_workers, p.size_bytes)
            for p in points
            if falls_with_size(p, groups[(p.node, p.num_workers)])
        }
    )
    held = [p.held_out_error for p in points]
    held_misses = [p for p in points if abs(p.held_out_error) > ALLREDUCE_TARGET]
    between = [e for errors in between_knots_errors.values() for e in errors]
    named = ", ".join(
        f"{p.size_bytes // 1024:,} KiB on {p.num_workers} ({p.node}) {pct(p.error)}" for p in misses
    )
    verdict = f"**not met** at {len(misses)} ({named})" if misses else "met"
    sizes = ", ".join(f"{size // 1024:,} KiB on {t} ({node})" for node, t, size in falling)
    lines.append(
        f"- all-reduce per call: {within([p.error for p in points])} of {len(points)} grid sizes "
        f"within {100 * ALLREDUCE_TARGET:.0f}% of the measured median (target: all): {verdict}. "
        f"Read the figure with care: up to 4 MiB ({len(points) - len(large)} sizes) the "
        "roofline's all-reduce *is* the measured medians at half-octave knots, as measured, "
        "also where they fall with size, so it meets the target there by construction; above "
        f"4 MiB the fitted latency + bytes / bandwidth: {within([p.error for p in large])} of "
        f"{len(large)}. The medians fall with size in NCCL's measured regimes, not as noise: "
        "runs of neighbouring rows at one speed, then another (e.g. on 4 A100s every row's "
        "median is 60–64 µs at 106–306 KiB; at 338–546 KiB 16 of 27 are 20–23 µs and 26 of "
        "27 minima are 20–23 µs: ~61 µs at 128–256 KiB, ~26 µs at 512 KiB). At "
        f"{len(falling)} distinct grid sizes ({sizes}) the median and that of another grid size "
        "of the same node and GPU count are out of order by more than 1.15 / 0.85 (the larger "
        "size measured faster): a table made non-decreasing in size must miss 15% at one size "
        "of each such pair, so the simulator follows the medians, and a larger message may cost "
        "less below 4 MiB. Tested on data it was not built from: knots "
        "of every other row of the file "
        f"against the other rows, {within(held)} of {len(held)} within 15% (median "
        f"{100 * np.median(np.abs(held)):.0f}%); interpolated between knots, {within(between)} "
        f"of {len(between)}; of the {len(held_misses)} held-out misses, "
        f"{sum(p.is_noisy for p in held_misses)} are at sizes where more than a quarter of the "
        "medians near the size lie outside ±15% of their median (two clusters, e.g. 7–11 µs and "
        "31–43 µs on 2 H100s at 8–128 KiB: a call lands in either, and no single-valued model "
        "is within 15% of both)."
    )
    return lines


def held_out_table(root: Path) -> list[str]:
    lines = [
        "| model | GPU | TP | linear + small ops: median / worst | all-reduce: median / worst | "
        "decode attention: median / worst | prefill attention: median / worst |",
        "|---|---|---|---|---|---|---|",
    ]

    def cell(section: dict[str, Any] | None) -> str:
        if not section or not section.get("num_points"):
            return "–"
        return (
            f"{100 * section['median_abs_rel_err']:.1f}% / {100 * section['max_abs_rel_err']:.0f}%"
            f" ({section['num_points']})"
        )

    for model_name, gpu in measured_combinations():
        for tp in TENSOR_PARALLEL:
            profile = import_vidur(root, get_model(model_name), gpu, tp, complete=True)
            lines.append(
                f"| {model_name} | {gpu} | {tp} | {cell(profile['gemm']['held_out'])} | "
                f"{cell(profile.get('all_reduce', {}).get('held_out'))} | "
                f"{cell(profile['decode_attention'].get('held_out'))} | "
                f"{cell(profile['prefill_attention'].get('held_out'))} |"
            )
    return lines


def error_page(root: Path) -> str:
    measurements = [read_gpu_measurements(root, gpu) for gpu in VIDUR_GPUS]
    rows = [r for data in measurements for r in step_errors(data)]
    points = allreduce_points(measurements)
    between = between_knots(measurements)
    parts = [
        "# Step costs against measurements: the roofline before and after the fit",
        "",
        "Generated by `pagesim calibrate error-table DIR --out calibration/profiles/ERRORS.md` "
        "from Vidur's profiling data (microsoft/vidur, MIT; see calibration/vidur_csv.py for "
        "the files and their dates). Do not edit by hand.",
        "",
        (__doc__ or "").split("\n\n", 1)[1].strip(),
        "",
        "Errors are (roofline − measured) / measured; *median / worst* are over the absolute "
        "errors. Grid: decode at batch 1, 8, 64, 256 (context 1,024 and 4,032 where attention "
        "was measured; elsewhere the context changes no measured term, so each batch appears "
        "once), prefill of 128, 512, 2,048, 4,096 tokens; TP 1, 2, 4, 8; every model Vidur "
        "measured on the GPU.",
        "",
        "## Per step",
        "",
        *summary_tables(rows),
        "",
        "### Against issue 13's targets",
        "",
        *target_lines(rows, points, between),
        "",
        "## Per operator (per layer; all-reduce: both calls of a layer)",
        "",
        *operator_table(rows),
        "",
    ]
    for data in measurements:
        parts += [f"## {data.gpu.name}: each step, after the fit (before)", ""]
        parts += [*shape_table(rows, data.gpu.name), ""]
    parts += [
        "## All-reduce per call",
        "",
        "Measured: the median of Vidur's single-node medians within a factor 1.5 of the size "
        "(narrowed to stay symmetric at the file's last size, 64 MiB; the 5 nearest where fewer "
        "than 3 lie so close); p10–p90: the spread of those medians. *Grid sizes*: the error "
        "table's messages (up to 4 MiB the roofline's knots, so zero by construction); *held "
        "out*: knots built from every other row of the file, against the median of the other "
        "rows; *between knots*: the full table interpolated at the 18 quarter-octave sizes "
        "between its knots.",
        "",
        *allreduce_summary(points, between),
        "",
        *allreduce_table(points),
        "",
        "## Imported profiles: error on held-out points",
        "",
        "Every fifth measured point is left out of each imported profile's fit "
        "(`pagesim calibrate import-vidur`); the error of the profile there, median / worst "
        "(number of points). Attention only where Vidur measured it; all-reduce only at TP > 1 "
        "on nodes Vidur measured.",
        "",
        *held_out_table(root),
        "",
    ]
    return "\n".join(parts)

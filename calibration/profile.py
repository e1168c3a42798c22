"""The profile file: a versioned JSON of fits and provenance, and a CSV of every raw sample.

JSON (schema "pagesim-profile", version `PROFILE_SCHEMA_VERSION`, read by
simulator/execution/profile.py):

    schema, schema_version
    provenance        backend, device ("cpu" for the NumPy backend, else the GPU's name),
                      device_kind, driver/CUDA/CuPy/torch/NumPy/Python versions, clocks, L2 flush
                      bytes and mode, timer, warmup, repeats, quick, kernel file + sha256, date
    model             the ModelSpec measured (shape fields must match the simulated model)
    measured          tensor_parallel, block_size (tokens), kv_dtype, per-GPU layer shapes
    grid              every measured configuration (decode points, GEMM tokens, prefill points)
    copy_bandwidth    median bytes read + written per second of a device-to-device copy
    overhead          empty_step_s: the per-step floor, the executor's minimal step in `mode`
                      (eager | cuda-graph); eager_step_s, graph_step_s, graph_error, and the
                      bare launch cost of a step (bare_launches)
    decode_attention  coef {a_s, b_s_per_kv_token, c_s_per_seq}, range, fit_error, held_out,
                      bandwidth (achieved share of the copy bandwidth)
    prefill_attention coef {a_s, b_s_per_token_sq, c_s_per_token}, range, fit_error, held_out
    gemm, lm_head     tokens, time_s (medians; GEMMs and the elementwise work summed over a
                      layer), parts, range, held_out
    samples_csv       file name of the CSV beside the JSON

CSV columns: kind, label, is_held_out, num_seqs, kv_tokens, tokens, prefill_sq, bytes, flops,
sample, time_s — one row per timed sample.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from pagesim.calibration.floor import FLOOR_MODES
from pagesim.calibration.measure import Grid, Point, context_mix
from pagesim.simulator.core.catalog import ModelSpec
from pagesim.simulator.core.csv_rows import csv_rows
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.numbers import Range
from pagesim.simulator.execution.profile_file import (
    MAX_STEP_S,
    PROFILE_SCHEMA,
    PROFILE_SCHEMA_VERSION,
    ProfileReader,
    load_profile,
)

CSV_COLUMNS = (
    "kind",
    "label",
    "is_held_out",
    "num_seqs",
    "kv_tokens",
    "tokens",
    "prefill_sq",
    "bytes",
    "flops",
    "sample",
    "time_s",
)


MAX_SAMPLES_BYTES = 256 * 2**20  # a samples CSV beside its profile: a few MB at most
_SAMPLE_S = Range(0, MAX_STEP_S, lo_open=True, unit="seconds")  # one timed repeat


def write_samples_csv(points: list[Point], path: Path) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        for p in points:
            for i, t in enumerate(p.samples.samples_s):
                writer.writerow(
                    (
                        p.kind,
                        p.label,
                        int(p.is_held_out),
                        p.num_seqs,
                        p.kv_tokens,
                        p.tokens,
                        p.prefill_sq,
                        p.bytes,
                        p.flops,
                        i,
                        repr(t),
                    )
                )


def build_profile(
    *,
    model: ModelSpec,
    provenance: dict[str, object],
    measured: dict[str, object],
    grid: Grid,
    sections: Mapping[str, object],
    samples_csv: str,
) -> dict[str, object]:
    return {
        "schema": PROFILE_SCHEMA,
        "schema_version": PROFILE_SCHEMA_VERSION,
        "provenance": provenance,
        "model": model.dense_shape(),
        "measured": measured,
        "grid": {
            "decode": [asdict(p) for p in grid.decode],
            "gemm_tokens": list(grid.gemm_tokens),
            "gemm_held_out": list(grid.gemm_held_out),
            "prefill": [
                {"num_seqs": n, "prompt_len": length, "is_held_out": held}
                for n, length, held in grid.prefill
            ],
            "empty_step_launches": grid.num_launches,
        },
        **sections,
        "samples_csv": samples_csv,
    }


def profile_paths(out: Path) -> tuple[Path, Path]:
    """(JSON path, CSV path): `out` itself if it ends in .json, else out/profile.json."""
    json_path = out if out.suffix == ".json" else out / "profile.json"
    return json_path, json_path.with_suffix(".csv")


def write_profile(profile: dict[str, object], points: list[Point], json_path: Path) -> Path:
    json_path.parent.mkdir(parents=True, exist_ok=True)
    csv_path = json_path.with_suffix(".csv")
    write_samples_csv(points, csv_path)
    json_path.write_text(json.dumps(profile, indent=1, sort_keys=False) + "\n")
    return json_path


def with_floor_mode(json_path: Path, mode: str, out: Path) -> Path:
    """A copy of the profile at `json_path` whose per-step floor is the executor's minimal step
    in `mode` ("eager" | "cuda-graph"), written to `out` (the samples CSV is copied beside it).
    An InputError if the profile did not measure that mode."""
    if mode not in FLOOR_MODES:
        raise InputError(f"floor mode must be one of {', '.join(FLOOR_MODES)}, got {mode!r}")
    profile = json.loads(Path(json_path).read_text())
    overhead = profile.get("overhead", {})
    key = "graph_step_s" if mode == "cuda-graph" else "eager_step_s"
    value = overhead.get(key)
    if not isinstance(value, int | float):
        why = overhead.get("graph_error") or "not measured"
        raise InputError(f"{json_path}: no {mode} floor in this profile ({why})")
    profile["overhead"] = {**overhead, "mode": mode, "empty_step_s": float(value)}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    samples = Path(json_path).with_name(profile["samples_csv"])
    target = out.with_suffix(".csv")
    if samples.resolve() != target.resolve():
        target.write_bytes(samples.read_bytes())
    profile["samples_csv"] = target.name
    out.write_text(json.dumps(profile, indent=1, sort_keys=False) + "\n")
    return out


def _samples_by_label(csv_path: Path) -> dict[tuple[str, str], list[float]]:
    """The samples CSV's times by (kind, label), every cell checked (InputError otherwise)."""
    samples: dict[tuple[str, str], list[float]] = {}
    rows = csv_rows(csv_path, str(csv_path), MAX_SAMPLES_BYTES)
    header = next(rows)[1]
    if not {"kind", "label", "time_s"} <= set(header):
        raise InputError(f"{csv_path}: needs the columns kind,label,time_s")
    for line, row in rows:
        cells = dict(zip(header, row, strict=True))
        time_s = _SAMPLE_S.take(cells["time_s"])
        if time_s is None:
            raise InputError(f"{csv_path} line {line}: time_s: not {_SAMPLE_S.describe()}")
        samples.setdefault((cells["kind"], cells["label"]), []).append(time_s)
    return samples


def _curve(reader: ProfileReader, section: str) -> tuple[list[float], list[float], list[float]]:
    """A measured series of the profile, checked: (tokens, measured medians, fitted times)."""
    xs, fitted = reader.series(f"{section}.tokens", f"{section}.time_s")
    measured = fitted
    if "measured_median_s" in reader.get(section):
        measured = reader.series(f"{section}.tokens", f"{section}.measured_median_s")[1]
    return xs, measured, fitted


def calibration_panels(json_path: Path) -> dict[str, object]:
    """A profile's measured points against its fits, in the input format of
    `reports.curves.plot_calibration` (device + panels: decode, GEMMs, LM head, prefill)."""
    profile = load_profile(json_path)
    reader = ProfileReader(json_path, profile)
    samples_path = json_path.with_name(str(profile.get("samples_csv")))
    if "samples_csv" not in profile or not samples_path.is_file():
        # Imported (import-vidur: medians, no raw samples), or the CSV did not travel with it.
        return _series_panels(reader)
    try:
        return _sample_panels(reader, _samples_by_label(samples_path))
    except (InputError, KeyError, TypeError, ValueError):
        # Samples that do not match this profile's grid (another profile's, an edited file)
        # are plotted as a CSV that did not travel: the fitted curves alone. They price nothing.
        return _series_panels(reader)


def _sample_panels(
    reader: ProfileReader, samples: dict[tuple[str, str], list[float]]
) -> dict[str, object]:
    profile = reader.data

    def stats(kind: str, label: str) -> tuple[float, float, float]:
        values = samples[(kind, label)]
        return (
            float(np.median(values)),
            float(np.percentile(values, 10)),
            float(np.percentile(values, 90)),
        )

    decode = profile["decode_attention"]["coef"]
    prefill = profile["prefill_attention"]["coef"]
    decode_points: list[tuple[float, ...]] = []
    for point in profile["grid"]["decode"]:
        lens = context_mix(point["num_seqs"], point["mean_context"], point["mix"])
        label = f"decode n={point['num_seqs']} ctx={point['mean_context']} {point['mix']}"
        fitted = decode["a_s"] + decode["b_s_per_kv_token"] * sum(lens)
        fitted += decode["c_s_per_seq"] * len(lens)
        decode_points.append((sum(lens), *stats("decode", label), fitted))
    prefill_points: list[tuple[float, ...]] = []
    for point in profile["grid"]["prefill"]:
        n, length = point["num_seqs"], point["prompt_len"]
        fitted = prefill["a_s"] + prefill["b_s_per_token_sq"] * n * length * length
        fitted += prefill["c_s_per_token"] * n * length
        prefill_points.append(
            (n * length * length, *stats("prefill", f"prefill n={n} len={length}"), fitted)
        )

    def linear_panel(title: str, x_label: str, points: list[tuple[float, ...]]) -> dict[str, Any]:
        points.sort()
        return {
            "title": title,
            "x_label": x_label,
            "x": [p[0] for p in points],
            "measured_s": [p[1] for p in points],
            "measured_p10_s": [p[2] for p in points],
            "measured_p90_s": [p[3] for p in points],
            "fitted_s": [p[4] for p in points],
            "log_x": True,
            "log_y": True,
        }

    def token_panel(section: str, title: str, x_label: str) -> dict[str, Any]:
        xs, measured, fitted = _curve(reader, section)
        return {
            "title": title,
            "x_label": x_label,
            "x": xs,
            "measured_s": measured,
            "model_x": xs,
            "fitted_s": fitted,
            "log_x": True,
            "log_y": True,
        }

    return {
        "device": profile["provenance"]["device"],
        "panels": [
            linear_panel("decode attention (per layer)", "total KV tokens", decode_points),
            token_panel("gemm", "linear layers (per layer)", "tokens in the step"),
            token_panel("lm_head", "LM head", "sequences sampling"),
            linear_panel("prefill attention (per layer)", "sum of prompt_len^2", prefill_points),
        ],
    }


def _series_panels(reader: ProfileReader) -> dict[str, object]:
    """A profile's curves without raw samples: the per-layer GEMM (+ small operator) medians
    against the interpolated series, and the all-reduce medians per call where measured."""
    xs, measured, fitted = _curve(reader, "gemm")
    panels: list[dict[str, object]] = [
        {
            "title": "linear layers + small operators (per layer)",
            "x_label": "tokens in the step",
            "x": xs,
            "measured_s": measured,
            "model_x": xs,
            "fitted_s": fitted,
            "log_x": True,
            "log_y": True,
        }
    ]
    if "all_reduce" in reader.data:
        sizes, times = reader.series("all_reduce.bytes", "all_reduce.time_s")
        if "measured_median_s" in reader.get("all_reduce"):
            medians = reader.series("all_reduce.bytes", "all_reduce.measured_median_s")[1]
        else:
            medians = times
        panels.append(
            {
                "title": "all-reduce (per call)",
                "x_label": "message bytes",
                "x": sizes,
                "measured_s": medians,
                "model_x": sizes,
                "fitted_s": times,
                "log_x": True,
                "log_y": True,
            }
        )
    return {"device": str(reader.get("provenance.device")), "panels": panels}

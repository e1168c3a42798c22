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
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.execution.profile_file import PROFILE_SCHEMA, PROFILE_SCHEMA_VERSION

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
        "model": asdict(model),
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
    samples: dict[tuple[str, str], list[float]] = {}
    with csv_path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            samples.setdefault((row["kind"], row["label"]), []).append(float(row["time_s"]))
    return samples


def calibration_panels(json_path: Path) -> dict[str, object]:
    """A profile's measured points against its fits, in the input format of
    `reports.curves.plot_calibration` (device + panels: decode, GEMMs, LM head, prefill)."""
    profile = json.loads(json_path.read_text())
    samples = _samples_by_label(json_path.with_name(profile["samples_csv"]))

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
        fit = profile[section]
        return {
            "title": title,
            "x_label": x_label,
            "x": fit["tokens"],
            "measured_s": fit.get("measured_median_s", fit["time_s"]),
            "model_x": fit["tokens"],
            "fitted_s": fit["time_s"],
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

"""The profile file: a versioned JSON of fits and provenance, and a CSV of every raw sample.

JSON (schema "pagesim-profile", version `PROFILE_SCHEMA_VERSION`, read by
simulator/profile_model.py):

    schema, schema_version
    provenance        backend, device ("cpu" for the NumPy backend, else the GPU's name),
                      device_kind, driver/CUDA/CuPy/torch/NumPy/Python versions, clocks, L2 flush
                      bytes, timer, warmup, repeats, quick, kernel file + sha256, date
    model             the ModelSpec measured (shape fields must match the simulated model)
    measured          tensor_parallel, block_size (tokens), kv_dtype, per-GPU layer shapes
    grid              every measured configuration (decode points, GEMM tokens, prefill points)
    copy_bandwidth    median bytes read + written per second of a device-to-device copy
    overhead          empty_step_s: launch + synchronise of an empty step
    decode_attention  coef {a_s, b_s_per_kv_token, c_s_per_seq}, range, fit_error, held_out,
                      bandwidth (achieved share of the copy bandwidth)
    prefill_attention coef {a_s, b_s_per_token_sq, c_s_per_token}, range, fit_error, held_out
    gemm, lm_head     tokens, time_s (medians; GEMMs summed over a layer), parts, range, held_out
    samples_csv       file name of the CSV beside the JSON

CSV columns: kind, label, is_held_out, num_seqs, kv_tokens, tokens, prefill_sq, bytes, flops,
sample, time_s — one row per timed sample.
"""

from __future__ import annotations

import csv
import json
from dataclasses import asdict
from pathlib import Path

from calibration.measure import Grid, Point
from simulator.catalog import ModelSpec
from simulator.profile_model import PROFILE_SCHEMA, PROFILE_SCHEMA_VERSION

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
    sections: dict[str, object],
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

"""A synthetic profile for tests: numbers chosen for easy arithmetic, not measured, and its
device says so."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from pagesim.simulator.core.catalog import ModelSpec

DECODE = {"a_s": 1e-5, "b_s_per_kv_token": 1e-9, "c_s_per_seq": 1e-7}
PREFILL = {"a_s": 2e-5, "b_s_per_token_sq": 1e-12, "c_s_per_token": 1e-8}


def synthetic_profile(model: ModelSpec, device: str = "synthetic-test-device") -> dict[str, Any]:
    return {
        "schema": "pagesim-profile",
        "schema_version": 1,
        "provenance": {
            "device": device,
            "device_kind": "gpu",
            "backend": "test",
            "date": "2026-01-01T00:00:00+00:00",
            "kernel_sha256": "0" * 64,
            "cupy": "test",
        },
        "model": asdict(model),
        "measured": {"tensor_parallel": 1, "block_size": 16, "kv_dtype": "fp16"},
        "copy_bandwidth": {"median_bps": 4e12},
        "overhead": {"empty_step_s": 1e-6},
        "decode_attention": {
            "coef": dict(DECODE),
            "range": {"kv_tokens": [16, 100_000], "num_seqs": [1, 256]},
            "held_out": {"mean_abs_rel_err": 0.03, "max_abs_rel_err": 0.05, "num_points": 4},
        },
        "prefill_attention": {
            "coef": dict(PREFILL),
            "range": {"sum_sq": [256, 1 << 26], "tokens": [16, 8192]},
            "held_out": {"mean_abs_rel_err": 0.04, "max_abs_rel_err": 0.06, "num_points": 2},
        },
        "gemm": {
            "tokens": [1, 64, 1024],
            "time_s": [1e-4, 1.2e-4, 1e-3],
            "held_out": {"mean_abs_rel_err": 0.02, "max_abs_rel_err": 0.03, "num_points": 2},
        },
        "lm_head": {
            "tokens": [1, 64, 1024],
            "time_s": [2e-4, 2.1e-4, 1e-3],
            "held_out": {"mean_abs_rel_err": 0.01, "max_abs_rel_err": 0.02, "num_points": 2},
        },
        "samples_csv": "synthetic.csv",
    }

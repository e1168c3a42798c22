"""`calibrate`: measure a model's per-layer kernels on one device and write a profile.

`pagesim calibrate --model llama-2-7b --backend cupy --quick --out profile.json` calls it. Writes
the profile JSON and the CSV of raw samples beside it; returns the JSON path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from pagesim.calibration import fit
from pagesim.calibration.backends import make_backend
from pagesim.calibration.floor import FLOOR_MODES, measure_floor
from pagesim.calibration.harness import FLUSH_MODES, iso_now
from pagesim.calibration.kernel import KERNEL_FILE, kernel_sha256
from pagesim.calibration.measure import Grid, Point, make_grid, measure
from pagesim.calibration.profile import build_profile, profile_paths, write_profile
from pagesim.calibration.shapes import LayerShapes
from pagesim.simulator.core.catalog import ModelSpec
from pagesim.simulator.core.errors import InputError

BACKENDS = ("numpy", "cupy")


def calibrate(
    model: ModelSpec,
    backend: str = "numpy",
    quick: bool = False,
    out: Path | str | None = None,
    *,
    block_size: int = 16,
    tensor_parallel: int = 1,
    progress: Callable[[str], None] | None = None,
    floor_mode: str = "eager",
    flush: str = "read",
) -> Path:
    """Measure `model`'s per-GPU layer shapes on `backend` ("numpy" | "cupy"); write the profile.

    `out`: a .json path (the CSV goes beside it with the same stem) or a folder (profile.json +
    profile.csv inside); default ./profile-<model>-<backend>.json. `quick` trims the grids (NumPy:
    seconds; GPU: about a minute). The per-step floor is the executor's minimal step, measured
    eagerly and, on a GPU, from a CUDA graph; `floor_mode` ("eager" | "cuda-graph") picks the one
    that prices steps (profile.with_floor_mode rewrites it later). `flush` is the GPU timer's L2
    flush ("read" | "memset"). Returns the JSON path.
    """
    if backend not in BACKENDS:
        raise InputError(f"unknown calibration backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if floor_mode not in FLOOR_MODES:
        raise InputError(f"floor mode must be one of {', '.join(FLOOR_MODES)}, got {floor_mode!r}")
    if flush not in FLUSH_MODES:
        raise InputError(f"flush must be one of {', '.join(FLUSH_MODES)}, got {flush!r}")
    if block_size not in (8, 16, 32):
        raise InputError(f"block_size must be 8, 16 or 32 tokens, got {block_size}")
    if tensor_parallel < 1 or model.num_heads % tensor_parallel:
        raise InputError(
            f"tensor_parallel {tensor_parallel} must be >= 1 and divide num_heads {model.num_heads}"
        )
    if model.head_dim not in (64, 128, 256):
        raise InputError(
            f"the kernel supports head_dim 64, 128 or 256; {model.name} has {model.head_dim}"
        )
    say = progress or (lambda _: None)
    if out is None:
        out = Path(f"profile-{model.name.replace('/', '_')}-{backend}.json")
    json_path, csv_path = profile_paths(Path(out))

    started = time.perf_counter()
    device = make_backend(backend, flush)
    shapes = LayerShapes.from_model(model, tensor_parallel)
    grid = make_grid(shapes, model.num_layers, backend, quick)
    say(f"calibrating {model.name} on {backend} ({'quick' if quick else 'full'} grid)")
    provenance = {"backend": backend, **device.provenance()}
    points = measure(device, shapes, grid, block_size, say)
    graph_error = _measure_floor(points, model, shapes, backend, block_size, grid, say)

    copy = fit.copy_bandwidth(points)
    sections = {
        "copy_bandwidth": copy,
        "overhead": fit.fit_overhead(points, floor_mode, graph_error),
        "decode_attention": fit.fit_decode(points, copy["median_bps"]),
        "prefill_attention": fit.fit_prefill(points),
        "gemm": fit.fit_tokens(points, "gemm"),
        "lm_head": fit.fit_tokens(points, "lm_head"),
    }
    provenance.update(
        {
            "timer": device.timer.name,
            "l2_flush": device.timer.flushes_l2,
            "warmup": grid.warmup,
            "repeats": grid.repeats,
            "quick": quick,
            "kernel_file": f"kernels/{KERNEL_FILE}",
            "kernel_sha256": kernel_sha256(),
            "calibration_s": round(time.perf_counter() - started, 1),
            "date": iso_now(),
        }
    )
    measured = {
        "tensor_parallel": tensor_parallel,
        "block_size": block_size,
        "kv_dtype": "fp16",
        "layer_shapes": {
            "num_heads": shapes.num_heads,
            "num_kv_heads": shapes.num_kv_heads,
            "head_dim": shapes.head_dim,
            "gemms": [list(g) for g in shapes.gemms()],
            "lm_head": list(shapes.lm_head),
        },
        "gemm_dtype": "float32" if backend == "numpy" else "float16",
    }
    profile = build_profile(
        model=model,
        provenance=provenance,
        measured=measured,
        grid=grid,
        sections=sections,
        samples_csv=csv_path.name,
    )
    write_profile(profile, points, json_path)
    decode = sections["decode_attention"]
    say(
        f"wrote {json_path} and {csv_path.name} in {provenance['calibration_s']} s; decode "
        f"held-out mean |err| {decode['held_out']['mean_abs_rel_err']}"
    )
    return json_path


def _measure_floor(
    points: list[Point],
    model: ModelSpec,
    shapes: LayerShapes,
    backend: str,
    block_size: int,
    grid: Grid,
    say: Callable[[str], None],
) -> str | None:
    """Append the executor's minimal step (eager, and from a CUDA graph on a GPU) to `points`;
    returns why the graph one was not measured, if it was not. Under tensor parallelism the
    executor runs one GPU's shard (its heads, MLP and vocabulary; no all-reduce)."""
    shard = replace(
        model,
        num_heads=shapes.num_heads,
        num_kv_heads=shapes.num_kv_heads,
        intermediate_size=shapes.intermediate_size,
        vocab_size=shapes.vocab_size,
    )
    on_gpu = backend == "cupy"
    floor = measure_floor(
        shard,
        backend,
        block_size,
        warmup=grid.warmup if on_gpu else 1,
        repeats=grid.repeats if on_gpu else min(5, grid.repeats),  # a CPU step of 7B: seconds
        with_graphs=on_gpu,
        progress=say,
    )
    found = [("minimal_step", "minimal step eager", floor.eager)]
    if floor.graph is not None:
        found.append(("minimal_step_graph", "minimal step cuda-graph", floor.graph))
    for kind, label, samples in found:
        points.append(Point(kind, label, False, 1, 1, 1, 0, 0, 0, samples))
    return floor.graph_error

"""`calibrate`: measure a model's per-layer kernels on one device and write a profile.

    python -m pagesim.calibration.run --model llama-2-7b --backend cupy --quick --out profile.json

(`pagesim calibrate` calls `calibrate` the same way.) Writes the profile JSON and the CSV of raw
samples beside it; returns the JSON path.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pagesim.calibration import fit
from pagesim.calibration.backends import LayerShapes, make_backend
from pagesim.calibration.harness import iso_now
from pagesim.calibration.kernel import KERNEL_FILE, kernel_sha256
from pagesim.calibration.measure import make_grid, measure
from pagesim.calibration.profile import build_profile, profile_paths, write_profile
from pagesim.simulator.core.catalog import ModelSpec, resolve_model
from pagesim.simulator.core.errors import InputError, PagesimError

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
) -> Path:
    """Measure `model`'s per-GPU layer shapes on `backend` ("numpy" | "cupy"); write the profile.

    `out`: a .json path (the CSV goes beside it with the same stem) or a folder (profile.json +
    profile.csv inside); default ./profile-<model>-<backend>.json. `quick` trims the grids (NumPy:
    seconds; GPU: under ~3 minutes). Returns the JSON path.
    """
    if backend not in BACKENDS:
        raise InputError(f"unknown calibration backend {backend!r}; valid: {', '.join(BACKENDS)}")
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
    device = make_backend(backend)
    shapes = LayerShapes.from_model(model, tensor_parallel)
    grid = make_grid(shapes, model.num_layers, backend, quick)
    say(f"calibrating {model.name} on {backend} ({'quick' if quick else 'full'} grid)")
    provenance = {"backend": backend, **device.provenance()}
    points = measure(device, shapes, grid, block_size, say)

    copy = fit.copy_bandwidth(points)
    sections = {
        "copy_bandwidth": copy,
        "overhead": fit.fit_overhead(points),
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
        f"held-out mean |err| {decode['held_out']['mean_abs_rel_err']}"  # type: ignore[index]
    )
    return json_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="preset name or config.json path")
    parser.add_argument("--backend", choices=BACKENDS, default="numpy")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--tensor-parallel", type=int, default=1)
    args = parser.parse_args(argv)
    try:
        path = calibrate(
            resolve_model(args.model),
            args.backend,
            args.quick,
            args.out,
            block_size=args.block_size,
            tensor_parallel=args.tensor_parallel,
            progress=lambda line: print(line, flush=True),
        )
    except PagesimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Preflight: in about 20 seconds, everything a GPU call's later stages rely on, or one line
saying what is wrong.

The GPU scripts (gpu_check.sh, fidelity_check.sh) run it first and stop if it fails, so a
broken environment costs seconds of device time, not a whole call. In order:

1. the installed package (pagesim.simulator importable: an install, not only the checkout),
   NumPy and CuPy versions, torch (optional), simpy (required by the fidelity script);
2. the device: at least one, its name, compute capability, SMs, free memory (at least
   `min_free_gib`), driver, CUDA runtime and NVRTC versions;
3. the Llama-2-7B (MHA) and Llama-3-8B (GQA-4) decode variants compiled by CuPy (so with its own
   flags, -ftz=true included): registers, local-memory bytes and resident CTAs per SM of each;
4. each variant against the NumPy reference on a small NaN-poisoned case, split and unsplit;
5. the executor's fused kernels against their NumPy twins, and the L2 read flush launched once;
6. one device-to-device copy-bandwidth measurement (256 MiB).

Every line it prints starts with "preflight"; `PreflightError` carries the one line that
stops a script.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from pagesim.calibration.kernel import Variant

# The variants the first GPU call depends on: Llama-2-7B (32 heads, MHA) and Llama-3-8B (32 heads
# over 8 KV heads: GQA-4), fp16, 16-token blocks (docs/facts.md, "Models").
PREFLIGHT_LAYOUTS = {"llama-2-7b (MHA)": (32, 32), "llama-3-8b (GQA-4)": (32, 8)}
MIN_COPY_GBPS = 100.0  # far below any datacenter GPU's copy rate: only a broken setup is slower


class PreflightError(RuntimeError):
    """A check failed; the message is the one line the script prints before it stops."""


@contextmanager
def _check(name: str) -> Iterator[None]:
    """Any exception inside becomes a one-line PreflightError naming the check."""
    try:
        yield
    except PreflightError:
        raise
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise PreflightError(f"{name}: {type(exc).__name__}: {first}") from exc


def run_preflight(
    *,
    need_simpy: bool,
    min_free_gib: float,
    say: Callable[[str], None] = print,
) -> dict[str, object]:
    """Run every check; returns the figures found, or raises PreflightError at the first failure."""
    started = time.perf_counter()
    found: dict[str, object] = {}

    def line(text: str) -> None:
        say(f"preflight [{time.perf_counter() - started:5.1f} s] {text}")

    with _check("packages"):
        found["packages"] = packages = _packages(need_simpy)
        line("packages: " + ", ".join(f"{k} {v}" for k, v in packages.items()))
    with _check("device"):
        cupy = importlib.import_module("cupy")
        found["device"] = device = _device(cupy, min_free_gib)
        line("device: " + ", ".join(f"{k} {v}" for k, v in device.items()))
    for label, (heads, kv_heads) in PREFLIGHT_LAYOUTS.items():
        with _check(f"kernel {label}"):
            found[label] = kernel = _kernel(cupy, heads, kv_heads)
            line(f"kernel {label}: " + ", ".join(f"{k} {v}" for k, v in kernel.items()))
    with _check("executor kernels"):
        _layer_ops(cupy)
        line("executor kernels (add+RMSNorm, SiLU-and-mul, K/V write) and the L2 read flush: ok")
    with _check("copy bandwidth"):
        from pagesim.calibration.backends import CupyBackend

        bps, _ = CupyBackend().copy_bandwidth(256 << 20, warmup=2, repeats=5)
        found["copy_gbps"] = round(bps / 1e9, 1)
        if bps / 1e9 < MIN_COPY_GBPS:
            raise PreflightError(
                f"copy bandwidth {bps / 1e9:.1f} GB/s is under {MIN_COPY_GBPS:g} GB/s: the device "
                "is not what it claims, or is shared"
            )
        line(f"copy bandwidth {bps / 1e9:.0f} GB/s (read + written, 256 MiB)")
    line("all checks passed")
    return found


def _packages(need_simpy: bool) -> dict[str, str]:
    import pagesim

    try:
        simulator = importlib.import_module("pagesim.simulator")
    except ImportError as exc:
        raise PreflightError(
            "pagesim.simulator is not importable: install the checkout first (the scripts' "
            f"install stage; pip install --no-deps --no-build-isolation -e .): {exc}"
        ) from None
    location = simulator.__file__ or "an unknown place"  # None only for a namespace package
    versions = {"pagesim": f"{pagesim.__version__} at {location.rsplit('/', 2)[0]}"}
    for name in ("numpy", "cupy", "torch", "simpy"):
        try:
            versions[name] = importlib.metadata.version(
                {"cupy": _cupy_distribution()}.get(name, name)
            )
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "absent"
    if versions["cupy"] == "absent":
        raise PreflightError("CuPy is not installed (the image should have cupy-cuda13x)")
    if need_simpy and versions["simpy"] == "absent":
        raise PreflightError(
            "simpy is not installed: carry its wheel in .whl/ (see the script's header)"
        )
    return versions


def _cupy_distribution() -> str:
    for name in ("cupy-cuda13x", "cupy-cuda12x", "cupy"):
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        return name
    return "cupy"


def _device(cupy: Any, min_free_gib: float) -> dict[str, object]:
    runtime = cupy.cuda.runtime
    count = runtime.getDeviceCount()
    if count < 1:
        raise PreflightError("CuPy sees no CUDA device")
    props = runtime.getDeviceProperties(0)
    name = props.get("name", b"?")
    free, total = runtime.memGetInfo()
    try:
        nvrtc: tuple[int, ...] | tuple[str] = tuple(cupy.cuda.nvrtc.getVersion())
    except Exception as exc:  # the kernel checks below say whether NVRTC works at all
        nvrtc = (f"unknown ({type(exc).__name__})",)
    info: dict[str, object] = {
        "count": count,
        "name": name.decode() if isinstance(name, bytes) else str(name),
        "cc": cupy.cuda.Device(0).compute_capability,
        "sms": props.get("multiProcessorCount"),
        "free_gib": round(free / 2**30, 1),
        "total_gib": round(total / 2**30, 1),
        "driver": runtime.driverGetVersion(),
        "runtime": runtime.runtimeGetVersion(),
        "nvrtc": ".".join(str(v) for v in nvrtc),
    }
    if free / 2**30 < min_free_gib:
        raise PreflightError(
            f"only {free / 2**30:.1f} GiB of GPU memory free, {min_free_gib:g} GiB needed"
        )
    return info


def _kernel(cupy: Any, num_heads: int, num_kv_heads: int) -> dict[str, object]:
    """Compile through CuPy, report resources, and check against the reference."""
    from pagesim.calibration.attention_reference import make_paged_case, reference_decode_attention
    from pagesim.calibration.kernel import (
        compiled_functions,
        kernel_resources,
        plan_decode_attention,
        resident_ctas_per_sm,
    )
    from pagesim.calibration.partitions import heads_per_cta

    variant = Variant("fp16", 128, 16, heads_per_cta(num_heads // num_kv_heads), True)
    started = time.perf_counter()
    decode, _ = compiled_functions(variant)
    compile_s = time.perf_counter() - started
    resources = kernel_resources(decode)
    capability = int(cupy.cuda.Device(0).compute_capability)
    resident = resident_ctas_per_sm(variant, 0)
    report: dict[str, object] = {
        "compile_s": round(compile_s, 1),
        "registers": resources["num_regs"],
        "local_bytes": resources["local_size_bytes"],
        "ctas_per_sm": resident,
        "launch_bound": variant.min_ctas_per_sm(capability),
    }
    if resident < variant.min_ctas_per_sm(capability) or (resources["local_size_bytes"] or 0) > 0:
        report["WARNING"] = "occupancy under the launch bound or local memory used"
    rng = np.random.default_rng(num_kv_heads)
    lens = [1, 15, 16, 17, 300, 0, 1000]
    case = make_paged_case(rng, lens, num_heads, num_kv_heads, 128, 16)
    ref = reference_decode_attention(
        case.q, case.k_cache, case.v_cache, case.block_tables, case.context_lens
    )
    q, k_cache, v_cache = (cupy.asarray(a) for a in (case.q, case.k_cache, case.v_cache))
    lens_dev, tables = cupy.asarray(case.context_lens), cupy.asarray(case.block_tables)
    errors = []
    for partition_size in (None, 128, 1024):  # the plan's choice, 128-token partitions, unsplit
        out = cupy.full(case.q.shape, np.nan, dtype=cupy.float16)
        plan = plan_decode_attention(
            q, k_cache, v_cache, lens_dev, tables, partition_size=partition_size, out=out
        )
        got = cupy.asnumpy(plan.run()).astype(np.float32)
        if not np.isfinite(got).all():
            raise PreflightError(
                f"{variant.decode_name}: NaN in the output (partition {partition_size}): an "
                "element was not written, or poison was read"
            )
        error = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
        if error >= 2e-3 or got[lens.index(0)].any():
            raise PreflightError(
                f"{variant.decode_name}: relative error {error:.2e} against the reference "
                f"(partition {partition_size}; fp16 allows 2e-3)"
            )
        errors.append(error)
    report["max_rel_err"] = f"{max(errors):.1e}"
    return report


def _layer_ops(cupy: Any) -> None:
    from pagesim.calibration import layer_ops
    from pagesim.calibration.harness import CudaEventTimer

    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 512), dtype=np.float32).astype(np.float16)
    residual = rng.standard_normal((3, 512), dtype=np.float32).astype(np.float16)
    weight = np.ones(512, dtype=np.float16)
    res_dev = cupy.asarray(residual)
    out = layer_ops.gpu_add_rms_norm(cupy, cupy.asarray(x), res_dev, cupy.asarray(weight))
    ref, _ = layer_ops.add_rms_norm(x, residual, weight)
    gate_up = rng.standard_normal((3, 256), dtype=np.float32).astype(np.float16)
    act = layer_ops.gpu_silu_mul(cupy, cupy.asarray(gate_up), 1)
    for got, want in ((out, ref), (act, layer_ops.silu_mul(gate_up))):
        got32 = cupy.asnumpy(got).astype(np.float32)
        want32 = want.astype(np.float32)
        if np.linalg.norm(got32 - want32) > 2e-3 * np.linalg.norm(want32):
            raise PreflightError("the executor's fused kernels disagree with their NumPy twins")
    timer = CudaEventTimer(cupy, 1 << 20, "read", 1)
    timer.flush()
    cupy.cuda.get_current_stream().synchronize()

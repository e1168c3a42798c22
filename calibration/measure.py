"""What calibration measures for a model's shapes, on which grid, and the raw points it records.

Per layer (then scaled by layers in the simulator):

- decode attention over (number of sequences x mean context), each in a uniform mix (every
  sequence the mean length) and a skewed one (lengths at the quantiles of an exponential
  distribution with that mean, normalised to the same total);
- the linear layers as GEMMs over token counts: QKV, output projection, MLP gate+up (or up), down;
  and the LM head (once per step) over the number of sequences that sample;
- prefill attention over (number of prompts x prompt length), causal, whole prompts;
- the layer's elementwise work at each GEMM token count (two residual-add + RMSNorm, the
  activation, the new tokens' K/V write, the query gather: what the executor runs between its
  GEMMs), added to the per-layer token curve as its "elementwise" part;
- the bare launch cost of a step (as many empty kernels as the GPU executor launches, then a
  synchronise); the per-step floor itself is the executor's minimal step (floor.py);
- the device's copy bandwidth (bytes read + written per second), the ceiling for "% of copy".

Every grid point whose size exceeds the backend's budget is dropped (so the NumPy backend stays
quick on full-size models); some interior points are held out of the fits to report their error.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from pagesim.calibration.backends import CupyBackend, NumpyBackend, gemm_cost, prefill_cost
from pagesim.calibration.harness import Samples
from pagesim.calibration.shapes import LayerShapes, Prepared

MIXES = ("uniform", "skewed")
# Kernels the GPU executor launches per decode layer (forward_gpu.py): QKV GEMM, K/V write, query
# gather, attention, output GEMM, add+norm, gate+up GEMM, SiLU-and-mul, down GEMM, add+norm.
LAUNCHES_PER_LAYER = 10


@dataclass(frozen=True, slots=True)
class DecodeGridPoint:
    num_seqs: int
    mean_context: int
    mix: str  # "uniform" | "skewed"
    is_held_out: bool


@dataclass(frozen=True, slots=True)
class Grid:
    warmup: int
    repeats: int
    copy_bytes: int
    decode: tuple[DecodeGridPoint, ...]
    gemm_tokens: tuple[int, ...]  # fitted
    gemm_held_out: tuple[int, ...]  # interpolated, to report the error
    prefill: tuple[tuple[int, int, bool], ...]  # (num_seqs, prompt_len, is_held_out)
    num_launches: int  # kernels the bare-launch measurement launches per step


@dataclass(frozen=True, slots=True)
class Point:
    """One measured configuration with all its samples (one CSV row per sample)."""

    kind: str  # decode | gemm | lm_head | prefill | copy | launches | minimal_step[_graph]
    label: str
    is_held_out: bool
    num_seqs: int
    kv_tokens: int
    tokens: int
    prefill_sq: int  # Σ prompt_len² (prefill points)
    bytes: int
    flops: int
    samples: Samples


@dataclass(frozen=True, slots=True)
class _Axes:
    decode_seqs: tuple[int, ...]
    decode_contexts: tuple[int, ...]
    decode_max_bytes: int
    gemm_tokens: tuple[int, ...]
    gemm_held_out: tuple[int, ...]
    gemm_max_flops: int
    prefill_lens: tuple[int, ...]
    prefill_seqs: tuple[int, ...]
    prefill_held_out: tuple[tuple[int, int], ...]
    prefill_max_flops: int
    warmup: int
    repeats: int
    copy_bytes: int


GIB = 1 << 30
MIB = 1 << 20

# Budgets per call (decode: one layer's K/V bytes). GPU: up to 8-16 GiB per decode call (many
# times the L2, vLLM-sized batches); NumPy: small enough that `--quick` takes seconds on 2 cores.
_AXES: dict[tuple[str, bool], _Axes] = {
    ("cupy", False): _Axes(
        (1, 2, 4, 8, 16, 32, 64, 128, 256),
        (16, 64, 256, 1024, 2048, 4096, 8192),
        16 * GIB,
        (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384),
        (3, 12, 48, 192, 768, 3072, 12288),
        8 * 10**12,
        (16, 64, 128, 256, 512, 1024, 2048, 4096, 8192),
        (1, 2, 4, 8),
        ((1, 384), (2, 768), (4, 1536), (1, 3072)),
        4 * 10**12,
        5,
        40,
        GIB,
    ),
    ("cupy", True): _Axes(
        (1, 4, 16, 64, 256),
        (16, 256, 1024, 4096),
        8 * GIB,
        (1, 4, 16, 64, 256, 1024, 4096, 8192),
        (8, 512, 2048),
        4 * 10**12,
        (16, 128, 512, 1024, 2048, 4096),
        (1, 4),
        ((1, 768), (2, 1536)),
        2 * 10**12,
        3,
        15,
        512 * MIB,
    ),
    ("numpy", False): _Axes(
        (1, 2, 4, 8, 16),
        (16, 64, 256, 1024),
        64 * MIB,
        (1, 2, 4, 8, 16, 32, 64, 128, 256),
        (3, 24, 96),
        20 * 10**9,
        (16, 32, 64, 128, 256),
        (1, 2),
        ((1, 48), (2, 96)),
        4 * 10**9,
        2,
        15,
        256 * MIB,
    ),
    ("numpy", True): _Axes(
        (1, 2, 4, 8),
        (16, 64, 256),
        16 * MIB,
        (1, 4, 16, 64),
        (8, 32),
        4 * 10**9,
        (16, 32, 64, 128),
        (1, 2),
        ((1, 48),),
        1 * 10**9,
        1,
        5,
        32 * MIB,
    ),
}


def context_mix(num_seqs: int, mean_context: int, mix: str) -> list[int]:
    """Context lengths of `num_seqs` sequences averaging `mean_context` tokens.

    "skewed": lengths at the (i + 0.5)/n quantiles of an exponential distribution, rescaled so the
    total is exactly num_seqs x mean_context (a few long sequences, many short ones).
    """
    if mix == "uniform" or num_seqs == 1:
        return [mean_context] * num_seqs
    weights = [-math.log(1 - (i + 0.5) / num_seqs) for i in range(num_seqs)]
    total = num_seqs * mean_context
    lens = [max(1, round(w * total / sum(weights))) for w in weights]
    lens[-1] = max(1, lens[-1] + total - sum(lens))
    return lens


def make_grid(shapes: LayerShapes, num_layers: int, backend: str, quick: bool) -> Grid:
    """The measurement grid for one layer of `shapes` on `backend`, trimmed to its budgets."""
    axes = _AXES[(backend, quick)]
    decode = []
    seqs, contexts = axes.decode_seqs, axes.decode_contexts
    interior = 0
    for mix in MIXES:
        for n in seqs:
            if mix == "skewed" and n == 1:
                continue  # one sequence has no skew
            for c in contexts:
                if n * c * shapes.kv_bytes_per_token > axes.decode_max_bytes:
                    continue
                is_interior = n not in (seqs[0], seqs[-1]) and c not in (contexts[0], contexts[-1])
                held = is_interior and interior % 3 == 1
                interior += is_interior
                decode.append(DecodeGridPoint(n, c, mix, held))

    def gemm_fits(tokens: int) -> bool:
        flops = sum(gemm_cost(tokens, k, n)[1] for _, k, n in shapes.gemms())
        return tokens == 1 or flops <= axes.gemm_max_flops

    gemm_tokens = tuple(t for t in axes.gemm_tokens if gemm_fits(t))
    top = gemm_tokens[-1]
    gemm_held = tuple(t for t in axes.gemm_held_out if gemm_fits(t) and t < top)
    prefill: list[tuple[int, int, bool]] = []
    for n in axes.prefill_seqs:
        for length in axes.prefill_lens:
            if length == axes.prefill_lens[0] or (
                prefill_cost(shapes, n, length)[1] <= axes.prefill_max_flops
            ):
                prefill.append((n, length, False))
    for n, length in axes.prefill_held_out:
        if prefill_cost(shapes, n, length)[1] <= axes.prefill_max_flops:
            prefill.append((n, length, True))
    return Grid(
        axes.warmup,
        axes.repeats,
        axes.copy_bytes,
        tuple(decode),
        gemm_tokens,
        gemm_held,
        tuple(prefill),
        num_layers * LAUNCHES_PER_LAYER + 2,  # + the first norm and the LM head
    )


def _point(
    kind: str,
    label: str,
    is_held_out: bool,
    prepared: Prepared,
    samples: Samples,
    *,
    num_seqs: int = 0,
    kv_tokens: int = 0,
    tokens: int = 0,
    prefill_sq: int = 0,
) -> Point:
    return Point(
        kind,
        label,
        is_held_out,
        num_seqs,
        kv_tokens,
        tokens,
        prefill_sq,
        prepared.bytes,
        prepared.flops,
        samples,
    )


def measure(
    backend: NumpyBackend | CupyBackend,
    shapes: LayerShapes,
    grid: Grid,
    block_size: int,
    progress: Callable[[str], None] = lambda _: None,
) -> list[Point]:
    """Time every grid point; returns all points with all their samples."""
    timer = backend.timer
    warmup, repeats = grid.warmup, grid.repeats
    points: list[Point] = []

    def sample(fn: Callable[[], object]) -> Samples:
        return timer.sample(fn, warmup=warmup, repeats=repeats)

    bandwidth, samples = backend.copy_bandwidth(grid.copy_bytes, warmup, repeats)
    copy = Prepared(lambda: None, 2 * grid.copy_bytes, 0)
    points.append(_point("copy", "device copy", False, copy, samples))
    progress(f"copy bandwidth {bandwidth / 1e9:.1f} GB/s (read + written)")

    steps = backend.empty_step(grid.num_launches, warmup, repeats)
    empty = Prepared(lambda: None, 0, 0)
    label = f"{grid.num_launches} empty launches"
    points.append(_point("launches", label, False, empty, steps, tokens=grid.num_launches))
    progress(f"bare launches ({grid.num_launches} + sync) {steps.median_s * 1e6:.1f} us")

    mixes = [context_mix(p.num_seqs, p.mean_context, p.mix) for p in grid.decode]
    blocks = max((sum(-(-n // block_size) for n in lens) for lens in mixes), default=0)
    backend.reserve_kv(shapes, blocks, block_size)
    for point, lens in zip(grid.decode, mixes, strict=True):
        prepared = backend.prepare_decode(shapes, lens)
        label = f"decode n={point.num_seqs} ctx={point.mean_context} {point.mix}"
        points.append(
            _point(
                "decode",
                label,
                point.is_held_out,
                prepared,
                sample(prepared.fn),
                num_seqs=len(lens),
                kv_tokens=sum(lens),
                tokens=len(lens),
            )
        )
    backend.release()
    progress(f"decode attention: {len(grid.decode)} points")

    held = set(grid.gemm_held_out)
    for tokens in sorted(grid.gemm_tokens + grid.gemm_held_out):
        for name, k, n in shapes.gemms():
            prepared = backend.prepare_gemm(tokens, k, n)
            label = f"{name} t={tokens}"
            points.append(
                _point("gemm", label, tokens in held, prepared, sample(prepared.fn), tokens=tokens)
            )
        prepared = backend.prepare_elementwise(shapes, tokens, block_size)
        label = f"elementwise t={tokens}"
        points.append(
            _point("gemm", label, tokens in held, prepared, sample(prepared.fn), tokens=tokens)
        )
        k, n = shapes.lm_head
        prepared = backend.prepare_gemm(tokens, k, n)
        points.append(
            _point(
                "lm_head",
                f"lm_head t={tokens}",
                tokens in held,
                prepared,
                sample(prepared.fn),
                num_seqs=tokens,
                tokens=tokens,
            )
        )
    backend.release()
    progress(f"GEMMs: {len(grid.gemm_tokens) + len(grid.gemm_held_out)} token counts")

    for num_seqs, length, is_held in grid.prefill:
        prepared = backend.prepare_prefill(shapes, num_seqs, length)
        points.append(
            _point(
                "prefill",
                f"prefill n={num_seqs} len={length}",
                is_held,
                prepared,
                sample(prepared.fn),
                num_seqs=num_seqs,
                tokens=num_seqs * length,
                prefill_sq=num_seqs * length * length,
            )
        )
    backend.release()
    progress(f"prefill attention: {len(grid.prefill)} points")
    return points

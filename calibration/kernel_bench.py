"""`bench_kernel`: the paged decode kernel against the copy ceiling, a contiguous layout and torch.

Per shape (num_seqs x context, uniform lengths, one layer of the model's attention) and KV dtype,
one row:

- time (median, p10, p90 over L2-flushed CUDA-event samples) and achieved bytes/s, counting the
  fewest bytes the call must move (each K/V row once, q read, out written), and % of the
  device-to-device copy bandwidth measured in the same run (bytes read + written);
- the same time with the other L2 flush (`read` leaves clean lines, `memset` dirty ones that may
  be written back during the timed kernel): the difference says whether the flush biases;
- the split-K plan chosen (partitions, partition size, the occupancy it was sized for) and a
  sweep of forced partition sizes (128 ... the whole context): the fastest one, and all times;
- fp16 only (bench_baselines.py): paged_over_contiguous, the same kernel over a contiguous
  [S, Hkv, context, D] cache holding the same K/V (outputs must be identical); torch's
  scaled_dot_product_attention on that dense K/V (`sdpa_dense`: what the attention costs with no
  paging at all) and on K/V gathered through the block table first (`sdpa_gather`: the
  no-paged-kernel way, which moves ~5x the bytes), with their relative differences from the
  kernel's output.

Shapes: the fidelity checks' regime (2-24 sequences x 200-600 tokens) and long ones at 2k, 16k
and 64k KV tokens in total (`FIDELITY_SHAPES`, `LONG_SHAPES`). GPU only: without CuPy and a GPU
it raises a PagesimError saying so.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pagesim.calibration.backends import table_for
from pagesim.calibration.bench_baselines import baseline_columns
from pagesim.calibration.harness import FLUSH_MODES, CudaEventTimer
from pagesim.calibration.kernel import kernel_sha256
from pagesim.calibration.partitions import PARTITION_QUANTUM
from pagesim.calibration.shapes import LayerShapes
from pagesim.simulator.core.catalog import ModelSpec
from pagesim.simulator.core.errors import InputError, PagesimError

# (num_seqs, context). The fidelity scenarios' decode steps: 2-24 sequences of 200-600 tokens.
FIDELITY_SHAPES = ((2, 200), (2, 600), (8, 200), (8, 400), (8, 600), (24, 200), (24, 600))
# 2k, 16k and 64k KV tokens per call, from one long sequence to many short ones (split-K).
LONG_SHAPES = (
    (1, 2048),
    (8, 256),
    (1, 16384),
    (16, 1024),
    (64, 256),
    (1, 65536),
    (16, 4096),
    (256, 256),
)
SHAPE_SETS = {
    "fidelity": FIDELITY_SHAPES,
    "long": LONG_SHAPES,
    "all": FIDELITY_SHAPES + LONG_SHAPES,
}
DEFAULT_SHAPES = FIDELITY_SHAPES + LONG_SHAPES
PARTITION_SWEEP = (128, 256, 512, 1024, 2048)  # tokens; the whole context is always added
KV_DTYPES = ("fp16", "bf16")


def parse_sizes(text: str, option: str) -> tuple[int, ...]:
    """A comma-separated list of positive integers ("128,256"); InputError naming the bad part."""
    sizes = []
    for part in text.split(","):
        if not part.strip().isdigit() or int(part) < 1:
            raise InputError(f"{option}: {part.strip()!r} is not a positive integer (e.g. 128,256)")
        sizes.append(int(part))
    return tuple(sizes)


def bench_models(
    models: Sequence[ModelSpec],
    *,
    shapes: str = "all",
    partition_sweep: str = ",".join(map(str, PARTITION_SWEEP)),
    out: Path | None = None,
    progress: Callable[[str], None] | None = None,
    **options: Any,
) -> list[dict[str, object]]:
    """`pagesim bench kernel`: the shapes and partition sweep parsed from their option text,
    `bench_kernel` for each model in turn (`options` passed through), the rows written to `out`
    as CSV when given."""
    parsed = parse_shapes(shapes)
    sweep = parse_sizes(partition_sweep, "--partition-sweep")
    rows: list[dict[str, object]] = []
    for model in models:
        rows += bench_kernel(
            model, shapes=parsed, partition_sweep=sweep, progress=progress, **options
        )
    if out is not None:
        write_rows_csv(rows, out)
    return rows


def parse_shapes(text: str) -> tuple[tuple[int, int], ...]:
    """A shape set's name (fidelity, long, all) or `SxCTX` pairs: "2x200,8x600". InputError
    (one line, naming the bad part) otherwise."""
    text = text.strip().lower()
    if text in SHAPE_SETS:
        return SHAPE_SETS[text]
    shapes = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)\s*", part)
        if match is None or int(match[1]) < 1 or int(match[2]) < 1:
            raise InputError(
                f"--shapes: {part.strip()!r} is not SEQSxCONTEXT (e.g. 8x600) with both >= 1; "
                f"or use one of {', '.join(SHAPE_SETS)}"
            )
        shapes.append((int(match[1]), int(match[2])))
    return tuple(shapes)


def bench_kernel(
    model: ModelSpec,
    *,
    block_size: int = 16,
    shapes: Sequence[tuple[int, int]] = DEFAULT_SHAPES,
    tensor_parallel: int = 1,
    warmup: int = 5,
    repeats: int = 30,
    kv_dtypes: Sequence[str] = KV_DTYPES,
    flushes: Sequence[str] = FLUSH_MODES,
    partition_sweep: Sequence[int] = PARTITION_SWEEP,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, object]]:
    """One row per (shape, KV dtype); see the module docstring for the columns. The first of
    `flushes` times every column; the others time the paged kernel again."""
    from pagesim.calibration.backends import CupyBackend

    bad = [d for d in kv_dtypes if d not in KV_DTYPES] + [
        f for f in flushes if f not in FLUSH_MODES
    ]
    if bad or not kv_dtypes or not flushes:
        raise InputError(
            f"bench kernel: KV dtypes must be among {', '.join(KV_DTYPES)} and flushes among "
            f"{', '.join(FLUSH_MODES)} (at least one of each); got {', '.join(bad) or 'none'}"
        )
    if any(s % PARTITION_QUANTUM or s <= 0 for s in partition_sweep):
        raise InputError(f"bench kernel: partition sizes must be multiples of {PARTITION_QUANTUM}")
    try:
        backend = CupyBackend(flush=flushes[0])
    except PagesimError as exc:
        raise PagesimError(f"`bench kernel` needs a CUDA GPU: {exc}") from None
    say = progress or (lambda _: None)
    cp = backend.cupy
    timers = {flushes[0]: backend.timer}
    for flush in flushes[1:]:
        timers[flush] = CudaEventTimer(cp, backend.l2_bytes, flush, backend.num_sms)
    layer = LayerShapes.from_model(model, tensor_parallel)
    provenance = backend.provenance()
    copy_bps, _ = backend.copy_bandwidth(1 << 30, warmup, repeats)
    say(f"{provenance['device']}: copy bandwidth {copy_bps / 1e9:.0f} GB/s (read + written)")
    rng = np.random.default_rng(0)
    rows: list[dict[str, object]] = []
    for num_seqs, context in shapes:
        for kv_dtype in kv_dtypes:
            row = _bench_shape(
                backend,
                timers,
                layer,
                model,
                num_seqs,
                context,
                block_size,
                kv_dtype,
                rng,
                warmup=warmup,
                repeats=repeats,
                sweep=partition_sweep,
                copy_bps=copy_bps,
                device=str(provenance["device"]),
            )
            rows.append(row)
            say(format_row(row))
            backend.release()
    return rows


def _bench_shape(
    backend: Any,
    timers: dict[str, Any],
    layer: LayerShapes,
    model: ModelSpec,
    num_seqs: int,
    context: int,
    block_size: int,
    kv_dtype: str,
    rng: np.random.Generator,
    *,
    warmup: int,
    repeats: int,
    sweep: Sequence[int],
    copy_bps: float,
    device: str,
) -> dict[str, object]:
    from pagesim.calibration.kernel import kernel_resources, plan_decode_attention

    cp = backend.cupy
    first = next(iter(timers))
    timer = timers[first]
    lens = [context] * num_seqs
    num_blocks = num_seqs * math.ceil(context / block_size) + 1
    backend.reserve_kv(layer, num_blocks, block_size)
    k_cache, v_cache = backend.kv_pool
    q = backend.random_fp16((num_seqs, layer.num_heads, layer.head_dim))
    if kv_dtype == "bf16":  # the same random values, as bfloat16 bits (the upper half of fp32)
        k_cache, v_cache, q = (_to_bf16_bits(cp, a) for a in (k_cache, v_cache, q))
    table = cp.asarray(table_for(rng, lens, block_size, num_blocks))
    lens_dev = cp.asarray(np.asarray(lens, dtype=np.int32))
    paged = plan_decode_attention(q, k_cache, v_cache, lens_dev, table, kv_dtype=kv_dtype)

    def sample(fn: Callable[[], object], which: Any = timer, rounds: int = warmup) -> Any:
        return which.sample(fn, warmup=rounds, repeats=repeats)

    t_paged = sample(paged.run)
    bps = paged.min_bytes / t_paged.median_s
    decode = paged.launches[0][0]
    row: dict[str, object] = {
        "model": model.name,
        "device": device,
        "kv_dtype": kv_dtype,
        "num_heads": layer.num_heads,
        "num_kv_heads": layer.num_kv_heads,
        "head_dim": layer.head_dim,
        "block_size": block_size,
        "num_seqs": num_seqs,
        "context_len": context,
        "kv_tokens": num_seqs * context,
        "partitions": paged.num_partitions,
        "partition_size": paged.partition_size,
        "ctas_per_sm": paged.ctas_per_sm,
        **{f"kernel_{k}": v for k, v in kernel_resources(decode).items()},
        "bytes": paged.min_bytes,
        "flush": first,
        "time_s": t_paged.median_s,
        "p10_s": t_paged.p10_s,
        "p90_s": t_paged.p90_s,
        "gbps": bps / 1e9,
        "pct_of_copy_bw": 100 * bps / copy_bps,
        "copy_bw_gbps": copy_bps / 1e9,
    }
    for flush, other in timers.items():
        if flush != first:
            row[f"time_{flush}_flush_s"] = sample(paged.run, other).median_s
    forced = {}
    for size in sorted({*sweep, PARTITION_QUANTUM * -(-context // PARTITION_QUANTUM)}):
        if size > 2 * context and size > PARTITION_QUANTUM:
            continue
        plan = plan_decode_attention(
            q,
            k_cache,
            v_cache,
            lens_dev,
            table,
            kv_dtype=kv_dtype,
            partition_size=size,
            validate=False,
        )
        forced[size] = sample(plan.run, rounds=2).median_s
    best = min(forced, key=forced.__getitem__)
    row["best_forced_partition_size"] = best
    row["best_forced_time_s"] = forced[best]
    row["partition_sweep"] = " ".join(f"{k}:{v:.3e}" for k, v in forced.items())
    if kv_dtype == "fp16":
        row.update(
            baseline_columns(backend, paged, t_paged.median_s, q, table, lens_dev, context, sample)
        )
    row["kernel_sha256"] = kernel_sha256()[:16]
    return row


def _to_bf16_bits(cp: Any, array: Any) -> Any:
    """fp16 values -> bfloat16 bits (uint16), truncating the float32's low half."""
    return (array.astype(cp.float32).view(cp.uint32) >> 16).astype(cp.uint16)


def format_row(row: dict[str, object]) -> str:
    def ratio(key: str) -> str:
        value = row.get(key)
        return f"{value:.2f}" if isinstance(value, float) else "n/a"

    time_s = row["time_s"]
    assert isinstance(time_s, float), "a bench row holds its median time as a float"
    return (
        f"{row['model']:>12} {row['kv_dtype']} S={row['num_seqs']:<4} ctx={row['context_len']:<6} "
        f"parts={row['partitions']:<3} {time_s * 1e6:9.1f} us  "
        f"{row['gbps']:7.0f} GB/s  {row['pct_of_copy_bw']:5.1f}% copy  "
        f"best forced {row['best_forced_partition_size']}  paged/contig "
        f"{ratio('paged_over_contiguous')}  paged/sdpa-dense {ratio('paged_over_sdpa_dense')}  "
        f"paged/sdpa-gather {ratio('paged_over_sdpa_gather')}"
    )


def write_rows_csv(rows: list[dict[str, object]], path: Path) -> None:
    """Every row's columns (bf16 rows lack the fp16 baselines: blank there)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)

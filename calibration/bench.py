"""`bench_kernel`: the paged decode kernel against the copy ceiling, a contiguous layout and torch.

Per shape (num_seqs x context, uniform lengths, one layer of the model's attention):

- time (median, p10, p90 over L2-flushed CUDA-event samples) and achieved bytes/s, counting the
  fewest bytes the call must move (each K/V row once, q read, out written);
- % of the device-to-device copy bandwidth measured in the same run (bytes read + written);
- paged_over_contiguous: time of the paged kernel / the same kernel over a contiguous
  [num_seqs, kv_heads, context, head_dim] cache holding the same K/V (outputs must be identical);
- paged_over_torch: time of the paged kernel / torch gathering K/V through the block table into
  a dense tensor and calling scaled_dot_product_attention (the no-paged-kernel way), with the
  relative difference of their outputs.

    python -m pagesim.calibration.bench --model llama-2-7b --model llama-3-8b --out bench.csv

GPU only: on a machine without CuPy and a GPU it raises a PagesimError saying so.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pagesim.calibration.backends import LayerShapes, table_for
from pagesim.calibration.kernel import PARTITION_QUANTUM, kernel_sha256
from pagesim.simulator.core.catalog import ModelSpec, resolve_model
from pagesim.simulator.core.errors import PagesimError

# (num_seqs, context): all >= 16k KV tokens per call; few long sequences exercise split-K.
DEFAULT_SHAPES = (
    (1, 16384),
    (2, 8192),
    (4, 4096),
    (16, 1024),
    (64, 256),
    (16, 4096),
    (64, 1024),
    (256, 256),
)


def _torch_gather_sdpa(
    q: Any, k_cache: Any, v_cache: Any, table: Any, context: int
) -> Callable[[], Any] | None:
    """torch: gather K/V through the block table into dense tensors, then SDPA (None: no torch)."""
    try:
        import torch
        import torch.nn.functional as functional
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    num_seqs, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    group = num_heads // num_kv_heads
    kt, vt = torch.from_dlpack(k_cache), torch.from_dlpack(v_cache)
    qt = torch.from_dlpack(q).view(num_seqs, num_heads, 1, head_dim)
    tables = torch.from_dlpack(table).long()

    def dense(cache: Any) -> Any:
        gathered = cache[tables]  # [S, blocks, Hkv, B, D]
        gathered = gathered.permute(0, 2, 1, 3, 4).reshape(num_seqs, num_kv_heads, -1, head_dim)
        return gathered[:, :, :context]

    # enable_gqa needs torch >= 2.5; older torch repeats the KV heads (part of its cost).
    use_enable_gqa = group > 1
    if use_enable_gqa:
        try:
            functional.scaled_dot_product_attention(qt, dense(kt), dense(vt), enable_gqa=True)
        except TypeError:
            use_enable_gqa = False

    def run() -> Any:
        k, v = dense(kt), dense(vt)
        if use_enable_gqa:
            return functional.scaled_dot_product_attention(qt, k, v, enable_gqa=True)
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        return functional.scaled_dot_product_attention(qt, k, v)

    return run


def bench_kernel(
    model: ModelSpec,
    *,
    block_size: int = 16,
    shapes: tuple[tuple[int, int], ...] | list[tuple[int, int]] = DEFAULT_SHAPES,
    tensor_parallel: int = 1,
    warmup: int = 5,
    repeats: int = 30,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, object]]:
    """One row per (num_seqs, context) shape; see the module docstring for the columns."""
    from pagesim.calibration.backends import CupyBackend
    from pagesim.calibration.kernel import plan_decode_attention

    try:
        backend = CupyBackend()
    except PagesimError as exc:
        raise PagesimError(f"`bench kernel` needs a CUDA GPU: {exc}") from None
    say = progress or (lambda _: None)
    cp = backend.cupy
    layer = LayerShapes.from_model(model, tensor_parallel)
    provenance = backend.provenance()
    copy_bps, _ = backend.copy_bandwidth(1 << 30, warmup, repeats)
    say(f"{provenance['device']}: copy bandwidth {copy_bps / 1e9:.0f} GB/s (read + written)")
    rng = np.random.default_rng(0)
    rows: list[dict[str, object]] = []
    for num_seqs, context in shapes:
        lens = [context] * num_seqs
        blocks_per_seq = math.ceil(context / block_size)
        num_blocks = num_seqs * blocks_per_seq + 1
        backend.reserve_kv(layer, num_blocks, block_size)
        assert backend.kv_pool is not None
        k_cache, v_cache = backend.kv_pool
        table = cp.asarray(table_for(rng, lens, block_size, num_blocks))
        lens_dev = cp.asarray(np.asarray(lens, dtype=np.int32))
        q = backend.random_fp16((num_seqs, layer.num_heads, layer.head_dim))
        paged = plan_decode_attention(q, k_cache, v_cache, lens_dev, table)
        # The same K/V, laid out contiguously: [S, Hkv, context, D].
        k_dense = (
            k_cache[table]
            .transpose(0, 2, 1, 3, 4)
            .reshape(num_seqs, layer.num_kv_heads, -1, layer.head_dim)[:, :, :context]
        )
        v_dense = (
            v_cache[table]
            .transpose(0, 2, 1, 3, 4)
            .reshape(num_seqs, layer.num_kv_heads, -1, layer.head_dim)[:, :, :context]
        )
        k_dense, v_dense = cp.ascontiguousarray(k_dense), cp.ascontiguousarray(v_dense)
        contiguous = plan_decode_attention(q, k_dense, v_dense, lens_dev, None)
        out_paged = paged.run().copy()
        out_contig = contiguous.run().copy()
        same = bool(cp.array_equal(out_paged, out_contig))

        t_paged = backend.timer.sample(paged.run, warmup=warmup, repeats=repeats)
        t_contig = backend.timer.sample(contiguous.run, warmup=warmup, repeats=repeats)
        # Forced partition sizes, to tune choose_partitions from data (tokens: median seconds).
        sweep = {}
        for size in sorted({256, 512, 1024, 2048, PARTITION_QUANTUM * -(-context // 128)}):
            if size > 2 * context:
                continue
            forced = plan_decode_attention(
                q, k_cache, v_cache, lens_dev, table, partition_size=size, validate=False
            )
            sweep[size] = backend.timer.sample(forced.run, warmup=2, repeats=repeats).median_s
        best = min(sweep, key=sweep.__getitem__)
        torch_fn = _torch_gather_sdpa(q, k_cache, v_cache, table, context)
        t_torch = torch_err = None
        if torch_fn is not None:
            t_torch = backend.timer.sample(torch_fn, warmup=warmup, repeats=repeats)
            reference = cp.from_dlpack(torch_fn().contiguous()).reshape(q.shape)
            ref32, out32 = reference.astype(cp.float32), out_paged.astype(cp.float32)
            torch_err = float(cp.linalg.norm(out32 - ref32) / cp.linalg.norm(ref32))
        bps = paged.min_bytes / t_paged.median_s
        row: dict[str, object] = {
            "model": model.name,
            "device": provenance["device"],
            "num_heads": layer.num_heads,
            "num_kv_heads": layer.num_kv_heads,
            "head_dim": layer.head_dim,
            "block_size": block_size,
            "num_seqs": num_seqs,
            "context_len": context,
            "kv_tokens": num_seqs * context,
            "partitions": paged.num_partitions,
            "partition_size": paged.partition_size,
            "best_forced_partition_size": best,
            "best_forced_time_s": sweep[best],
            "partition_sweep": " ".join(f"{k}:{v:.3e}" for k, v in sweep.items()),
            "bytes": paged.min_bytes,
            "time_s": t_paged.median_s,
            "p10_s": t_paged.p10_s,
            "p90_s": t_paged.p90_s,
            "gbps": bps / 1e9,
            "pct_of_copy_bw": 100 * bps / copy_bps,
            "copy_bw_gbps": copy_bps / 1e9,
            "contiguous_time_s": t_contig.median_s,
            "paged_over_contiguous": t_paged.median_s / t_contig.median_s,
            "same_output_as_contiguous": same,
            "torch_time_s": t_torch.median_s if t_torch else None,
            "paged_over_torch": t_paged.median_s / t_torch.median_s if t_torch else None,
            "rel_err_vs_torch": torch_err,
            "kernel_sha256": kernel_sha256()[:16],
        }
        rows.append(row)
        say(format_row(row))
        del paged, contiguous, k_dense, v_dense, torch_fn
        backend.release()
    return rows


def format_row(row: dict[str, object]) -> str:
    torch_ratio = row["paged_over_torch"]
    vs_torch = f"{torch_ratio:.2f}" if isinstance(torch_ratio, float) else "n/a"
    return (
        f"{row['model']:>12} S={row['num_seqs']:<4} ctx={row['context_len']:<6} "
        f"parts={row['partitions']:<3} {row['time_s'] * 1e6:9.1f} us  {row['gbps']:7.0f} GB/s  "
        f"{row['pct_of_copy_bw']:5.1f}% copy  paged/contig {row['paged_over_contiguous']:.2f}  "
        f"paged/torch {vs_torch}"
    )


def write_rows_csv(rows: list[dict[str, object]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Benchmark the paged decode-attention kernel")
    parser.add_argument("--model", action="append", required=True, help="preset or config.json")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--out", type=Path, default=None, help="CSV of every row")
    args = parser.parse_args(argv)
    rows: list[dict[str, object]] = []
    try:
        for name in args.model:
            rows += bench_kernel(
                resolve_model(name),
                block_size=args.block_size,
                repeats=args.repeats,
                progress=lambda line: print(line, flush=True),
            )
    except PagesimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    if args.out is not None and rows:
        write_rows_csv(rows, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

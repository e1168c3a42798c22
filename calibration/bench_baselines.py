"""What `bench_kernel` (kernel_bench.py) times the paged decode kernel against, on the same K/V
(fp16 rows only): the kernel itself over a contiguous [S, Hkv, context, D] copy of the cache, and
torch's scaled_dot_product_attention on that dense K/V (`sdpa_dense`) and on K/V gathered through
the block table first (`sdpa_gather`), each with its time, the paged kernel's time over it and the
relative difference of its output from the paged kernel's. torch is imported lazily, inside a
function: without it (or without CUDA) the SDPA columns are left out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _torch() -> Any | None:
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _sdpa(torch: Any, q: Any, k: Any, v: Any, group: int) -> Any:
    """SDPA of one query token per sequence over dense K/V [S, Hkv, T, D]; GQA by enable_gqa
    (torch >= 2.5) or by repeating the KV heads (older torch: part of its cost)."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if group == 1:
        return sdpa(q, k, v)
    try:
        return sdpa(q, k, v, enable_gqa=True)
    except TypeError:
        return sdpa(q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1))


def _torch_baselines(
    q: Any, k_cache: Any, v_cache: Any, table: Any, k_dense: Any, v_dense: Any, context: int
) -> dict[str, Callable[[], Any]]:
    """{"sdpa_dense": SDPA on the dense K/V, "sdpa_gather": gather through the table, then SDPA}."""
    torch = _torch()
    if torch is None:
        return {}
    num_seqs, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    group = num_heads // num_kv_heads
    qt = torch.from_dlpack(q).view(num_seqs, num_heads, 1, head_dim)
    kt, vt = torch.from_dlpack(k_cache), torch.from_dlpack(v_cache)
    kd, vd = torch.from_dlpack(k_dense), torch.from_dlpack(v_dense)
    tables = torch.from_dlpack(table).long()

    def gathered(cache: Any) -> Any:
        blocks = cache[tables]  # [S, blocks, Hkv, B, D]
        blocks = blocks.permute(0, 2, 1, 3, 4).reshape(num_seqs, num_kv_heads, -1, head_dim)
        return blocks[:, :, :context]

    return {
        "sdpa_dense": lambda: _sdpa(torch, qt, kd, vd, group),
        "sdpa_gather": lambda: _sdpa(torch, qt, gathered(kt), gathered(vt), group),
    }


def _rel_err(cp: Any, got: Any, ref: Any) -> float:
    got32, ref32 = got.astype(cp.float32), ref.astype(cp.float32)
    return float(cp.linalg.norm(got32 - ref32) / cp.linalg.norm(ref32))


def baseline_columns(
    backend: Any,
    paged: Any,
    t_paged: float,
    q: Any,
    table: Any,
    lens_dev: Any,
    context: int,
    sample: Callable[..., Any],
) -> dict[str, object]:
    """The contiguous layout and torch's SDPA (dense, and gathered through the table)."""
    from pagesim.calibration.kernel import plan_decode_attention

    cp = backend.cupy
    k_cache, v_cache = backend.kv_pool
    num_seqs, _, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]

    def dense(cache: Any) -> Any:  # [S, Hkv, context, D], the same K/V
        rows = cache[table].transpose(0, 2, 1, 3, 4).reshape(num_seqs, num_kv_heads, -1, head_dim)
        return cp.ascontiguousarray(rows[:, :, :context])

    k_dense, v_dense = dense(k_cache), dense(v_cache)
    contiguous = plan_decode_attention(q, k_dense, v_dense, lens_dev, None)
    out_paged = paged.run().copy()
    out_contig = contiguous.run().copy()
    t_contig = sample(contiguous.run).median_s
    row: dict[str, object] = {
        "contiguous_time_s": t_contig,
        "paged_over_contiguous": t_paged / t_contig,
        "same_output_as_contiguous": bool(cp.array_equal(out_paged, out_contig)),
    }
    for name, run in _torch_baselines(
        q, k_cache, v_cache, table, k_dense, v_dense, context
    ).items():
        reference = cp.from_dlpack(run().contiguous()).reshape(q.shape)
        t = sample(run).median_s
        row[f"{name}_time_s"] = t
        row[f"paged_over_{name}"] = t_paged / t
        row[f"rel_err_vs_{name}"] = _rel_err(cp, out_paged, reference)
    return row

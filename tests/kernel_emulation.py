"""A lane-level NumPy emulation of kernels/paged_attention.cu's two kernels, for CPU tests.

Every CTA of a launch is emulated with the kernel's own index math, vectorised over its
4 warps x 32 lanes: which KV head and query heads a CTA serves, the partition it walks, the
token each lane loads per chunk (clamped to end - 1 past the partition's end), the block-table
entry it reads, the 64-bit K/V offset, the validity mask, the dot product reduced over the lanes
of one token, the per-lane online softmax, the merges across the warp's token slots and across
warps, and what is written: `out`, or the split-K partials that the reduce kernel combines.

Values are float64 (the GPU tests check the float32 arithmetic); every table entry and K/V
element read is recorded, so tests can check that nothing outside a sequence's blocks is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pagesim.calibration.partitions import unroll

NUM_WARPS = 4
WARP = 32
VEC = 8  # 16-bit elements per 16-byte load


@dataclass
class Reads:
    """What a launch read: (seq, entry) of the block tables, and flat K/V element offsets."""

    table_entries: set[tuple[int, int]] = field(default_factory=set)
    kv_offsets: list[np.ndarray] = field(default_factory=list)
    # (seq, CTA column x, token, dim chunk) of every valid (unmasked) lane-token
    valid_tokens: list[np.ndarray] = field(default_factory=list)


def emulate_decode(
    q: np.ndarray,
    k_cache: np.ndarray,
    v_cache: np.ndarray,
    tables: np.ndarray | None,
    lens: np.ndarray,
    *,
    heads_per_cta: int,
    partition_size: int,
    num_partitions: int,
    scale_log2: float,
    reads: Reads,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(out, part_acc, part_max, part_sum) as the decode kernel writes them (NaN: unwritten).

    q [S, H, D]; paged caches [num_blocks, Hkv, B, D] with tables [S, row_stride]; contiguous
    caches [S, Hkv, row_stride, D] with tables None. Values as float64 (NaN poison kept).
    """
    num_seqs, num_heads, head_dim = q.shape
    paged = tables is not None
    num_kv_heads = k_cache.shape[1]
    block_size = k_cache.shape[2] if paged else 0
    row_stride = tables.shape[1] if paged else k_cache.shape[2]
    lpt = head_dim // VEC  # lanes per token
    tpw = WARP // lpt  # tokens per warp step
    heads = heads_per_cta
    u_count = unroll(heads)
    tpc = tpw * u_count  # tokens per warp chunk
    group = num_heads // num_kv_heads
    tiles = group // heads
    k_flat = k_cache.astype(np.float64).reshape(-1)
    v_flat = v_cache.astype(np.float64).reshape(-1)
    out = np.full((num_seqs, num_heads, head_dim), np.nan)
    rows = num_seqs * num_heads * num_partitions
    part_acc = np.full(rows * head_dim, np.nan)
    part_max = np.full(rows, np.nan)
    part_sum = np.full(rows, np.nan)

    warp = np.arange(NUM_WARPS)[:, None]  # [4, 1]
    lane = np.arange(WARP)[None, :]  # [1, 32]
    slot, chunk = lane // lpt, lane % lpt
    elems = chunk[..., None] * VEC + np.arange(VEC)  # [1, 32, 8] this lane's head_dim elements
    for x in range(num_kv_heads * tiles):
        kv_head = x // tiles
        head0 = kv_head * group + (x % tiles) * heads
        for seq in range(num_seqs):
            length = int(lens[seq])
            for part in range(num_partitions):
                start = part * partition_size
                if part > 0 and start >= length:
                    continue
                end = min(length, start + partition_size)
                lane_q = q[seq, head0 : head0 + heads].astype(np.float64)[:, elems[0]]
                qf = np.broadcast_to(lane_q[:, None] * scale_log2, (heads, NUM_WARPS, WARP, VEC))
                m = np.full((heads, NUM_WARPS, WARP), -np.inf)
                lsum = np.zeros((heads, NUM_WARPS, WARP))
                acc = np.zeros((heads, NUM_WARPS, WARP, VEC))
                base = start + warp * tpc  # [4, 1]
                while (base < end).any():
                    active = np.broadcast_to(base < end, (NUM_WARPS, WARP))  # warps in the loop
                    u = np.arange(u_count)[:, None, None]
                    position = base[None] + u * tpw + slot[None]  # [U, 4, 32]
                    tok = np.minimum(position, end - 1)
                    if paged:
                        entry = tok // block_size
                        for e in np.unique(entry[:, active]):
                            reads.table_entries.add((seq, int(e)))
                        block = tables[seq, entry].astype(np.int64)
                        row = (block * num_kv_heads + kv_head) * block_size + tok % block_size
                    else:
                        row = (seq * num_kv_heads + kv_head) * row_stride + tok.astype(np.int64)
                    offset = row[..., None] * head_dim + elems[None]  # [U, 4, 32, 8] (64-bit)
                    reads.kv_offsets.append(offset[:, active].reshape(-1))
                    k = k_flat[offset]
                    v = v_flat[offset]
                    valid = (position < end) & active[None]
                    hit = np.stack(np.broadcast_arrays(seq, x, position, chunk[None]), -1)[valid]
                    reads.valid_tokens.append(hit)
                    # dot over this lane's 8 elements, then over the lpt lanes of one token
                    partial = np.einsum("hwle,uwle->uhwl", qf, k)
                    dot = partial.reshape(u_count, heads, NUM_WARPS, tpw, lpt).sum(-1)
                    dot = np.repeat(dot, lpt, axis=-1)  # every lane of the token holds it
                    p = np.where(valid[:, None], dot, -np.inf)  # [U, h, 4, 32]
                    m_new = np.maximum(m, p.max(axis=0))
                    m_ref = np.where(m_new == -np.inf, 0.0, m_new)
                    corr = np.exp2(m - m_ref)
                    e = np.exp2(p - m_ref[None])
                    lsum_new = lsum * corr + e.sum(axis=0)
                    acc_new = acc * corr[..., None] + np.einsum("uhwl,uwle->hwle", e, v)
                    keep = active[None]
                    m = np.where(keep, m_new, m)
                    lsum = np.where(keep, lsum_new, lsum)
                    acc = np.where(keep[..., None], acc_new, acc)
                    base = base + NUM_WARPS * tpc
                # merge the warp's token slots (xor shuffles over lane bits >= lpt)
                o = lpt
                while o < WARP:
                    partner = np.arange(WARP) ^ o
                    m_o, l_o, acc_o = m[..., partner], lsum[..., partner], acc[..., partner, :]
                    m_new = np.maximum(m, m_o)
                    m_ref = np.where(m_new == -np.inf, 0.0, m_new)
                    a, b = np.exp2(m - m_ref), np.exp2(m_o - m_ref)
                    lsum = lsum * a + l_o * b
                    acc = acc * a[..., None] + acc_o * b[..., None]
                    m = m_new
                    o <<= 1
                # merge warps through shared memory: slot-0 lanes hold each chunk's 8 elements
                s_acc = acc[:, :, :lpt, :].reshape(heads, NUM_WARPS, head_dim)
                s_max, s_sum = m[:, :, 0], lsum[:, :, 0]
                m_all = s_max.max(axis=1)
                m_ref = np.where(m_all == -np.inf, 0.0, m_all)
                weight = np.exp2(s_max - m_ref[:, None])
                l_all = (s_sum * weight).sum(axis=1)
                total = np.einsum("hwd,hw->hd", s_acc, weight)
                for h in range(heads):
                    head = head0 + h
                    if num_partitions == 1:
                        out[seq, head] = total[h] / l_all[h] if l_all[h] > 0 else 0.0
                    else:
                        index = (seq * num_heads + head) * num_partitions + part
                        part_acc[index * head_dim : (index + 1) * head_dim] = total[h]
                        part_max[index], part_sum[index] = m_all[h], l_all[h]
    return out, part_acc, part_max, part_sum


def emulate_reduce(
    out: np.ndarray,
    part_acc: np.ndarray,
    part_max: np.ndarray,
    part_sum: np.ndarray,
    lens: np.ndarray,
    *,
    partition_size: int,
    num_partitions: int,
) -> np.ndarray:
    """decode_attention_reduce: combines each (seq, head)'s live partitions into `out`."""
    num_seqs, num_heads, head_dim = out.shape
    out = out.copy()
    for seq in range(num_seqs):
        live = max(1, min(num_partitions, -(-int(lens[seq]) // partition_size)))
        for head in range(num_heads):
            base = (seq * num_heads + head) * num_partitions
            m = part_max[base : base + live]
            m_all = m.max()
            m_ref = 0.0 if m_all == -np.inf else m_all
            w = np.exp2(m - m_ref)
            l_all = float(part_sum[base : base + live] @ w)
            acc = part_acc[base * head_dim : (base + live) * head_dim].reshape(live, head_dim)
            out[seq, head] = (w @ acc) / l_all if l_all > 0 else 0.0
    return out

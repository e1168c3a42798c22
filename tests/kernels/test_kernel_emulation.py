"""The decode kernel's index math, emulated lane by lane (tests/kernel_emulation.py), for every
head layout the model catalog uses, against dense float64 attention.

Each case scatters random K/V into a shuffled block pool whose unused slots, spare blocks and
unused table entries hold NaN; the emulated kernel (with the partitioning the launch plan picks
for an H200-sized GPU, and with forced 128-token partitions) must produce dense attention's
result, read no table entry past a sequence's last block, read K/V only of that sequence's own
tokens, and attend every token of every (sequence, KV head) exactly once per dim chunk.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from kernel_emulation import Reads, emulate_decode, emulate_reduce

from pagesim.calibration.attention_reference import dense_attention, make_paged_case, to_float32
from pagesim.calibration.kernel import LOG2E
from pagesim.calibration.partitions import choose_partitions, heads_per_cta, min_ctas_per_sm
from pagesim.simulator.core.catalog import CLASSIC_MODELS as MODELS

H200_SMS = 132  # NVIDIA H200 SXM: 132 multiprocessors (device tool notes, KINDS.md)


def catalog_layouts() -> list[tuple[int, int, int]]:
    """(num_heads, num_kv_heads, head_dim) per GPU for each (group, head_dim) the catalog uses at
    tensor parallelism 1, 2, 4 or 8; each taken at tensor parallelism 1 where it occurs there
    (several KV heads, so a wrong KV-head index shows), with the fewest heads."""
    layouts: dict[tuple[int, int], tuple[int, int, int, int]] = {}
    for model in MODELS.values():
        for t in (1, 2, 4, 8):
            if model.num_heads % t:
                continue
            heads, kv_heads = max(1, model.num_heads // t), model.kv_heads_per_gpu(t)
            key = (heads // kv_heads, model.head_dim)
            rank = (t, heads, kv_heads, model.head_dim)
            if key not in layouts or rank < layouts[key]:
                layouts[key] = rank
    found = sorted(layouts.values(), key=lambda r: (r[1] // r[2], r[1]))
    return [(heads, kv_heads, head_dim) for _, heads, kv_heads, head_dim in found]


LAYOUTS = catalog_layouts()
# Beyond the catalog: a group of 16 (two CTA tiles of 8 heads per KV head), and head dims 64/256.
EXTRA_LAYOUTS = [(32, 2, 128), (8, 2, 64), (8, 4, 256)]


def test_the_catalog_uses_mha_and_gqa_4_7_8() -> None:
    assert LAYOUTS == [(32, 32, 128), (32, 8, 128), (28, 4, 128), (64, 8, 128)]


def _truth(case) -> np.ndarray:
    q = to_float32(case.q)
    out = np.zeros(q.shape)
    for s, length in enumerate(case.context_lens):
        if length:
            out[s] = dense_attention(q[s], case.dense_k[s], case.dense_v[s])
    return out


def _run(case, partition_size: int, num_partitions: int, reads: Reads) -> np.ndarray:
    num_heads, num_kv_heads = case.q.shape[1], case.k_cache.shape[1]
    head_dim = case.q.shape[2]
    written = emulate_decode(
        to_float32(case.q),
        to_float32(case.k_cache),
        to_float32(case.v_cache),
        case.block_tables,
        case.context_lens,
        heads_per_cta=heads_per_cta(num_heads // num_kv_heads),
        partition_size=partition_size,
        num_partitions=num_partitions,
        scale_log2=LOG2E / math.sqrt(head_dim),
        reads=reads,
    )
    out, part_acc, part_max, part_sum = written
    if num_partitions == 1:
        return out
    assert np.isnan(out).all(), "a split launch writes only partials"
    return emulate_reduce(
        out,
        part_acc,
        part_max,
        part_sum,
        case.context_lens,
        partition_size=partition_size,
        num_partitions=num_partitions,
    )


def _check_reads(case, reads: Reads, tiles_per_kv_head: int) -> None:
    block_size = case.k_cache.shape[2]
    lens = case.context_lens
    for seq, entry in reads.table_entries:
        assert entry < -(-int(lens[seq]) // block_size), "a table entry past the last block"
    # Every K/V element read belongs to a token some sequence holds (poisoned slots excluded).
    head_dim, num_kv_heads = case.k_cache.shape[3], case.k_cache.shape[1]
    allowed = set()
    for s, length in enumerate(lens):
        tokens = np.arange(int(length))
        blocks = case.block_tables[s, tokens // block_size].astype(np.int64)
        for h in range(num_kv_heads):
            rows = (blocks * num_kv_heads + h) * block_size + tokens % block_size
            allowed.update(rows.tolist())
    read_rows = np.unique(np.concatenate(reads.kv_offsets) // head_dim) if reads.kv_offsets else []
    assert set(np.asarray(read_rows).tolist()) <= allowed
    # Each (sequence, CTA column, token, dim chunk) is attended exactly once.
    hits = np.concatenate(reads.valid_tokens) if reads.valid_tokens else np.zeros((0, 4), int)
    keys, counts = np.unique(hits, axis=0, return_counts=True)
    assert (counts == 1).all(), "a token was attended twice by one CTA column"
    expected = sum(int(n) for n in lens) * num_kv_heads * tiles_per_kv_head * (head_dim // 8)
    assert len(keys) == expected, "a token was never attended"


@pytest.mark.parametrize(
    ("block_size", "split"), [(16, "auto"), (16, "128"), (8, "128"), (32, "auto")]
)
@pytest.mark.parametrize(("num_heads", "num_kv_heads", "head_dim"), LAYOUTS + EXTRA_LAYOUTS)
def test_emulated_kernel_matches_dense_attention(
    num_heads: int, num_kv_heads: int, head_dim: int, block_size: int, split: str
) -> None:
    rng = np.random.default_rng(num_heads * 131 + block_size * 7 + len(split))
    b = block_size
    lens = [1, b - 1, b, b + 1, 0, 300, 520]
    rng.shuffle(lens)
    case = make_paged_case(rng, lens, num_heads, num_kv_heads, head_dim, block_size)
    group = num_heads // num_kv_heads
    per_cta = heads_per_cta(group)
    if (
        split == "auto"
    ):  # the launch plan's choice on an H200, at the variant's guaranteed occupancy
        ctas = num_kv_heads * (group // per_cta) * len(lens)
        size, parts = choose_partitions(
            ctas, max(lens), H200_SMS, min_ctas_per_sm(per_cta, head_dim), float(np.mean(lens))
        )
    else:
        size, parts = 128, math.ceil(max(lens) / 128)
    assert parts > 1, "a handful of sequences is split on a 132-SM GPU"
    reads = Reads()
    got = _run(case, size, parts, reads)
    assert np.isfinite(got).all(), "poison reached the output"
    truth = _truth(case)
    assert float(np.abs(got - truth).max()) < 1e-9
    assert not got[lens.index(0)].any()
    _check_reads(case, reads, group // per_cta)


@pytest.mark.parametrize(("num_heads", "num_kv_heads", "head_dim"), LAYOUTS[:2])
def test_emulated_kernel_without_split_writes_out_directly(
    num_heads: int, num_kv_heads: int, head_dim: int
) -> None:
    rng = np.random.default_rng(5)
    lens = [17, 0, 130, 64]
    case = make_paged_case(rng, lens, num_heads, num_kv_heads, head_dim, 16)
    reads = Reads()
    got = _run(case, 256, 1, reads)
    assert float(np.abs(got - _truth(case)).max()) < 1e-9
    _check_reads(
        case, reads, (num_heads // num_kv_heads) // heads_per_cta(num_heads // num_kv_heads)
    )

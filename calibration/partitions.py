"""How the decode kernel splits its work: heads per CTA, loads in flight, occupancy, split-K.

Pure Python (no GPU): the launch plan in `kernel.py` calls these, and the CPU tests check them.
Three tables mirror kernels/paged_attention.cu exactly (the compile test static_asserts that the
.cu computes the same numbers):

- `heads_per_cta(group)`: query heads one CTA serves from one read of its KV head;
- `unroll(heads)`: the kernel's Unroll<HEADS> (16-byte K and V loads in flight per lane);
- `min_ctas_per_sm(heads, head_dim, compute_capability)`: the kernel's MinCtasPerSm, the second
  argument of its __launch_bounds__ (ptxas keeps registers <= 65536 / (128 x this)).

Split-K (`choose_partitions`). A CTA walks its partition of the context in sweeps of
4 warps x one chunk each (`tokens_per_sweep`: 64 tokens for head_dim 128 and one head per CTA,
32 for GQA-4), and each sweep waits about one HBM latency for its loads, so a CTA's time grows
with its partition's length, not only with bytes. When a step has fewer CTAs than the GPU holds
at once (SMs x resident CTAs per SM: one full wave), each CTA's context is split into partitions
of at least MIN_PARTITION tokens until the wave is full; a second kernel combines the partials.
GQA at small batch is the case this is for: Llama-3-8B at 8 sequences has 8 x 8 = 64 CTAs for
132 SMs that hold 528 of them, so a 600-token context becomes 5 partitions of 128 tokens
(320 CTAs, 4 sweeps each) instead of one 600-token walk (19 sweeps) per CTA.
"""

from __future__ import annotations

import math

MAX_HEADS_PER_CTA = 8  # query heads one CTA serves from one read of its KV head
NUM_THREADS = 128  # kNumThreads in the .cu (4 warps)
REGISTERS_PER_SM = 65536  # sm_80 and sm_90 (CUDA C++ Programming Guide, compute capabilities)
PARTITION_QUANTUM = 128  # tokens; partitions are whole sweeps of every variant (64 MHA, 32 GQA-4)
# Smallest partition: two MHA sweeps, four GQA-4 sweeps. Shorter ones would add partials and
# reduce work for a walk of one or two sweeps; this is a judgement, not a measurement: the
# bench's partition sweep (128 ... whole) times it on the fidelity regime's shapes.
MIN_PARTITION = 128
# A batch with a full wave of CTAs is still split when its longest context exceeds this many even
# shares of the work per CTA slot (skewed mixes: one long sequence among many short ones).
SKEW_TOLERANCE = 2.0


def heads_per_cta(group: int) -> int:
    """Query heads one CTA serves: the largest divisor of the GQA group size that is <= 8."""
    return max(d for d in range(1, min(group, MAX_HEADS_PER_CTA) + 1) if group % d == 0)


def unroll(heads: int) -> int:
    """Unroll<HEADS>::value of the .cu: chunks of this many tokens per lane group in flight."""
    return 8 if heads <= 2 else (4 if heads <= 4 else 2)


def min_ctas_per_sm(heads: int, head_dim: int, compute_capability: int = 90) -> int:
    """MinCtasPerSm<HEADS, HEAD_DIM>::value of the .cu for a device of this compute capability
    (90 for sm_90, 80 for sm_80): CTAs ptxas must fit on one SM."""
    if compute_capability < 90:
        return 4 if heads in (1, 3) else (3 if heads <= 6 else 2)
    if heads <= 4:
        return 3 if (heads == 2 and head_dim == 256) else 4
    return 3 if heads <= 7 else 2


def max_registers(heads: int, head_dim: int, compute_capability: int = 90) -> int:
    """The register cap per thread that __launch_bounds__ implies (allocated in units of 8; no
    thread gets more than 255)."""
    ctas = min_ctas_per_sm(heads, head_dim, compute_capability)
    return min(255, REGISTERS_PER_SM // (NUM_THREADS * ctas) // 8 * 8)


def tokens_per_sweep(heads: int, head_dim: int) -> int:
    """Tokens one CTA covers per sweep: 4 warps x (32 / (head_dim / 8)) tokens x unroll."""
    return 4 * (32 // (head_dim // 8)) * unroll(heads)


def choose_partitions(
    num_ctas_per_partition: int,
    max_context: int,
    num_sms: int,
    ctas_per_sm: int,
    mean_context: float | None = None,
) -> tuple[int, int]:
    """(partition_size in tokens, num_partitions): split long contexts until a wave is full.

    `ctas_per_sm` is the variant's occupancy (the driver's answer for the compiled kernel, or
    `min_ctas_per_sm`); the target is one full wave, num_sms x ctas_per_sm CTAs. Partitions are
    multiples of PARTITION_QUANTUM and at least MIN_PARTITION tokens; contexts up to
    2 x MIN_PARTITION are never split (a walk of 4 MHA sweeps is not worth a reduce launch: a
    judgement the bench's partition sweep checks).

    With `mean_context` (the batch's mean context length) a skewed batch that already fills the
    wave is split too: when its longest sequence holds more than SKEW_TOLERANCE times the tokens
    one CTA slot gets with the work spread evenly, that sequence's CTAs would run on alone after
    the rest finish; partitions of about one even share keep them in step.
    """
    whole = max(PARTITION_QUANTUM, math.ceil(max_context / PARTITION_QUANTUM) * PARTITION_QUANTUM)
    target = max(1, ctas_per_sm) * num_sms
    if max_context <= 2 * MIN_PARTITION:
        return whole, 1
    if num_ctas_per_partition >= target:
        if mean_context is None:
            return whole, 1
        share = mean_context * num_ctas_per_partition / target  # tokens per CTA slot, even spread
        if SKEW_TOLERANCE * share >= max_context:
            return whole, 1
        size = max(MIN_PARTITION, math.ceil(share / PARTITION_QUANTUM) * PARTITION_QUANTUM)
        return size, math.ceil(max_context / size)
    wanted = math.ceil(target / num_ctas_per_partition)
    size = math.ceil(max_context / wanted / PARTITION_QUANTUM) * PARTITION_QUANTUM
    size = max(MIN_PARTITION, size)
    return size, math.ceil(max_context / size)

"""Load kernels/paged_attention.cu into CuPy and launch it, FlashInfer style: plan, then run.

`plan_decode_attention` checks shapes, dtypes and contiguity, picks the split-K partitioning,
allocates the workspace and packs every launch argument with its exact C type (np.int32,
np.float32; CuPy would pass a Python int as a 64-bit integer). `DecodeAttentionPlan.run` only
launches, so a timing loop measures the kernels and nothing else.

Arrays (CuPy, C-contiguous; 16-bit elements: float16, or bfloat16 given as raw uint16 bits):

    q, out        [num_seqs, num_heads, head_dim]
    k/v_cache     [num_blocks, num_kv_heads, block_size, head_dim]          (paged)
                  [num_seqs, num_kv_heads, max_context, head_dim]           (contiguous baseline)
    block_tables  int32 [num_seqs, max_blocks_per_seq]                      (paged; None otherwise)
    context_lens  int32 [num_seqs]

The shape checks run on any array with `.shape`, `.dtype` and `.flags`, so they are tested on CPU.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from pagesim.simulator.core.errors import PagesimError

KERNEL_FILE = "paged_attention.cu"
HEAD_DIMS = (64, 128, 256)
BLOCK_SIZES = (8, 16, 32)
MAX_HEADS_PER_CTA = 8  # query heads one CTA serves from one read of its KV head
NUM_THREADS = 128  # kNumThreads in the .cu
PARTITION_QUANTUM = 128  # tokens; partitions are multiples of one CTA sweep
MIN_PARTITION = 256  # tokens; below this a partition's fixed cost outweighs the parallelism
# Split-K until about this many CTAs per multiprocessor: 2 resident CTAs (8 warps, 64 KiB of
# loads in flight) cover HBM latency; more partitions only add partials and the reduce launch.
CTAS_PER_SM_TARGET = 2
# A batch with enough CTAs is still split when its longest context exceeds this many even shares
# of the work per CTA slot (skewed mixes: one long sequence among many short ones).
SKEW_TOLERANCE = 2.0
DTYPE_TAGS = {"fp16": 0, "bf16": 1}
NVRTC_OPTIONS: tuple[str, ...] = ()  # NVRTC 12+ defaults to C++17; CuPy adds -arch itself
LOG2E = 1.4426950408889634


def kernel_path(name: str = KERNEL_FILE) -> Path:
    """Path of a CUDA source shipped in the `kernels` package."""
    return Path(str(resources.files("pagesim.kernels").joinpath(name)))


def kernel_source(name: str = KERNEL_FILE) -> str:
    return kernel_path(name).read_text()


def kernel_sha256(name: str = KERNEL_FILE) -> str:
    """sha256 of the kernel source: a profile names the exact kernel it measured."""
    return hashlib.sha256(kernel_path(name).read_bytes()).hexdigest()


def import_cupy() -> Any:
    """CuPy with a usable GPU, or a PagesimError saying what is missing."""
    try:
        import cupy
    except ImportError:
        raise PagesimError(
            "this needs CuPy and a CUDA GPU: pip install 'pagesim[gpu]' on a machine with one "
            "(or use the numpy backend)"
        ) from None
    try:
        num_devices = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError when there is no driver
        raise PagesimError(f"CuPy is installed but finds no CUDA GPU: {exc}") from None
    if num_devices < 1:
        raise PagesimError("CuPy is installed but finds no CUDA GPU")
    return cupy


def heads_per_cta(group: int) -> int:
    """Query heads one CTA serves: the largest divisor of the GQA group size that is <= 8."""
    return max(d for d in range(1, min(group, MAX_HEADS_PER_CTA) + 1) if group % d == 0)


@dataclass(frozen=True, slots=True)
class Variant:
    """One compiled instance of the decode kernel (template arguments)."""

    kv_dtype: str  # "fp16" | "bf16"
    head_dim: int
    block_size: int  # tokens per block; ignored by the contiguous variant (kept at 16)
    heads_per_cta: int
    is_paged: bool

    @property
    def decode_name(self) -> str:
        tag = DTYPE_TAGS[self.kv_dtype]
        paged = "true" if self.is_paged else "false"
        return (
            f"pagesim::decode_attention<{tag}, {self.head_dim}, {self.block_size}, "
            f"{self.heads_per_cta}, {paged}>"
        )

    @property
    def reduce_name(self) -> str:
        return f"pagesim::decode_attention_reduce<{DTYPE_TAGS[self.kv_dtype]}, {self.head_dim}>"


@cache
def _functions(variant: Variant) -> tuple[Any, Any]:
    """(decode, reduce) kernels of one variant, compiled once per process (CuPy caches on disk)."""
    cupy = import_cupy()
    module = cupy.RawModule(
        code=kernel_source(),
        options=NVRTC_OPTIONS,
        name_expressions=[variant.decode_name, variant.reduce_name],
    )
    return module.get_function(variant.decode_name), module.get_function(variant.reduce_name)


@cache
def noop_kernel() -> Any:
    """The empty kernel `pagesim_noop` (launch + synchronize cost of an empty step)."""
    cupy = import_cupy()
    return cupy.RawModule(code=kernel_source(), options=NVRTC_OPTIONS).get_function("pagesim_noop")


def device_int(cupy: Any, prop: str, attribute: str, device_id: int = 0) -> int | None:
    """An integer property of a device: cudaDeviceProp field `prop`, else attribute `attribute`."""
    try:
        value = cupy.cuda.runtime.getDeviceProperties(device_id).get(prop)
    except Exception:  # an old or partial binding: fall back to the attribute table
        value = None
    if value is None:
        value = cupy.cuda.Device(device_id).attributes.get(attribute)
    return None if value is None else int(value)


@cache
def _num_sms(device_id: int) -> int:
    cupy = import_cupy()
    num_sms = device_int(cupy, "multiProcessorCount", "MultiProcessorCount", device_id)
    return num_sms or 1


@dataclass(frozen=True, slots=True)
class DecodeShape:
    num_seqs: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    block_size: int | None  # None: contiguous layout
    row_stride: int  # paged: block-table row length; contiguous: token slots per sequence
    num_blocks: int | None
    kv_dtype: str

    @property
    def max_context(self) -> int:
        """Most tokens a sequence can hold in this layout."""
        if self.block_size is None:
            return self.row_stride
        return self.row_stride * self.block_size


def _dtype_name(array: Any) -> str:
    return np.dtype(array.dtype).name


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(f"decode attention: {message}")


def _require_16_byte_aligned(name: str, array: Any) -> None:
    """The kernel reads q/K/V 16 bytes at a time: a view starting mid-vector would fault."""
    ptr = getattr(getattr(array, "data", None), "ptr", None)  # CuPy's device address
    if isinstance(ptr, int):
        _require(ptr % 16 == 0, f"{name} must start on a 16-byte boundary, got address {ptr:#x}")


def check_decode_inputs(
    q: Any,
    k_cache: Any,
    v_cache: Any,
    context_lens: Any,
    block_tables: Any | None = None,
    kv_dtype: str | None = None,
) -> DecodeShape:
    """Shapes, dtypes and contiguity of a decode-attention call; ValueError naming the problem."""
    if kv_dtype is None:  # inferred from q: float16 is fp16; bfloat16 or its uint16 bits bf16
        inferred = {"float16": "fp16", "bfloat16": "bf16", "uint16": "bf16"}
        _require(
            _dtype_name(q) in inferred,
            f"q must be float16 (fp16) or bfloat16 / uint16 bits (bf16), got {_dtype_name(q)}",
        )
        kv_dtype = inferred[_dtype_name(q)]
    _require(
        kv_dtype in DTYPE_TAGS, f"kv_dtype must be one of {sorted(DTYPE_TAGS)}, got {kv_dtype!r}"
    )
    allowed = ("float16",) if kv_dtype == "fp16" else ("bfloat16", "uint16")
    for name, array in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        _require(
            _dtype_name(array) in allowed,
            f"{name} must be {' or '.join(allowed)} for {kv_dtype}, got {_dtype_name(array)}",
        )
        _require(bool(array.flags.c_contiguous), f"{name} must be C-contiguous")
        _require_16_byte_aligned(name, array)
    _require(q.ndim == 3, f"q must be [num_seqs, num_heads, head_dim], got shape {q.shape}")
    num_seqs, num_heads, head_dim = (int(x) for x in q.shape)
    _require(head_dim in HEAD_DIMS, f"head_dim must be one of {HEAD_DIMS}, got {head_dim}")
    _require(k_cache.ndim == 4, f"k_cache must be 4-D, got shape {k_cache.shape}")
    _require(
        tuple(v_cache.shape) == tuple(k_cache.shape),
        f"v_cache shape {v_cache.shape} differs from k_cache shape {k_cache.shape}",
    )
    _require(
        int(k_cache.shape[3]) == head_dim,
        f"k_cache head_dim {k_cache.shape[3]} differs from q's {head_dim}",
    )
    num_kv_heads = int(k_cache.shape[1])
    _require(
        num_kv_heads >= 1 and num_heads % num_kv_heads == 0,
        f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})",
    )
    _require(num_seqs >= 1, "at least one sequence")
    _require(num_seqs <= 65535, f"at most 65535 sequences per call, got {num_seqs}")
    _require(
        _dtype_name(context_lens) == "int32" and tuple(context_lens.shape) == (num_seqs,),
        f"context_lens must be int32 [{num_seqs}], got {_dtype_name(context_lens)} "
        f"{tuple(context_lens.shape)}",
    )
    _require(bool(context_lens.flags.c_contiguous), "context_lens must be C-contiguous")
    if block_tables is None:  # contiguous baseline
        _require(
            int(k_cache.shape[0]) == num_seqs,
            f"contiguous k_cache must be [num_seqs={num_seqs}, num_kv_heads, max_context, "
            f"head_dim], got {k_cache.shape}",
        )
        return DecodeShape(
            num_seqs, num_heads, num_kv_heads, head_dim, None, int(k_cache.shape[2]), None, kv_dtype
        )
    block_size = int(k_cache.shape[2])
    _require(
        block_size in BLOCK_SIZES, f"block_size must be one of {BLOCK_SIZES}, got {block_size}"
    )
    _require(
        _dtype_name(block_tables) == "int32"
        and block_tables.ndim == 2
        and int(block_tables.shape[0]) == num_seqs,
        f"block_tables must be int32 [{num_seqs}, max_blocks_per_seq], got "
        f"{_dtype_name(block_tables)} {tuple(block_tables.shape)}",
    )
    _require(bool(block_tables.flags.c_contiguous), "block_tables must be C-contiguous")
    return DecodeShape(
        num_seqs,
        num_heads,
        num_kv_heads,
        head_dim,
        block_size,
        int(block_tables.shape[1]),
        int(k_cache.shape[0]),
        kv_dtype,
    )


def choose_partitions(
    num_ctas_per_partition: int,
    max_context: int,
    num_sms: int,
    mean_context: float | None = None,
) -> tuple[int, int]:
    """(partition_size in tokens, num_partitions): split long contexts until the GPU is full.

    With `mean_context` (the batch's mean context length) a skewed batch that already has enough
    CTAs is split too: when its longest sequence holds more than SKEW_TOLERANCE times the tokens
    one CTA slot gets with the work spread evenly, that sequence's CTAs would run on alone after
    the rest finish; partitions of about one even share keep them in step.
    """
    whole = max(PARTITION_QUANTUM, math.ceil(max_context / PARTITION_QUANTUM) * PARTITION_QUANTUM)
    target = CTAS_PER_SM_TARGET * num_sms
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
    parts = max(1, min(wanted, max_context // MIN_PARTITION))
    size = math.ceil(max_context / parts / PARTITION_QUANTUM) * PARTITION_QUANTUM
    return size, math.ceil(max_context / size)


@dataclass(slots=True)
class DecodeAttentionPlan:
    """Everything decided and allocated before the timed region; `run` only launches."""

    shape: DecodeShape
    out: Any
    partition_size: int
    num_partitions: int
    total_context: int  # Σ context_lens
    launches: list[tuple[Any, tuple[int, int, int], tuple[int, int, int], tuple[Any, ...]]]

    def run(self) -> Any:
        for function, grid, block, args in self.launches:
            function(grid, block, args)
        return self.out

    @property
    def min_bytes(self) -> int:
        """Fewest bytes the call must move: each needed K/V row once, q read, out written."""
        s = self.shape
        kv = 2 * self.total_context * s.num_kv_heads * s.head_dim * 2
        q_and_out = 2 * s.num_seqs * s.num_heads * s.head_dim * 2
        return kv + q_and_out


def plan_decode_attention(
    q: Any,
    k_cache: Any,
    v_cache: Any,
    context_lens: Any,
    block_tables: Any | None = None,
    *,
    kv_dtype: str | None = None,
    scale: float | None = None,
    partition_size: int | None = None,
    out: Any | None = None,
    validate: bool = True,
) -> DecodeAttentionPlan:
    """Check and prepare one decode-attention call (see the module docstring for layouts).

    `partition_size` (tokens, a multiple of 128) forces the split-K partitioning; by default it
    splits until about CTAS_PER_SM_TARGET (2) CTAs per multiprocessor. `validate` also checks
    that every block-table entry a sequence uses names a real block (one copy to the host).
    """
    cupy = import_cupy()
    shape = check_decode_inputs(q, k_cache, v_cache, context_lens, block_tables, kv_dtype)
    lens = cupy.asnumpy(context_lens)
    _require(bool((lens >= 0).all()), "context_lens must be >= 0")
    max_context = int(lens.max())
    _require(
        max_context <= shape.max_context,
        f"a context of {max_context} tokens does not fit the layout ({shape.max_context} max)",
    )
    if validate and block_tables is not None and shape.block_size is not None:
        used = (lens + shape.block_size - 1) // shape.block_size
        mask = np.arange(shape.row_stride)[None, :] < used[:, None]
        tables = cupy.asnumpy(block_tables)
        bad = mask & ((tables < 0) | (tables >= shape.num_blocks))
        _require(not bad.any(), "a used block-table entry is outside [0, num_blocks)")
    group = shape.num_heads // shape.num_kv_heads
    per_cta = heads_per_cta(group)
    tiles = group // per_cta
    num_sms = _num_sms(cupy.cuda.Device().id)
    if partition_size is None:
        partition_size, num_partitions = choose_partitions(
            shape.num_kv_heads * tiles * shape.num_seqs, max_context, num_sms, float(lens.mean())
        )
    else:
        _require(
            partition_size > 0 and partition_size % PARTITION_QUANTUM == 0,
            f"partition_size must be a positive multiple of {PARTITION_QUANTUM}",
        )
        num_partitions = max(1, math.ceil(max_context / partition_size))
    _require(num_partitions <= 65535, "too many partitions")
    if out is None:
        out = cupy.empty(q.shape, dtype=q.dtype)
    _require(
        tuple(out.shape) == tuple(q.shape) and out.dtype == q.dtype and out.flags.c_contiguous,
        "out must be a C-contiguous array shaped and typed like q",
    )
    variant = Variant(
        shape.kv_dtype,
        shape.head_dim,
        shape.block_size or 16,
        per_cta,
        shape.block_size is not None,
    )
    decode, reduce = _functions(variant)
    if num_partitions > 1:
        rows = shape.num_seqs * shape.num_heads * num_partitions
        part_acc = cupy.empty(rows * shape.head_dim, dtype=cupy.float32)
        part_max = cupy.empty(rows, dtype=cupy.float32)
        part_sum = cupy.empty(rows, dtype=cupy.float32)
    else:  # never written: the kernel writes `out` directly
        part_acc = part_max = part_sum = cupy.empty(1, dtype=cupy.float32)
    tables = block_tables if block_tables is not None else context_lens  # contiguous: unread
    if scale is None:
        scale = 1.0 / math.sqrt(shape.head_dim)
    args = (
        out,
        part_acc,
        part_max,
        part_sum,
        q,
        k_cache,
        v_cache,
        tables,
        context_lens,
        np.int32(shape.row_stride),
        np.int32(shape.num_heads),
        np.int32(shape.num_kv_heads),
        np.int32(partition_size),
        np.int32(num_partitions),
        np.float32(scale * LOG2E),
    )
    grid = (shape.num_kv_heads * tiles, shape.num_seqs, num_partitions)
    launches = [(decode, grid, (NUM_THREADS, 1, 1), args)]
    if num_partitions > 1:
        reduce_args = (
            out,
            part_acc,
            part_max,
            part_sum,
            context_lens,
            np.int32(shape.num_heads),
            np.int32(partition_size),
            np.int32(num_partitions),
        )
        launches.append(
            (reduce, (shape.num_heads, shape.num_seqs, 1), (shape.head_dim, 1, 1), reduce_args)
        )
    return DecodeAttentionPlan(
        shape, out, partition_size, num_partitions, int(lens.sum()), launches
    )


def decode_attention(
    q: Any,
    k_cache: Any,
    v_cache: Any,
    context_lens: Any,
    block_tables: Any | None = None,
    **options: Any,
) -> Any:
    """Plan and run once; returns `out` [num_seqs, num_heads, head_dim]."""
    return plan_decode_attention(q, k_cache, v_cache, context_lens, block_tables, **options).run()

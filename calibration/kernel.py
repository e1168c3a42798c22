"""Load kernels/paged_attention.cu into CuPy and launch it, FlashInfer style: plan, then run.

`plan_decode_attention` checks shapes, dtypes and contiguity (`decode_inputs`), picks the split-K
partitioning from the compiled variant's occupancy (`partitions`), allocates the workspace and
packs every launch argument with its exact C type (np.int32, np.float32; CuPy would pass a
Python int as a 64-bit integer). `DecodeAttentionPlan.run` only launches, so a timing loop
measures the kernels and nothing else.

Arrays (CuPy, C-contiguous; 16-bit elements: float16, or bfloat16 given as raw uint16 bits):

    q, out        [num_seqs, num_heads, head_dim]
    k/v_cache     [num_blocks, num_kv_heads, block_size, head_dim]          (paged)
                  [num_seqs, num_kv_heads, max_context, head_dim]           (contiguous baseline)
    block_tables  int32 [num_seqs, max_blocks_per_seq]                      (paged; None otherwise)
    context_lens  int32 [num_seqs]
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

from pagesim.calibration.decode_inputs import (
    DTYPE_TAGS,
    DecodeShape,
    check_decode_inputs,
    require,
)
from pagesim.calibration.partitions import (
    NUM_THREADS,
    PARTITION_QUANTUM,
    choose_partitions,
    heads_per_cta,
    min_ctas_per_sm,
)
from pagesim.simulator.core.errors import PagesimError

KERNEL_FILE = "paged_attention.cu"
TIMING_FILE = "timing.cu"
LAYER_OPS_FILE = "layer_ops.cu"
# Options pagesim passes to RawModule: none. NVRTC 12+ defaults to C++17 and CuPy adds the rest.
NVRTC_OPTIONS: tuple[str, ...] = ()
# What CuPy adds to a RawModule's options before NVRTC sees them, read from CuPy's source (v14,
# github.com/cupy/cupy): cupy/_core/core.pyx `assemble_cupy_compiler_options` adds --std=c++17
# (unless a standard is given) and include paths; cupy/cuda/compiler.py
# `_compile_with_cache_cuda` adds -ftz=true; `_compile_using_nvrtc_no_warning` adds
# -arch=sm_<cc> (a cubin; compute_<cc> under CUPY_COMPILE_WITH_PTX) and
# --device-as-default-execution-space. -ftz=true changes register allocation (the GQA-4 variant
# took 157 registers with it, 128 without), so every compile check uses these flags.
CUPY_NVRTC_FLAGS = ("--std=c++17", "-ftz=true", "--device-as-default-execution-space")
# The same for nvcc (the last flag is NVRTC's only: every function in kernels/ is marked).
CUPY_EQUIVALENT_NVCC_FLAGS = ("-std=c++17", "-ftz=true")
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
            "this needs CuPy and a CUDA GPU: pip install 'pagesim[gpu]' (CUDA 13; "
            "'pagesim[gpu-cuda12]' for CUDA 12) on a machine with one (or use the numpy backend)"
        ) from None
    try:
        num_devices = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError when there is no driver
        raise PagesimError(f"CuPy is installed but finds no CUDA GPU: {exc}") from None
    if num_devices < 1:
        raise PagesimError("CuPy is installed but finds no CUDA GPU")
    return cupy


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

    def min_ctas_per_sm(self, compute_capability: int = 90) -> int:
        """CTAs per SM the kernel's __launch_bounds__ guarantees room for."""
        return min_ctas_per_sm(self.heads_per_cta, self.head_dim, compute_capability)


@cache
def compiled_functions(variant: Variant) -> tuple[Any, Any]:
    """(decode, reduce) kernels of one variant, compiled once per process (CuPy caches on disk)."""
    cupy = import_cupy()
    module = cupy.RawModule(
        code=kernel_source(),
        options=NVRTC_OPTIONS,
        name_expressions=[variant.decode_name, variant.reduce_name],
    )
    return module.get_function(variant.decode_name), module.get_function(variant.reduce_name)


@cache
def _module(name: str) -> Any:
    return import_cupy().RawModule(code=kernel_source(name), options=NVRTC_OPTIONS)


def noop_kernel() -> Any:
    """The empty kernel `pagesim_noop` (bare launch cost)."""
    return _module(TIMING_FILE).get_function("pagesim_noop")


def l2_flush_read_kernel() -> Any:
    """`pagesim_l2_flush_read`: evicts the L2 by reading, leaving no dirty lines."""
    return _module(TIMING_FILE).get_function("pagesim_l2_flush_read")


def layer_ops_kernel(name: str) -> Any:
    """One of kernels/layer_ops.cu's kernels (pagesim_add_rms_norm, _silu_mul, _write_kv)."""
    return _module(LAYER_OPS_FILE).get_function(name)


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


@cache
def resident_ctas_per_sm(variant: Variant, device_id: int = 0) -> int:
    """CTAs of the compiled decode kernel one SM holds at once, as the driver computes it from
    its registers and shared memory; the launch bounds' guarantee where the driver cannot say."""
    decode, _ = compiled_functions(variant)
    cupy = import_cupy()
    try:
        capability = int(cupy.cuda.Device(device_id).compute_capability)
    except Exception:  # a fake or partial binding (CPU tests)
        capability = 90
    guaranteed = variant.min_ctas_per_sm(capability)
    try:
        from cupy.cuda import driver

        count = int(
            driver.occupancyMaxActiveBlocksPerMultiprocessor(decode.kernel.ptr, NUM_THREADS, 0)
        )
    except Exception:  # a fake or partial binding (CPU tests): what the compiler guarantees
        return guaranteed
    return count if count > 0 else guaranteed


def kernel_resources(function: Any) -> dict[str, int | None]:
    """Registers, local (spill/stack) bytes and static shared memory of a compiled kernel."""
    report: dict[str, int | None] = {}
    for key in ("num_regs", "local_size_bytes", "shared_size_bytes", "max_threads_per_block"):
        try:
            report[key] = int(getattr(function, key))
        except Exception:  # attribute missing in this CuPy
            report[key] = None
    return report


# One kernel launch: (function, grid, block, arguments).
Launch = tuple[Any, tuple[int, int, int], tuple[int, int, int], tuple[Any, ...]]


@dataclass(slots=True)
class DecodeAttentionPlan:
    """Everything decided and allocated before the timed region; `run` only launches."""

    shape: DecodeShape
    out: Any
    partition_size: int
    num_partitions: int
    total_context: int | None  # Σ context_lens (None: planned for a maximum, lens not read)
    ctas_per_sm: int  # the occupancy split-K was sized for
    launches: list[Launch]

    def run(self) -> Any:
        for function, grid, block, args in self.launches:
            function(grid, block, args)
        return self.out

    @property
    def min_bytes(self) -> int:
        """Fewest bytes the call must move: each needed K/V row once, q read, out written."""
        s = self.shape
        if self.total_context is None:
            raise ValueError("a plan made for a maximum context does not know its bytes")
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
    max_context: int | None = None,
    out: Any | None = None,
    validate: bool = True,
) -> DecodeAttentionPlan:
    """Check and prepare one decode-attention call (see the module docstring for layouts).

    `partition_size` (tokens, a multiple of 128) forces the split-K partitioning; by default it
    splits until one wave of CTAs (SMs x the variant's occupancy) is full. `max_context` plans
    for contexts up to that many tokens without reading `context_lens` (a CUDA graph replays the
    plan while the lengths change; partitions past a sequence's length exit at once).
    `validate` also checks that every block-table entry a sequence uses names a real block (one
    copy to the host).
    """
    cupy = import_cupy()
    shape = check_decode_inputs(q, k_cache, v_cache, context_lens, block_tables, kv_dtype)
    lens = None
    if max_context is None:
        lens = cupy.asnumpy(context_lens)
        require(bool((lens >= 0).all()), "context_lens must be >= 0")
        max_context = int(lens.max())
    require(
        max_context <= shape.max_context,
        f"a context of {max_context} tokens does not fit the layout ({shape.max_context} max)",
    )
    if validate and lens is not None and block_tables is not None and shape.block_size:
        used = (lens + shape.block_size - 1) // shape.block_size
        mask = np.arange(shape.row_stride)[None, :] < used[:, None]
        tables = cupy.asnumpy(block_tables)
        bad = mask & ((tables < 0) | (tables >= shape.num_blocks))
        require(not bad.any(), "a used block-table entry is outside [0, num_blocks)")
    group = shape.num_heads // shape.num_kv_heads
    per_cta = heads_per_cta(group)
    tiles = group // per_cta
    variant = Variant(
        shape.kv_dtype,
        shape.head_dim,
        shape.block_size or 16,
        per_cta,
        shape.block_size is not None,
    )
    decode, reduce = compiled_functions(variant)
    device_id = cupy.cuda.Device().id
    ctas_per_sm = resident_ctas_per_sm(variant, device_id)
    if partition_size is None:
        partition_size, num_partitions = choose_partitions(
            shape.num_kv_heads * tiles * shape.num_seqs,
            max_context,
            _num_sms(device_id),
            ctas_per_sm,
            None if lens is None else float(lens.mean()),
        )
    else:
        require(
            partition_size > 0 and partition_size % PARTITION_QUANTUM == 0,
            f"partition_size must be a positive multiple of {PARTITION_QUANTUM}",
        )
        num_partitions = max(1, math.ceil(max_context / partition_size))
    require(num_partitions <= 65535, "too many partitions")
    if out is None:
        out = cupy.empty(q.shape, dtype=q.dtype)
    require(
        tuple(out.shape) == tuple(q.shape) and out.dtype == q.dtype and out.flags.c_contiguous,
        "out must be a C-contiguous array shaped and typed like q",
    )
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
    launches: list[Launch] = [(decode, grid, (NUM_THREADS, 1, 1), args)]
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
    total = None if lens is None else int(lens.sum())
    return DecodeAttentionPlan(
        shape, out, partition_size, num_partitions, total, ctas_per_sm, launches
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

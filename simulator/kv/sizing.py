"""The KV-cache arithmetic behind `pagesim kv`: bytes per token, sequence and block, what fits.

Everything is exact integer arithmetic on bytes; GiB (2^30 bytes) only for display.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from pagesim.simulator.core.catalog import GIB, GPUSpec, KVDtype, ModelSpec
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.limits import MAX_COUNT, MAX_GIB
from pagesim.simulator.core.model_spec import LayerKind
from pagesim.simulator.kv.block_budget import kv_budget_bytes, weight_bytes_per_gpu
from pagesim.simulator.kv.hybrid_layout import hybrid_layout


@dataclass(frozen=True, slots=True)
class SequenceFootprint:
    seq_len: int
    bytes_per_seq: int  # exact KV bytes of seq_len tokens, every KV layer keeping every token
    kept_bytes: int  # what the sequence really keeps: window layers at most their window,
    # plus the fixed state of state layers (= bytes_per_seq for an all-full-attention model)
    num_blocks: int  # blocks a paged cache allocates for it
    paged_bytes: int  # bytes of those blocks (the last block's unused tail included)
    paged_waste_bytes: int  # the unused tail of the last block
    max_len_bytes: int  # bytes a contiguous allocator reserving the model's max length holds
    max_len_waste_bytes: int  # reserved but never used under max-length reservation
    seqs_fit_paged: int | None  # sequences of this length that fit the KV budget, paged
    seqs_fit_max_len: int | None  # ... when each reserves the model's max length
    batch_bytes: int  # batch_size sequences of this length (what each keeps: `kept_bytes`)
    batch_total_bytes: int  # that plus the weights
    batch_fits: bool | None  # within the GPU's memory x utilization


@dataclass(frozen=True, slots=True)
class HybridFit:
    """A hybrid model's KV cache as vLLM V1 lays it out (kv/hybrid_layout.py), which a run
    uses: blocks of one layer group's page, per-group tables, window blocks freed."""

    num_full_groups: int
    num_sliding_groups: int
    num_state_groups: int
    layers_per_group: int
    num_padding_layers: int
    block_size: int  # tokens (raised for state layers as vLLM raises it)
    bytes_per_block: int  # block_size x one layer's bytes per token x layers per group
    blocks_fit: int | None  # the KV budget in such blocks: a run's capacity
    blocks_per_seq: tuple[int, ...]  # per --seq-len: blocks one decoding sequence holds
    seqs_fit: tuple[int, ...] | None  # per --seq-len: such sequences that fit at once


@dataclass(frozen=True, slots=True)
class KVReport:
    model: str
    kv_dtype: str
    tensor_parallel: int
    block_size: int
    bytes_per_token: int
    bytes_per_block: int
    weight_dtype: str
    bytes_per_token_per_layer: int  # one attention layer (MLA: the latent row)
    num_full_layers: int
    num_sliding_layers: int
    sliding_window: int | None
    num_state_layers: int
    state_bytes_per_seq: int
    gpu: str | None
    gpu_memory_bytes: int | None
    memory_utilization: float
    weight_bytes: int
    activation_reserve_bytes: int
    kv_budget_bytes: int | None  # memory x utilization - weights - activation reserve
    blocks_fit: int | None
    tokens_fit: int | None
    batch_size: int
    sequences: tuple[SequenceFootprint, ...]
    hybrid: HybridFit | None = None  # sliding-window or state layers: the layout a run uses

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        if self.hybrid is None:
            del data["hybrid"]  # a dense model's report reads as it always did
        return data


def gib_to_bytes(value: float, flag: str) -> int:
    """A GiB figure from the command line as whole bytes; InputError unless finite, in range."""
    if not (math.isfinite(value) and 0 <= value <= MAX_GIB):
        raise InputError(f"{flag}: must be a number of GiB from 0 to {MAX_GIB:,.0f}, got {value}")
    return int(value * GIB)


def tensor_parallel_choices(model: ModelSpec) -> list[int]:
    """Tensor-parallel degrees that split the model's attention heads evenly."""
    return [tp for tp in range(1, model.num_heads + 1) if model.num_heads % tp == 0]


def kv_report(
    model: ModelSpec,
    seq_lens: list[int],
    *,
    kv_dtype: KVDtype = KVDtype.FP16,
    block_size: int = 16,
    gpu: GPUSpec | None = None,
    memory_utilization: float = 0.9,
    batch_size: int = 1,
    tensor_parallel: int = 1,
    weight_bytes: int | None = None,
    activation_reserve_bytes: int = 0,
) -> KVReport:
    for name, value in (
        ("--seq-len", min(seq_lens) if seq_lens else 0),
        ("--seq-len", max(seq_lens) if seq_lens else 1),
        ("--block-size", block_size),
        ("--batch-size", batch_size),
        ("--tp", tensor_parallel),
    ):
        if not 0 < value <= MAX_COUNT:
            raise InputError(f"{name} must be a whole number from 1 to {MAX_COUNT:,}, got {value}")
    if model.num_heads % tensor_parallel:
        valid = ", ".join(map(str, tensor_parallel_choices(model)))
        raise InputError(
            f"--tp: {tensor_parallel} does not divide {model.name}'s {model.num_heads} attention "
            f"heads; valid: {valid}"
        )
    if not 0 < memory_utilization <= 1:
        raise InputError(f"--memory-utilization must be in (0, 1], got {memory_utilization}")
    if weight_bytes is not None and weight_bytes < 0:
        raise InputError(f"--weights-gib must be >= 0, got {weight_bytes / GIB}")
    if activation_reserve_bytes < 0:
        raise InputError(
            f"--activation-reserve-gib must be >= 0, got {activation_reserve_bytes / GIB}"
        )
    per_token = model.kv_bytes_per_token(kv_dtype, tensor_parallel)
    per_block = per_token * block_size
    if weight_bytes is None:
        weight_bytes = weight_bytes_per_gpu(model, tensor_parallel)
    weights = weight_bytes
    budget = blocks_fit = tokens_fit = None
    usable = available = None
    if gpu is not None:
        usable = int(gpu.memory_bytes * memory_utilization)
        # The simulator's rule (kv.block_budget), so `pagesim kv` and a run agree on what fits.
        available = kv_budget_bytes(gpu, memory_utilization, weights, activation_reserve_bytes)
        budget = max(0, int(available))
        if per_block:  # a model whose every layer keeps state has no per-token KV: no such block
            blocks_fit = int(max(0.0, available) // per_block)
            tokens_fit = blocks_fit * block_size
    sequences = []
    for seq_len in seq_lens:
        num_blocks = -(-seq_len // block_size)
        exact = seq_len * per_token
        kept = model.kv_bytes_for_sequence(seq_len, kv_dtype, tensor_parallel)
        max_len_bytes = max(model.max_seq_len, seq_len) * per_token
        max_len_blocks = -(-max(model.max_seq_len, seq_len) // block_size)
        batch_bytes = batch_size * kept  # what the batch holds: window and state layers their own
        sequences.append(
            SequenceFootprint(
                seq_len=seq_len,
                bytes_per_seq=exact,
                kept_bytes=kept,
                num_blocks=num_blocks,
                paged_bytes=num_blocks * per_block,
                paged_waste_bytes=num_blocks * per_block - exact,
                max_len_bytes=max_len_bytes,
                max_len_waste_bytes=max_len_bytes - exact,
                seqs_fit_paged=None if blocks_fit is None else blocks_fit // num_blocks,
                seqs_fit_max_len=None if blocks_fit is None else blocks_fit // max_len_blocks,
                batch_bytes=batch_bytes,
                batch_total_bytes=batch_bytes + weights,
                batch_fits=None if usable is None else batch_bytes + weights <= usable,
            )
        )
    return KVReport(
        model=model.name,
        kv_dtype=kv_dtype.value,
        tensor_parallel=tensor_parallel,
        block_size=block_size,
        bytes_per_token=per_token,
        bytes_per_block=per_block,
        weight_dtype=model.weight_dtype.value,
        bytes_per_token_per_layer=model.kv_bytes_per_token_per_layer(kv_dtype, tensor_parallel),
        num_full_layers=model.num_layers_of(LayerKind.FULL),
        num_sliding_layers=model.num_layers_of(LayerKind.SLIDING),
        sliding_window=model.sliding_window,
        num_state_layers=model.num_layers_of(LayerKind.STATE),
        state_bytes_per_seq=model.state_bytes_per_seq(kv_dtype, tensor_parallel),
        gpu=None if gpu is None else gpu.name,
        gpu_memory_bytes=None if gpu is None else gpu.memory_bytes,
        memory_utilization=memory_utilization,
        weight_bytes=weights,
        activation_reserve_bytes=activation_reserve_bytes,
        kv_budget_bytes=budget,
        blocks_fit=blocks_fit,
        tokens_fit=tokens_fit,
        batch_size=batch_size,
        sequences=tuple(sequences),
        hybrid=_hybrid_fit(model, kv_dtype, tensor_parallel, block_size, seq_lens, available),
    )


def _hybrid_fit(
    model: ModelSpec,
    kv_dtype: KVDtype,
    tensor_parallel: int,
    block_size: int,
    seq_lens: list[int],
    available: float | None,
) -> HybridFit | None:
    layout = hybrid_layout(model, kv_dtype, tensor_parallel, block_size)
    if layout is None:
        return None
    blocks_fit = None if available is None else int(max(0.0, available) // layout.block_bytes)
    per_seq = tuple(layout.blocks_alone(n, 1) for n in seq_lens)
    return HybridFit(
        num_full_groups=layout.num_full_groups,
        num_sliding_groups=layout.num_sliding_groups,
        num_state_groups=layout.num_state_groups,
        layers_per_group=layout.layers_per_group,
        num_padding_layers=layout.num_padding_layers,
        block_size=layout.block_size,
        bytes_per_block=layout.block_bytes,
        blocks_fit=blocks_fit,
        blocks_per_seq=per_seq,
        seqs_fit=None if blocks_fit is None else tuple(blocks_fit // n for n in per_seq),
    )


def format_bytes(num_bytes: int | float) -> str:
    """'3,355,443,200 B (3.13 GiB)'."""
    if num_bytes >= GIB:
        return f"{num_bytes:,.0f} B ({num_bytes / GIB:.2f} GiB)"
    if num_bytes >= 2**20:
        return f"{num_bytes:,.0f} B ({num_bytes / 2**20:.1f} MiB)"
    return f"{num_bytes:,.0f} B"


def format_report(report: KVReport) -> str:
    lines = [
        f"model {report.model}  kv dtype {report.kv_dtype}  "
        f"tensor parallel {report.tensor_parallel}  block size {report.block_size} tokens",
        f"  KV per token      {format_bytes(report.bytes_per_token)}",
        f"  KV per block      {format_bytes(report.bytes_per_block)}",
        f"  weights per GPU   {format_bytes(report.weight_bytes)} ({report.weight_dtype})",
    ]
    if report.num_sliding_layers or report.num_state_layers:
        lines.append(
            f"  layers            {report.num_full_layers} full + {report.num_sliding_layers} "
            f"sliding (window {report.sliding_window}) x "
            f"{format_bytes(report.bytes_per_token_per_layer)} per token; "
            f"{report.num_state_layers} state layers "
            f"{format_bytes(report.state_bytes_per_seq)} per sequence"
        )
    hybrid = report.hybrid
    if hybrid is not None:
        lines.append(
            f"  vLLM V1 layout    {hybrid.num_full_groups} full + {hybrid.num_sliding_groups} "
            f"sliding + {hybrid.num_state_groups} state groups of {hybrid.layers_per_group} "
            f"layers ({hybrid.num_padding_layers} padding); block {hybrid.block_size} tokens = "
            f"{format_bytes(hybrid.bytes_per_block)}"
        )
    if report.gpu is not None:
        assert report.gpu_memory_bytes is not None and report.kv_budget_bytes is not None
        fit = (
            " (no per-token KV: every layer keeps a fixed state)"
            if report.blocks_fit is None or report.tokens_fit is None
            else f" = {report.blocks_fit:,} blocks = {report.tokens_fit:,} tokens"
        )
        lines += [
            f"GPU {report.gpu}: {format_bytes(report.gpu_memory_bytes)} x "
            f"{report.memory_utilization} utilization"
            + (
                f" less {format_bytes(report.activation_reserve_bytes)} of activations"
                if report.activation_reserve_bytes
                else ""
            ),
            f"  KV budget         {format_bytes(report.kv_budget_bytes)}{fit}",
        ]
        if hybrid is not None:
            lines.append(
                f"  a run's capacity  {hybrid.blocks_fit:,} blocks of the vLLM V1 layout "
                "(every group's block from one pool)"
            )
    for i, seq in enumerate(report.sequences):
        lines += [
            f"sequence of {seq.seq_len:,} tokens",
            f"  KV                {format_bytes(seq.bytes_per_seq)}",
        ]
        if hybrid is not None:
            fit = "" if hybrid.seqs_fit is None else f"; {hybrid.seqs_fit[i]:,} fit at once"
            lines.append(
                f"  vLLM V1 layout    {hybrid.blocks_per_seq[i]:,} blocks while decoding "
                f"(window groups keep at most the window){fit}"
            )
        if seq.kept_bytes != seq.bytes_per_seq:
            lines.append(f"  kept (win/state)  {format_bytes(seq.kept_bytes)}")
        if report.bytes_per_token:  # paging a state-only model's per-token KV: nothing to page
            lines += [
                f"  paged             {seq.num_blocks:,} blocks = {format_bytes(seq.paged_bytes)}"
                f"  (waste {format_bytes(seq.paged_waste_bytes)})",
                f"  max-length prealloc {format_bytes(seq.max_len_bytes)}"
                f"  (waste {format_bytes(seq.max_len_waste_bytes)})",
            ]
        if seq.seqs_fit_paged is not None:
            lines.append(
                f"  fit on the GPU    {seq.seqs_fit_paged:,} paged vs "
                f"{seq.seqs_fit_max_len:,} with max-length preallocation"
            )
        lines.append(
            f"  batch of {report.batch_size}       {format_bytes(seq.batch_bytes)} KV"
            f" + weights = {format_bytes(seq.batch_total_bytes)}"
            + ("" if seq.batch_fits is None else ("  fits" if seq.batch_fits else "  DOES NOT FIT"))
        )
    return "\n".join(lines)

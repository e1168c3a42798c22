"""What one executed step reads, built on the host from a StepPlan and the block tables.

The executor builds a `StepInputs` before its timer starts (calibration separates plan from run):
the slot of every new token, the decoding sequences' block tables and lengths, the prefill
chunks' keys, the rows that sample. Rows are the step's tokens in `plan.work` order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pagesim.simulator.core.plan import StepPlan


@dataclass(slots=True)
class PrefillChunk:
    row: int  # first row of the chunk among the step's tokens
    num_new: int
    context: int
    token_blocks: Any | None  # [context] physical block of each key (None: c == n)
    token_offsets: Any | None


@dataclass(slots=True)
class StepInputs:
    """Host-side inputs of one step (device copies replace the arrays in `upload`)."""

    num_tokens: int
    slot_blocks: Any  # [T] physical block of each new token
    slot_offsets: Any  # [T] slot within it
    decode_rows: Any  # [Sd] row of each decoding sequence's token
    decode_tables: Any  # int32 [Sd, max blocks]
    decode_lens: Any  # int32 [Sd]
    prefills: list[PrefillChunk]
    sample_rows: Any  # [S] last row of each sequence
    extras: dict[str, Any] = field(default_factory=dict)  # the device's own (plans, buffers)

    @property
    def num_decode_seqs(self) -> int:
        return len(self.decode_lens)

    @property
    def is_decode_only(self) -> bool:
        """Every row is one decoding sequence's token, in order (what a CUDA graph replays)."""
        return not self.prefills and self.num_decode_seqs == self.num_tokens > 0

    @property
    def max_context(self) -> int:
        return int(np.max(self.decode_lens)) if self.num_decode_seqs else 0


def build_step_inputs(plan: StepPlan, block_table: Any, block_size: int) -> StepInputs:
    """The inputs of `plan`; `block_table(seq_id)` gives a sequence's physical blocks."""
    slot_blocks: list[np.ndarray] = []
    slot_offsets: list[np.ndarray] = []
    decode_rows: list[int] = []
    decode_tables: list[tuple[int, ...]] = []
    decode_lens: list[int] = []
    prefills: list[PrefillChunk] = []
    sample_rows: list[int] = []
    row = 0
    for item in plan.work:
        table = np.asarray(block_table(item.seq_id), dtype=np.int64)
        n, c = item.num_new_tokens, item.context_len
        positions = np.arange(c - n, c)
        slot_blocks.append(table[positions // block_size])
        slot_offsets.append(positions % block_size)
        if item.is_prefill or n > 1:
            keys = np.arange(c) if c > n else None
            prefills.append(
                PrefillChunk(
                    row,
                    n,
                    c,
                    None if keys is None else table[keys // block_size],
                    None if keys is None else keys % block_size,
                )
            )
        else:
            decode_rows.append(row)
            decode_tables.append(tuple(table[: -(-c // block_size)]))
            decode_lens.append(c)
        row += n
        sample_rows.append(row - 1)
    return StepInputs(
        row,
        np.concatenate(slot_blocks),
        np.concatenate(slot_offsets),
        np.asarray(decode_rows, dtype=np.int64),
        padded_tables(decode_tables),
        np.asarray(decode_lens, dtype=np.int32),
        prefills,
        np.asarray(sample_rows, dtype=np.int64),
    )


def padded_tables(tables: list[tuple[int, ...]], width: int | None = None) -> np.ndarray:
    """int32 [len(tables), width] with each row's blocks first, zeros after (never read)."""
    if width is None:
        width = max((len(t) for t in tables), default=1)
    out = np.zeros((len(tables), max(1, width)), dtype=np.int32)
    for i, t in enumerate(tables):
        out[i, : len(t)] = t
    return out


def decode_inputs(tables: list[tuple[int, ...]], lens: list[int], block_size: int) -> StepInputs:
    """A decode-only step: sequence i's new token is its token lens[i] - 1 (each table is cut
    to the blocks its length uses, as `build_step_inputs` cuts them)."""
    tables = [tuple(t[: -(-n // block_size)]) for t, n in zip(tables, lens, strict=True)]
    slot_blocks = np.asarray(
        [t[(n - 1) // block_size] for t, n in zip(tables, lens, strict=True)], dtype=np.int64
    )
    slot_offsets = np.asarray([(n - 1) % block_size for n in lens], dtype=np.int64)
    rows = np.arange(len(lens), dtype=np.int64)
    return StepInputs(
        len(lens),
        slot_blocks,
        slot_offsets,
        rows,
        padded_tables(tables),
        np.asarray(lens, dtype=np.int32),
        [],
        rows.copy(),
    )


def warmup_inputs(block_size: int) -> StepInputs:
    """A small mixed step over block 0: a prefill of min(8, B) tokens and a one-token decode."""
    n = min(8, block_size)
    return StepInputs(
        n + 1,
        np.zeros(n + 1, dtype=np.int64),
        np.arange(n + 1) % block_size,
        np.asarray([n], dtype=np.int64),
        np.zeros((1, 1), dtype=np.int32),
        np.asarray([1], dtype=np.int32),
        [PrefillChunk(0, n, n, None, None)],
        np.asarray([n - 1, n], dtype=np.int64),
    )


def static_decode_inputs(num_seqs: int, context: int, block_size: int) -> StepInputs:
    """The static buffers a decode graph of `num_seqs` sequences up to `context` tokens reads
    (`graphs`): zeroed slots and tables wide enough for `context`, lengths of one."""
    width = -(-context // block_size)
    rows = np.arange(num_seqs, dtype=np.int64)
    return StepInputs(
        num_seqs,
        np.zeros(num_seqs, dtype=np.int64),
        np.zeros(num_seqs, dtype=np.int64),
        rows,
        np.zeros((num_seqs, width), dtype=np.int32),
        np.ones(num_seqs, dtype=np.int32),
        [],
        rows.copy(),
        {"context": context},
    )

"""CUDA graphs as vLLM captures them: which steps replay a captured graph, and the padded batch
the graph runs (what the step costs: the padding's rows are computed too).

vLLM V0 (v0.6.4 vllm/worker/model_runner.py): graphs of decode-only batches, captured at batch
sizes 1, 2, 4 and every multiple of 8 (`_BATCH_SIZES_TO_CAPTURE`) up to max_num_seqs rounded up
the same way (`_get_max_graph_batch_size`: 256 by default). A decode-only step of S sequences
with S at most that runs the graph of the smallest captured size >= S
(`_get_graph_batch_size`); prefills and larger batches run eagerly (`_use_captured_graph`).
vLLM also runs a decode batch eagerly when one of its sequences is longer than
max_seq_len_to_capture (8,192 tokens): pagesim prices such steps as graphed (an approximation).

vLLM V1 (v0.11 vllm/config/__init__.py VllmConfig._set_cudagraph_sizes): sizes 1, 2, 4 and
multiples of 8 up to min(2 x max_num_seqs, 512) (`cuda_graph_sizes`), those above
max_num_batched_tokens dropped; a step of T tokens up to the largest runs the graph of the
smallest size >= T, prefill chunks too (piecewise graphs: attention runs outside them, on the
real tokens), larger steps eagerly.

Priced as graphed: the linear layers, LM head, small operators and all-reduces at the padded
size; attention and KV writes at the real sequences (a padding row attends to nothing).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from pagesim.simulator.execution.overhead import EngineEra

_ALIGNMENT = 8  # _BATCH_SIZE_ALIGNMENT (V0), the step of cuda_graph_sizes (V1)
V0_MAX_CAPTURE = 8192  # _BATCH_SIZES_TO_CAPTURE ends at 8 x 1024 (v0.6.4)
V1_MAX_CAPTURE = 512  # min(2 x max_num_seqs, 512) (v0.11)


def _round_up(size: int) -> int:
    if size <= 2:
        return size
    if size <= 4:
        return 4
    return -(-size // _ALIGNMENT) * _ALIGNMENT


def _sizes_up_to(largest: int) -> tuple[int, ...]:
    return tuple(s for s in (1, 2, 4, *range(_ALIGNMENT, largest + 1, _ALIGNMENT)) if s <= largest)


@dataclass(frozen=True, slots=True)
class CudaGraphs:
    """The captured sizes of one system and what a step's size is counted in."""

    sizes: tuple[int, ...]  # ascending; () : every step eager
    by_tokens: bool  # V1: a step's tokens, any step; V0: a decode-only step's sequences
    source: str

    @property
    def largest(self) -> int:
        return self.sizes[-1] if self.sizes else 0

    def padded(self, num_tokens: int, num_seqs: int, is_decode_only: bool) -> int | None:
        """The captured size the step replays (>= its tokens), or None: it runs eagerly."""
        if self.by_tokens:
            size = num_tokens
        elif is_decode_only:
            size = num_seqs
        else:
            return None
        if not 0 < size <= self.largest:
            return None
        return self.sizes[bisect.bisect_left(self.sizes, size)]

    def shape(self, num_tokens: int, num_seqs: int, is_decode_only: bool) -> tuple[int, bool]:
        """(tokens the step computes, whether it replays a graph): its padded size (a V0 graph
        pads sequences of one token each), or its own when it runs eagerly."""
        padded = self.padded(num_tokens, num_seqs, is_decode_only)
        if padded is None:
            return num_tokens, False
        return (padded if self.by_tokens else num_tokens + padded - num_seqs), True

    def describe(self) -> str:
        if not self.sizes:
            return "eager (no CUDA graphs)"
        unit = "tokens, any step" if self.by_tokens else "sequences, decode-only steps"
        return f"CUDA graphs up to {self.largest} {unit} ({self.source})"


def cuda_graphs_for(era: EngineEra, max_num_seqs: int, max_num_batched_tokens: int) -> CudaGraphs:
    """The sizes vLLM of `era` captures for a system with these limits."""
    if era is EngineEra.V0:
        largest = min(_round_up(max_num_seqs), V0_MAX_CAPTURE)
        return CudaGraphs(
            _sizes_up_to(largest),
            False,
            "vLLM v0.6.4 worker/model_runner.py _BATCH_SIZES_TO_CAPTURE",
        )
    largest = min(2 * max_num_seqs, V1_MAX_CAPTURE, max_num_batched_tokens)
    return CudaGraphs(
        _sizes_up_to(largest), True, "vLLM v0.11 config VllmConfig._set_cudagraph_sizes"
    )

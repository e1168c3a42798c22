"""CUDA-graph mode's bookkeeping: which graph a decode step replays, and what a capture keeps.

A decode-only step of S sequences whose longest context rounds up to C tokens (`graph_context`)
replays the graph captured for (S, C); its inputs live in static buffers
(`step_inputs.static_decode_inputs`) that each step overwrites before the replay. The CPU
executor "replays" the same static-buffer path eagerly (`forward.HostForward`), the GPU one
replays real CUDA graphs (`forward_gpu.GpuForward`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pagesim.calibration.partitions import PARTITION_QUANTUM
from pagesim.calibration.step_inputs import StepInputs


@dataclass(slots=True)
class GraphEntry:
    """A captured decode step: its static inputs, the two replays (layers, then LM head), and
    the arrays they leave their results in."""

    static: StepInputs
    replay_layers: Callable[[], None]
    replay_lm_head: Callable[[], None]
    outputs: list[Any]  # [hidden states [T, hidden], logits [S, vocab]]
    keep: list[Any] = field(default_factory=list)  # what must outlive the graph (pools, graphs)


def graph_context(max_context: int) -> int:
    """The context a decode graph is made for: the next power of two, at least one quantum."""
    return max(PARTITION_QUANTUM, 1 << max(0, max_context - 1).bit_length())

"""What every execution model shares: the protocol the engine prices plans through, and the
pricing of KV moves (swap over the host link, copy-on-write copies in HBM)."""

from __future__ import annotations

from typing import Protocol

from pagesim.simulator.core.plan import StepCost, StepPlan


class ExecutionModel(Protocol):
    """Prices a StepPlan. Implementations: roofline (analytic) and profile (measured)."""

    name: str

    def price(self, plan: StepPlan) -> StepCost: ...

    def describe(self) -> dict[str, object]:
        """Provenance for reports: kind, device, date, efficiency factors, extrapolation notes."""
        ...


class TransferPricer:
    """Prices a plan's KV moves, which every execution model prices alike.

    Swapped blocks queue on the host link, each as 2 x layers copies (K and V of every layer:
    vLLM V0 `swap_blocks` issues one cudaMemcpyAsync per block per layer for each), which pay
    `copy_latency_s` each beside their bytes: at block size 16 that is about 1.3-1.6x the
    bytes' time on PCIe 4, at block size 1 about 10x, which moves the vLLM paper's §7
    swap-vs-recompute crossover. A copy-on-write copy reads its source block and writes the
    copy in HBM at `copy_bps`."""

    __slots__ = ("block_bytes", "copy_bytes_per_copy", "copy_s_per_copy", "swap_s_per_block")

    def __init__(
        self,
        block_bytes: int,
        host_link_bps: float,
        copy_bps: float,
        *,
        num_layers: int = 1,
        copy_latency_s: float = 0.0,
    ) -> None:
        self.block_bytes = block_bytes
        self.swap_s_per_block = block_bytes / host_link_bps + 2 * num_layers * copy_latency_s
        self.copy_bytes_per_copy = 2 * block_bytes
        self.copy_s_per_copy = self.copy_bytes_per_copy / copy_bps

    def price(self, plan: StepPlan) -> tuple[float, float, float]:
        """(swap_s, copy_s, copy_bytes) of `plan`. Callers ask only for a plan that moves
        blocks (`StepPlan.moves_blocks`): the common step moves none, and its transfers are
        `NO_TRANSFER`."""
        num_copies = len(plan.copies)
        num_swap_blocks = plan.num_swap_in_blocks + plan.num_swap_out_blocks
        return (
            num_swap_blocks * self.swap_s_per_block,
            num_copies * self.copy_s_per_copy,
            float(num_copies * self.copy_bytes_per_copy),
        )


NO_TRANSFER = (0.0, 0.0, 0.0)  # (swap_s, copy_s, copy_bytes) of a step that moves no block

"""Row 11: swap priced per copy, as vLLM V0 swaps (v0.5.4: core/block_manager_v1.py
BlockSpaceManagerV1.swap_out maps the blocks; worker/cache_engine.py CacheEngine.swap_out calls
attn_backend.swap_blocks once per layer, for the key cache and for the value cache; csrc/
cache_kernels.cu swap_blocks issues one cudaMemcpyAsync per block): 2 x layers copies a block."""

from __future__ import annotations

import math

from pagesim.simulator.core.config import ExecutionConfig
from pagesim.simulator.core.plan import StepPlan
from pagesim.simulator.execution.model import TransferPricer

HOST_LINK_BPS = 25e9  # PCIe 4 x16, effective (docs/facts.md)
LATENCY_S = ExecutionConfig().swap_copy_latency_s  # 3 us, an estimate


def _swap_s(block_size: int, num_blocks: int) -> float:
    block_bytes = block_size * 524_288  # Llama-2-7B: 512 KiB of KV per token, 32 layers
    pricer = TransferPricer(
        block_bytes, HOST_LINK_BPS, 1e12, num_layers=32, copy_latency_s=LATENCY_S
    )
    plan = StepPlan.build((), num_swap_out_blocks=num_blocks)
    return pricer.price(plan)[0]


def test_a_swapped_block_costs_its_bytes_and_one_fixed_cost_per_copy() -> None:
    # Block 16: 8 MiB over 25 GB/s = 335.5 us, plus 2 x 32 copies x 3 us = 192 us.
    assert math.isclose(_swap_s(16, 1), 16 * 524_288 / 25e9 + 64 * 3e-6)
    assert math.isclose(_swap_s(16, 10), 10 * _swap_s(16, 1))


def test_the_fixed_cost_dominates_small_blocks() -> None:
    """1.3-1.6x the bytes' time at block 16, about 10x at block 1 (issue 12, row 11)."""
    bytes_only_16 = 16 * 524_288 / 25e9
    bytes_only_1 = 524_288 / 25e9
    assert 1.3 < _swap_s(16, 1) / bytes_only_16 < 1.6
    assert 9 < _swap_s(1, 1) / bytes_only_1 < 11

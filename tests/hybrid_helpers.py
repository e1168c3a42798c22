"""Tiny hybrid models and V1 schedulers over them, for the hybrid KV-cache tests."""

from __future__ import annotations

from sim_helpers import system

from pagesim.simulator.core.catalog import get_gpu, get_model
from pagesim.simulator.core.config import Policy
from pagesim.simulator.core.defaults import resolve_system
from pagesim.simulator.core.model_spec import KVDtype, LayerKind, ModelSpec, StateSpec
from pagesim.simulator.kv.hybrid_layout import HybridLayout, hybrid_layout
from pagesim.simulator.policies.paged import PagedScheduler
from pagesim.simulator.policies.vllm_v1 import VllmV1


def tiny_hybrid(
    kinds: tuple[LayerKind, ...],
    window: int | None = None,
    state: StateSpec | None = None,
) -> ModelSpec:
    """A model of these layer kinds: 1 KV head of 64 (256 B per token per layer in fp16)."""
    return ModelSpec(
        name="tiny-hybrid",
        num_layers=len(kinds),
        num_heads=2,
        num_kv_heads=1,
        head_dim=64,
        hidden_size=128,
        intermediate_size=256,
        vocab_size=512,
        is_gated_mlp=True,
        max_seq_len=4096,
        num_params=1_000_000,
        layer_kinds=kinds,
        sliding_window=window,
        state=state,
    )


def layout_of(model: ModelSpec, block_size: int = 4) -> HybridLayout:
    layout = hybrid_layout(model, KVDtype.FP16, 1, block_size)
    assert layout is not None
    return layout


def hybrid_scheduler(
    layout: HybridLayout, num_blocks: int, max_seq_len: int = 4096, **knobs: object
) -> PagedScheduler:
    """A V1 scheduler over `num_blocks` blocks of `layout`, driven step by step by a test."""
    resolved = resolve_system(
        system(Policy.VLLM_V1, block_size=layout.block_size, **knobs),
        get_model("llama-2-7b"),
        get_gpu("a100-80gb"),
    ).system
    return PagedScheduler(resolved, max_seq_len, num_blocks, 0, VllmV1(), layout)

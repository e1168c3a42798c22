"""vLLM V1's layout of hybrid models' KV caches (v0.11 kv_cache_utils.py
`_get_kv_cache_groups_uniform_page_size`; models/config.py
`HybridAttentionMambaModelConfig.verify_and_update_config`), pinned for the catalog's hybrids
with the arithmetic in the test; and the capacity a run gets from it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sim_helpers import explicit_workload, poisson_workload, scenario, system

from pagesim.simulator.core.catalog import get_model
from pagesim.simulator.core.config import Policy
from pagesim.simulator.core.model_spec import KVDtype, LayerKind
from pagesim.simulator.engine import simulate
from pagesim.simulator.kv.block_budget import kv_capacity
from pagesim.simulator.kv.hybrid_layout import group_size_of, hybrid_layout


def test_group_size_is_the_fewest_layers_of_a_kind_or_the_most_when_close() -> None:
    assert group_size_of([10, 52]) == 10  # Gemma 3: 52 >= 1.25 x 10
    assert group_size_of([18, 18]) == 18  # gpt-oss
    assert group_size_of([12, 13]) == 13  # vLLM's example: gpt-oss-20b + eagle, 12 sw + 13 full
    assert group_size_of([12, 36]) == 12  # Qwen3-Next


def test_gemma_3_27b_pads_its_window_layers_to_six_groups_of_ten() -> None:
    layout = hybrid_layout(get_model("gemma-3-27b"), KVDtype.FP16, 1, 16)
    assert layout is not None
    assert (layout.num_full_groups, layout.num_sliding_groups, layout.layers_per_group) == (
        1,
        6,
        10,
    )
    assert layout.num_padding_layers == 6 * 10 - 52
    assert layout.window == 1024
    # one layer's page: 16 tokens x 2 (K, V) x 16 KV heads x 128 x 2 B = 131,072 B; x 10 layers
    assert layout.page_bytes == 16 * 2 * 16 * 128 * 2 == 131_072
    assert layout.block_bytes == 1_310_720
    # a hit needs cdiv(1023, 16) = 64 window blocks; a decode holds at most cdiv(1024, 16) + 1
    assert (layout.num_window_blocks, layout.max_sliding_blocks(1)) == (64, 65)


def test_gpt_oss_120b_has_one_full_and_one_window_group_of_18() -> None:
    layout = hybrid_layout(get_model("gpt-oss-120b"), KVDtype.FP16, 1, 16)
    assert layout is not None
    assert (layout.num_full_groups, layout.num_sliding_groups, layout.layers_per_group) == (
        1,
        1,
        18,
    )
    assert layout.block_bytes == 16 * 2 * 8 * 64 * 2 * 18 == 589_824
    assert layout.num_padding_layers == 0


def test_qwen3_next_raises_its_block_size_to_hold_a_state_layer_in_one_page() -> None:
    layout = hybrid_layout(get_model("qwen3-next-80b-a3b"), KVDtype.FP16, 1, 16)
    assert layout is not None
    # state per gated-DeltaNet layer: (548,864 elements) x 2 B = 1,097,728 B; attention per
    # token per layer 2 x 2 KV heads x 256 x 2 B = 2,048 B; block 16 x cdiv(1,097,728, 16 x
    # 2,048) = 16 x 34 = 544 tokens; page 544 x 2,048 = 1,114,112 B (the state padded to it).
    assert layout.state_bytes_per_layer == 548_864 * 2
    assert (layout.block_size, layout.page_bytes) == (544, 1_114_112)
    assert (layout.num_full_groups, layout.num_state_groups, layout.layers_per_group) == (1, 3, 12)
    assert layout.block_bytes == 1_114_112 * 12
    # a request alone of 1,000 tokens: 2 attention blocks + 3 state blocks
    assert layout.blocks_alone(1000, 8192) == 5


def test_dense_models_get_no_layout_and_their_capacity_is_unchanged() -> None:
    assert hybrid_layout(get_model("llama-3.1-8b"), KVDtype.FP16, 1, 16) is None
    s = scenario(poisson_workload(1, 1.0), system(Policy.VLLM_V1), model="llama-2-7b")
    capacity = kv_capacity(s, s.systems[0])
    assert capacity.layout is None
    assert capacity.block_bytes == 32 * 2 * 32 * 128 * 2 * 16  # every layer, per block
    assert capacity.kv_bytes_per_token == capacity.block_bytes // 16


def test_a_hybrid_models_blocks_are_one_group_page() -> None:
    s = scenario(
        poisson_workload(1, 1.0), system(Policy.VLLM_V1), model="gpt-oss-120b", gpu="h200-sxm"
    )
    capacity = kv_capacity(s, s.systems[0])
    assert capacity.layout is not None and capacity.block_bytes == 589_824
    assert capacity.block_size == 16


def test_pagesim_kv_and_a_run_agree_on_a_hybrid_models_capacity() -> None:
    """The same budget (utilization, activation reserve) gives `pagesim kv` and the engine
    the same number of group blocks; a dense model's report carries no hybrid part."""
    from dataclasses import replace

    from pagesim.simulator.core.catalog import GIB, get_gpu
    from pagesim.simulator.kv.sizing import kv_report

    s = scenario(
        poisson_workload(1, 1.0), system(Policy.VLLM_V1), model="gemma-3-27b", gpu="h200-sxm"
    )
    s = replace(s, systems=(replace(s.systems[0], activation_reserve_gib=2.0),))
    capacity = kv_capacity(s, s.systems[0])
    report = kv_report(
        get_model("gemma-3-27b"),
        [4096],
        gpu=get_gpu("h200-sxm"),
        memory_utilization=0.9,
        activation_reserve_bytes=2 * GIB,
    )
    assert report.hybrid is not None and report.hybrid.blocks_fit == capacity.num_gpu_blocks
    # one decoding 4,096-token sequence: 256 full blocks + 6 window groups x 65
    assert report.hybrid.blocks_per_seq == (256 + 6 * 65,)
    dense = kv_report(get_model("llama-3.1-8b"), [4096]).to_dict()
    assert "hybrid" not in dense


def test_groups_are_ordered_as_the_kinds_first_layers_come() -> None:
    """vLLM numbers groups kind by kind in layer order (its layer specs' dict order): Gemma 3's
    and gpt-oss's layer 0 is a sliding one, Qwen3-Next's a linear-attention (state) one."""
    from pagesim.simulator.core.model_spec import LayerKind

    order = {
        name: hybrid_layout(get_model(name), KVDtype.FP16, 1, 16).kind_order  # type: ignore[union-attr]
        for name in ("gemma-3-27b", "gpt-oss-120b", "qwen3-next-80b-a3b")
    }
    assert order == {
        "gemma-3-27b": (LayerKind.SLIDING, LayerKind.FULL),
        "gpt-oss-120b": (LayerKind.SLIDING, LayerKind.FULL),
        "qwen3-next-80b-a3b": (LayerKind.STATE, LayerKind.FULL),
    }


def test_a_sliding_first_model_takes_and_frees_its_window_blocks_first() -> None:
    """Layer 0 sliding: the window group is group 0, so it takes the first new blocks and is
    freed first (each group tail first)."""
    from hybrid_helpers import layout_of, tiny_hybrid

    from pagesim.simulator.core.model_spec import LayerKind
    from pagesim.simulator.kv.block_pool import EvictionOrder
    from pagesim.simulator.kv.hybrid_cache import HybridKVCache

    layout = layout_of(tiny_hybrid((LayerKind.SLIDING, LayerKind.FULL), window=64))
    kv = HybridKVCache(8, layout, eviction=EvictionOrder.PLAIN_FIRST)
    kv.add_seq(0, final_len=8)
    kv.allocate_slots([0], 8)  # two logical blocks: window group 0, 1; full group 2, 3
    assert kv.tables(0) == ([[2, 3], [0, 1]], [])  # (tables lists full groups first)
    kv.free(0)  # 1, 0 (window) then 3, 2 (full) join the FIFO behind 4..7
    kv.add_seq(1, final_len=16)
    kv.allocate_slots([1], 16)  # the window group first: 4..7; the full group: 1, 0, 3, 2
    assert kv.tables(1) == ([[1, 0, 3, 2], [4, 5, 6, 7]], [])


def test_with_the_hybrid_manager_off_every_layer_keeps_kv_for_every_token() -> None:
    """vLLM's --disable-hybrid-kv-cache-manager (v1/core/kv_cache_utils.py
    unify_hybrid_kv_cache_specs): gpt-oss-20b's 12 window layers become full ones, one group of
    24 layers: a block is 24 x 2 x 8 heads x 64 x 2 bytes x 16 tokens, twice a group page, so
    the same budget holds half the blocks (issue vllm-project/vllm#42024: "halving KV cache
    capacity"). A 1,000-token prompt then holds all its 63 blocks, none freed by its window."""
    s = scenario(
        explicit_workload([(1000, 2, 0.0)]),
        system(Policy.VLLM_V1, "on"),
        system(Policy.VLLM_V1, "off", hybrid_kv_cache_manager=False),
        model="gpt-oss-20b",
        gpu="h100-sxm",
    )
    on, off = (kv_capacity(s, system) for system in s.systems)
    assert on.layout is not None and off.layout is None
    assert off.block_bytes == 24 * 2 * 8 * 64 * 2 * 16 == 2 * on.block_bytes
    assert off.kv_bytes_per_token == get_model("gpt-oss-20b").kv_bytes_per_token()
    assert off.num_gpu_blocks == on.num_gpu_blocks // 2
    hma = simulate(s, s.systems[0], check_invariants=True).summary
    flat = simulate(s, s.systems[1], check_invariants=True).summary
    assert hma["kv_window_freed_blocks"] > 0 and "kv_window_freed_blocks" not in flat
    assert flat["peak_kv_used_share"] * off.num_gpu_blocks == pytest.approx(63)
    # Memory only: the window layers still attend within their window, at the same price.
    assert flat["busy_s"] == pytest.approx(hma["busy_s"], rel=1e-12)


def test_a_model_of_window_layers_only_keeps_its_layout_with_the_manager_off() -> None:
    # vLLM's unify_hybrid_kv_cache_specs returns early when every layer is of one kind.
    s = scenario(
        poisson_workload(1, 1.0),
        system(Policy.VLLM_V1, "off", hybrid_kv_cache_manager=False),
        model="gpt-oss-20b",
        gpu="h100-sxm",
    )
    model = s.model
    windows = replace(model, layer_kinds=(LayerKind.SLIDING,) * model.num_layers)
    s = replace(s, model=windows)
    assert kv_capacity(s, s.systems[0]).layout is not None

"""How vLLM V1 lays out the KV cache of a model whose layers are not all full attention: layer
groups sharing one pool of equal-sized blocks (its hybrid KV-cache manager).

Read in the code index's copies of vLLM's 2025 sources, the v0.11 era (the v0.11.0 tag itself
could not be fetched: the repository snapshot is too large): vllm/v1/core/kv_cache_utils.py
`_get_kv_cache_groups_uniform_page_size` (with its 1.25 rule and "gpt-oss-20b + eagle"
comment), `get_kv_cache_config_from_groups`; vllm/model_executor/models/config.py
`HybridAttentionMambaModelConfig.verify_and_update_config`; single_type_kv_cache_manager.py
`MambaManager` ("MambaManager should only allocate 1 block for each request"):

- Layers of one kind (full attention, one sliding window, one state shape) are split into groups
  of `group_size` layers: the fewest layers of any kind, or the most when that is under 1.25 x
  the fewest. A kind whose count is not a multiple is padded with empty layers (memory vLLM
  wastes too). Gemma-3-27B: 10 full + 52 sliding -> size 10, 1 full + 6 sliding groups, 8
  padding layers; gpt-oss-120b: 18 + 18 -> 1 + 1; Qwen3-Next: 12 full + 36 state -> 1 + 3.
- Groups are numbered kind by kind in the order the kinds' first layers come (the layer specs'
  dict order): allocation and freeing go group by group in that order.
- Every group's block holds `block_size` tokens of one layer per group member (a page per
  layer); the pool has budget // (page x group_size) blocks and a block id serves any group.
- State (Mamba, gated DeltaNet) layers: the attention block size is raised to
  16 x cdiv(state page, 16 x attention bytes per token per layer) when the system's is smaller,
  and the state page is padded to the attention page; a request holds one block per state group
  whatever its length (`MambaManager` allocates exactly one block per request: its block size
  is the model's maximum length).

A model whose layers are all full attention gets no layout (None): it takes the plain paged
path, one group of every layer, exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from pagesim.simulator.core.model_spec import KVDtype, LayerKind, ModelSpec

KERNEL_BLOCK_ALIGNMENT = 16  # tokens; vLLM rounds a raised attention block size to this
GROUP_SIZE_SLACK = 1.25  # vLLM's "magic number": use the largest kind's count when this close


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True, slots=True)
class HybridLayout:
    """A hybrid model's KV groups over one pool of blocks of `block_bytes` each."""

    num_full_groups: int
    num_sliding_groups: int
    num_state_groups: int
    window: int | None  # tokens a sliding group keeps; None without sliding groups
    layers_per_group: int
    block_size: int  # tokens per attention block (raised for state models, as vLLM does)
    page_bytes: int  # one layer's block: block_size x attention bytes per token per layer
    num_padding_layers: int  # empty layers vLLM adds to fill the last group of a kind
    state_bytes_per_layer: int  # a state layer's true state (its page is padded to page_bytes)
    # vLLM's group order: kinds as their first layers come (Gemma 3, gpt-oss: sliding first)
    kind_order: tuple[LayerKind, ...] = (LayerKind.FULL, LayerKind.SLIDING, LayerKind.STATE)

    @property
    def block_bytes(self) -> int:
        return self.page_bytes * self.layers_per_group

    @property
    def num_groups(self) -> int:
        return self.num_full_groups + self.num_sliding_groups + self.num_state_groups

    @property
    def num_window_blocks(self) -> int:
        """Blocks a sliding group needs for a prefix-cache hit: cdiv(W - 1, block_size) (vLLM
        SlidingWindowManager: "-1 since the input token itself is also included")."""
        assert self.window is not None
        return cdiv(self.window - 1, self.block_size)

    def max_sliding_blocks(self, num_new_tokens: int) -> int:
        """The most blocks one sliding group holds after a step adding `num_new_tokens`: the
        window's, the new tokens', and the block the window's first token straddles."""
        assert self.window is not None
        return cdiv(self.window - 1 + num_new_tokens, self.block_size) + 1

    def blocks_alone(self, num_tokens: int, max_chunk: int) -> int:
        """Blocks one request holds at most while growing to `num_tokens` tokens in chunks of
        at most `max_chunk` (a prompt's chunk or a decode's one token)."""
        logical = cdiv(num_tokens, self.block_size)
        sliding = 0
        if self.num_sliding_groups:
            sliding = min(logical, self.max_sliding_blocks(min(max_chunk, num_tokens)))
        return (
            self.num_full_groups * logical
            + self.num_sliding_groups * sliding
            + self.num_state_groups
        )


def group_size_of(counts: list[int]) -> int:
    """vLLM's rule above: the fewest layers of a kind, or the most when within 1.25 x."""
    fewest, most = min(counts), max(counts)
    return most if most < fewest * GROUP_SIZE_SLACK else fewest


def hybrid_layout(
    model: ModelSpec, kv_dtype: KVDtype, tensor_parallel: int, block_size: int
) -> HybridLayout | None:
    """The layout of `model`'s KV cache per GPU, or None when every layer is full attention."""
    num_full = model.num_layers_of(LayerKind.FULL)
    num_sliding = model.num_layers_of(LayerKind.SLIDING)
    num_state = model.num_layers_of(LayerKind.STATE)
    if not num_sliding and not num_state:
        return None
    per_token_layer = model.kv_bytes_per_token_per_layer(kv_dtype, tensor_parallel)
    state_bytes = 0
    if num_state:
        state_bytes = model.state_bytes_per_seq(kv_dtype, tensor_parallel) // num_state
        raised = KERNEL_BLOCK_ALIGNMENT * cdiv(
            state_bytes, KERNEL_BLOCK_ALIGNMENT * per_token_layer
        )
        block_size = max(block_size, raised)
    layers = (num_full, num_sliding, num_state)
    size = group_size_of([n for n in layers if n])
    groups = [cdiv(n, size) for n in layers]
    return HybridLayout(
        num_full_groups=groups[0],
        num_sliding_groups=groups[1],
        num_state_groups=groups[2],
        window=model.sliding_window if num_sliding else None,
        layers_per_group=size,
        block_size=block_size,
        page_bytes=block_size * per_token_layer,
        num_padding_layers=sum(groups) * size - sum(layers),
        state_bytes_per_layer=state_bytes,
        kind_order=tuple(dict.fromkeys(model.kinds())),
    )

"""Attention of a model whose layers are not all full attention (Gemma 3, gpt-oss, Qwen3-Next):
what `RooflineModel.price` adds for its sliding-window and state layers.

Per GPU, one step; `kv` = one layer's KV bytes per token, full / sliding / state = the model's
layers of each kind (ModelSpec.kinds()), W = the window. A query at position i of a sliding layer
attends keys (i - W, i]: min(i + 1, W) of them (vLLM SlidingWindowManager counts the query itself
in the window), so with f(m) = sum over k = 1..m of min(k, W) (m(m + 1)/2 up to W, then W per k):

    decode of n tokens at context c (n = 1, or a speculative verification):
        keys read  = full x c + sliding x min(c, W + n - 1)            (layer-tokens of KV)
        pairs      = full x (n c - n (n - 1)/2) + sliding x (f(c) - f(c - n))
    prefill chunk of n new tokens after c - n cached ones:
        cached pairs = full x n (c - n)     + sliding x (f(c) - f(c - n) - f(n))
        causal pairs = full x n (n + 1)/2   + sliding x f(n)
        keys read    = full x c + sliding x min(c, W + n - 1)
    state layers (gated DeltaNet, Mamba-like): no KV; each sequence in the step reads its fixed
        state once and writes it once (2 x state bytes per sequence), and each token costs
        6 dk dv FLOPs per value head: the gated delta rule's three matrix-vector products
        (S k, the rank-one update (v - a S k) k^T, S q; Gated DeltaNet, Yang et al., ICLR 2025,
        arXiv 2412.06464, eq. for S_t). The layer's kernel is priced as
        max(state bytes / (bw x attention_bw_eff), FLOPs / (peak x attention_flops_eff)).

Keys read are priced at the attention bandwidth and the paged block term per layer-token, as the
full-attention path does (roofline.py); the sliding layer's block term counts only the blocks in
its window (vLLM frees the rest). Estimates, said so in `term_sources`: the per-call and
per-sequence fixed costs still count every mixer layer (a state layer launches its own kernels);
the chunked prefill form's intermediate chunk states and intra-chunk work are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from pagesim.simulator.core.model_spec import LayerKind, ModelSpec
from pagesim.simulator.core.plan import StepPlan

# The gated delta rule per token and value head: S k, the rank-one update, S q (arXiv 2412.06464).
STATE_MATVECS_PER_TOKEN = 3


def window_keys(m: int, window: int) -> int:
    """f(m): sum over k = 1..m of min(k, W), the (query, key) pairs of the first m queries."""
    if m <= window:
        return m * (m + 1) >> 1
    return (window * (window + 1) >> 1) + (m - window) * window


@dataclass(frozen=True, slots=True)
class KindsCost:
    """Per-layer unit costs of a hybrid model's attention and state layers on one GPU."""

    num_full: int
    num_sliding: int
    num_state: int
    window: int  # tokens; 0 without sliding layers
    kv_layer_s: float  # one layer-token of KV read at the attention bandwidth
    block_context_s: float  # the block term per layer-token read
    block_seq_s: float  # the block term per attention layer per decoding sequence
    cached_pair_s: float  # one layer's (query, key) pair over cached context
    causal_pair_s: float  # one layer's pair in the causal triangle
    flops_per_pair: float  # one layer's attention FLOPs per pair
    kv_layer_bytes: int  # one layer's KV bytes per token
    state_bytes_per_seq: int  # all state layers of one sequence
    state_rw_s_per_seq: float  # read + write of that state
    state_flops_per_token: float  # all state layers
    state_token_s: float
    prefill_token_s: float  # the roofline's fixed attention costs, all mixer layers
    prefill_call_s: float
    attention_call_s: float
    attention_seq_s: float

    @classmethod
    def of(
        cls,
        model: ModelSpec,
        kv_layer_bytes: int,
        state_bytes_per_seq: int,
        *,
        tensor_parallel: int,
        kv_bps: float,
        attention_flops_s: float,
        attention_causal_flops_s: float,
        flops_per_pair: float,
        block_overhead_bytes_per_layer: float,
        block_size: int,
        fixed_s: tuple[float, float, float, float],
    ) -> KindsCost | None:
        """None when every layer is full attention (the plain path prices those). `fixed_s`:
        the roofline's per prefill token, per prefill call, per decode call and per decoding
        sequence seconds (every mixer layer's)."""
        num_sliding = model.num_layers_of(LayerKind.SLIDING)
        num_state = model.num_layers_of(LayerKind.STATE)
        if not num_sliding and not num_state:
            return None
        state_flops = 0.0
        if model.state is not None and num_state:
            s = model.state
            per_layer = 2 * STATE_MATVECS_PER_TOKEN * s.key_head_dim * s.value_head_dim
            state_flops = num_state * per_layer * s.num_value_heads / tensor_parallel
        return cls(
            num_full=model.num_layers_of(LayerKind.FULL),
            num_sliding=num_sliding,
            num_state=num_state,
            window=(model.sliding_window or 0) if num_sliding else 0,
            kv_layer_s=kv_layer_bytes / kv_bps,
            block_context_s=block_overhead_bytes_per_layer / block_size / kv_bps,
            block_seq_s=block_overhead_bytes_per_layer
            * (block_size - 1)
            / (2 * block_size)
            / kv_bps,
            cached_pair_s=flops_per_pair / attention_flops_s,
            causal_pair_s=flops_per_pair / attention_causal_flops_s,
            flops_per_pair=flops_per_pair,
            kv_layer_bytes=kv_layer_bytes,
            state_bytes_per_seq=state_bytes_per_seq,
            state_rw_s_per_seq=2 * state_bytes_per_seq / kv_bps,
            state_flops_per_token=state_flops,
            state_token_s=state_flops / attention_flops_s,
            prefill_token_s=fixed_s[0],
            prefill_call_s=fixed_s[1],
            attention_call_s=fixed_s[2],
            attention_seq_s=fixed_s[3],
        )

    @property
    def num_attention_layers(self) -> int:
        return self.num_full + self.num_sliding

    def keys_read(self, num_new: int, context: int) -> int:
        """Layer-tokens of KV one sequence's attention reads this step."""
        keys = self.num_full * context
        if self.num_sliding:
            keys += self.num_sliding * min(context, self.window + num_new - 1)
        return keys

    def decode_pairs(self, num_new: int, context: int) -> int:
        pairs = self.num_full * (num_new * context - (num_new * (num_new - 1) >> 1))
        if self.num_sliding:
            w = self.window
            pairs += self.num_sliding * (
                window_keys(context, w) - window_keys(context - num_new, w)
            )
        return pairs

    def prefill_pairs(self, num_new: int, context: int) -> tuple[int, int]:
        """(pairs over cached context, pairs in the causal triangle), summed over layers."""
        cached = self.num_full * num_new * (context - num_new)
        causal = self.num_full * (num_new * (num_new + 1) >> 1)
        if self.num_sliding:
            w = self.window
            tri = window_keys(num_new, w)
            span = window_keys(context, w) - window_keys(context - num_new, w)
            cached += self.num_sliding * (span - tri)
            causal += self.num_sliding * tri
        return cached, causal

    def attention(self, plan: StepPlan) -> tuple[float, float, int, int, int]:
        """(decode attention s, prefill attention s, layer-pairs for FLOPs, layer-tokens of KV
        read, decoding sequences) of `plan`, fixed costs included."""
        decode_s = prefill_s = 0.0
        pairs = keys_total = num_decode = 0
        read_s = self.kv_layer_s + self.block_context_s
        for _, _, n, c, is_prefill in plan.work:
            keys = self.keys_read(n, c)
            keys_total += keys
            if is_prefill:
                cached, causal = self.prefill_pairs(n, c)
                pairs += cached + causal
                flop_s = cached * self.cached_pair_s + causal * self.causal_pair_s
                flop_s += n * self.prefill_token_s
                kv_s = keys * self.kv_layer_s
                prefill_s += flop_s if flop_s > kv_s else kv_s
            else:
                num_decode += 1
                pairs += self.decode_pairs(n, c)
                decode_s += keys * read_s
        if num_decode:
            per_seq = self.attention_seq_s + self.num_attention_layers * self.block_seq_s
            decode_s += self.attention_call_s + num_decode * per_seq
        if plan.num_prefill_seqs:
            prefill_s += self.prefill_call_s
        return decode_s, prefill_s, pairs, keys_total, num_decode

    def step(self, plan: StepPlan) -> tuple[float, int, int]:
        """(attention and state seconds, layer-pairs for FLOPs, KV and state bytes read and
        written) of `plan`."""
        decode_s, prefill_s, pairs, keys, _ = self.attention(plan)
        num_seqs, num_tokens = plan.num_seqs, plan.num_tokens
        seconds = self.state_s(num_seqs, num_tokens) + prefill_s + decode_s
        kv_bytes = (
            keys + num_tokens * self.num_attention_layers
        ) * self.kv_layer_bytes + 2 * num_seqs * self.state_bytes_per_seq
        return seconds, pairs, kv_bytes

    def state_s(self, num_seqs: int, num_tokens: int) -> float:
        """The state layers' kernels: the slower of their state traffic and their FLOPs."""
        rw = num_seqs * self.state_rw_s_per_seq
        compute = num_tokens * self.state_token_s
        return rw if rw > compute else compute

"""Glossary entries of the summary keys only some runs have: speculative decoding's (a system
with [systems.speculative]: simulator/policies/speculative.py, execution/speculative.py), a
mixture of experts' expert reads (simulator/execution/moe_cost.py) and a hybrid model's KV layout
(sliding-window or state layers: simulator/kv/hybrid_layout.py). A fleet pools them over its
replicas (simulator/cluster/model_keys.py): the definitions below say how.

`reports.glossary` places them in its SUMMARY_METRICS where their groups belong.
"""

from __future__ import annotations

from pagesim.reports.glossary_types import SummaryMetric, Unit

SPEC_METRICS: tuple[SummaryMetric, ...] = (
    SummaryMetric(
        "spec_num_draft_tokens",
        "Draft tokens",
        Unit.COUNT,
        "Speculative decoding",
        "Draft tokens scheduled for verification (k per decoding sequence per step, fewer where "
        "the token budget or the model's maximum length trims them).",
    ),
    SummaryMetric(
        "spec_num_accepted_tokens",
        "Accepted draft tokens",
        Unit.COUNT,
        "Speculative decoding",
        "Draft tokens the verifications accepted (counted before a request's last step trims "
        "what exceeds its output length, as vLLM counts them).",
    ),
    SummaryMetric(
        "spec_acceptance_rate",
        "Draft acceptance rate",
        Unit.SHARE,
        "Speculative decoding",
        "Accepted draft tokens / draft tokens (vLLM's draft acceptance rate). A fleet's: over "
        "all replicas' tokens, not a mean of the replicas' rates.",
    ),
    SummaryMetric(
        "spec_mean_accepted_tokens",
        "Accepted drafts per verification",
        Unit.TOKENS,
        "Speculative decoding",
        "Accepted draft tokens / verifications (sequence-steps that verified a draft).",
    ),
    SummaryMetric(
        "spec_mean_acceptance_length",
        "Tokens per verification",
        Unit.TOKENS,
        "Speculative decoding",
        "1 + accepted drafts per verification: the tokens one decode step yields per sequence "
        "on average (vLLM's mean acceptance length).",
    ),
    SummaryMetric(
        "spec_draft_s",
        "Draft time",
        Unit.SECONDS,
        "Speculative decoding",
        "Simulated time spent proposing drafts (draft model, EAGLE head or MTP layer on the GPU, "
        "its first pass also over the step's prompt chunks; n-gram on the host, an estimate), "
        "included in busy time.",
    ),
    SummaryMetric(
        "spec_draft_share",
        "Draft share of busy time",
        Unit.SHARE,
        "Speculative decoding",
        "Draft time / busy time.",
    ),
)

MOE_METRICS: tuple[SummaryMetric, ...] = (
    SummaryMetric(
        "moe_experts_touched_per_layer",
        "Experts read per MoE layer",
        Unit.COUNT,
        "Mixture of experts",
        "Routed experts one MoE layer reads in a step, E × (1 − (1 − k/E)^T) for T tokens under "
        "uniform routing (the expected distinct experts; routing_skew makes it fewer), averaged "
        "over the priced steps (a fleet: over all replicas' steps). With expert parallelism, "
        "over the whole group.",
    ),
    SummaryMetric(
        "moe_expert_bytes_per_step",
        "Expert weight bytes per step",
        Unit.BYTES,
        "Mixture of experts",
        "Routed-expert weight bytes one GPU reads in a step, all MoE layers, averaged over the "
        "priced steps (a fleet: over all replicas' steps).",
    ),
)

HYBRID_METRICS: tuple[SummaryMetric, ...] = (
    SummaryMetric(
        "kv_layer_groups",
        "KV layer groups",
        Unit.COUNT,
        "Hybrid KV cache",
        "A model with sliding-window or state layers, the hybrid KV-cache manager on: its layer "
        "groups (vLLM V1's), each with its own block table per request over one pool; a block "
        "is block size tokens of one group's layers.",
    ),
    SummaryMetric(
        "kv_layers_per_group",
        "Layers per group",
        Unit.COUNT,
        "Hybrid KV cache",
        "Layers in each group: the fewest of any kind, or the most when within 1.25× (vLLM).",
    ),
    SummaryMetric(
        "kv_padding_layers",
        "Padding layers",
        Unit.COUNT,
        "Hybrid KV cache",
        "Empty layers filling a kind's last group: their share of every block of that kind "
        "is memory vLLM sets aside and never uses.",
    ),
    SummaryMetric(
        "kv_window_freed_blocks",
        "Blocks freed out of the window",
        Unit.COUNT,
        "Hybrid KV cache",
        "Sliding-window groups' blocks freed as their tokens left the window, over the run: "
        "each one a block a layout of only full attention would have kept. Free memory, not "
        "waste.",
    ),
    SummaryMetric(
        "kv_window_freed_bytes",
        "Bytes freed out of the window",
        Unit.BYTES,
        "Hybrid KV cache",
        "The same in bytes (blocks × bytes per block).",
    ),
    SummaryMetric(
        "kv_state_bytes_per_seq",
        "State per request",
        Unit.BYTES,
        "Hybrid KV cache",
        "Bytes of fixed state (Mamba / linear attention) each running request holds: one "
        "block per state group, the state padded to the attention page as vLLM pads it; "
        "counted in the token states.",
    ),
)

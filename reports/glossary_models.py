"""Glossary entries of the summary keys only some runs have: speculative decoding's (a system
with [systems.speculative]: simulator/policies/speculative.py, execution/speculative.py), a
mixture of experts' expert reads (simulator/execution/moe_cost.py), a DP attention + expert-parallel
group's (simulator/cluster/dp_group.py) and a hybrid model's KV layout
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

WIDE_EP = "DP attention + expert parallelism"
WIDE_EP_METRICS: tuple[SummaryMetric, ...] = (
    SummaryMetric(
        "output_tok_s_per_gpu",
        "Output tok/s per GPU",
        Unit.TOK_PER_S,
        WIDE_EP,
        "Output tokens of every DP rank / run time / GPUs (DP size x TP size): the figure vLLM's "
        "wide-EP posts quote per GPU.",
    ),
    SummaryMetric(
        "dp_size",
        "DP ranks",
        Unit.COUNT,
        WIDE_EP,
        "Data-parallel ranks simulated, each with its own scheduler, KV cache and queue (the "
        "backend and EPLB setting are in the provenance).",
    ),
    SummaryMetric(
        "dp_group_steps",
        "Group steps",
        Unit.COUNT,
        WIDE_EP,
        "Steps of the lock-stepped group: one per MoE-synchronised step of all ranks.",
    ),
    SummaryMetric(
        "dp_dummy_steps",
        "Dummy steps",
        Unit.COUNT,
        WIDE_EP,
        "Rank-steps in which a rank with nothing to run executed a dummy batch so that the "
        "others' MoE collectives could proceed (vLLM's execute_dummy_batch), summed over ranks.",
    ),
    SummaryMetric(
        "dp_sync_wait_share",
        "Sync wait share",
        Unit.SHARE,
        WIDE_EP,
        "Time ranks spent waiting for the group's slowest rank / (run time x DP size).",
    ),
    SummaryMetric(
        "all2all_s_per_step",
        "All-to-all per step",
        Unit.SECONDS,
        WIDE_EP,
        "Dispatch + combine time of all MoE layers in one group step, by the configured backend "
        "and link (simulator/execution/all_to_all.py), averaged over group steps.",
    ),
    SummaryMetric(
        "all2all_bytes_per_step",
        "All-to-all bytes per step",
        Unit.BYTES,
        WIDE_EP,
        "Bytes the busiest GPU sends in dispatch + combine over all MoE layers in one group "
        "step, averaged over group steps.",
    ),
    SummaryMetric(
        "moe_hot_share",
        "Hottest expert GPU's load",
        Unit.RATIO,
        WIDE_EP,
        "Expert tokens of the most loaded GPU / the mean GPU's, from the placement (EPLB on or "
        "off) of a Zipf routing skew: an estimate (simulator/execution/expert_load.py).",
    ),
    SummaryMetric(
        "moe_hot_excess_s_per_step",
        "Hot-expert excess per step",
        Unit.SECONDS,
        WIDE_EP,
        "Time the hottest expert GPU adds to a group step beyond the slowest rank's own expert "
        "work, averaged over group steps (an upper bound: priced at the compute peak).",
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

"""Glossary entries of a KV offload tier in CPU memory (simulator/policies/offload.py):
`reports.glossary` appends OFFLOAD_METRICS to its SUMMARY_METRICS."""

from __future__ import annotations

from pagesim.reports.glossary_types import SummaryMetric, Unit

OFFLOAD = "KV offload tier"
OFFLOAD_METRICS: tuple[SummaryMetric, ...] = (
    SummaryMetric(
        "offload_hit_rate",
        "CPU-tier hit rate",
        Unit.SHARE,
        OFFLOAD,
        "Prompt tokens loaded from the CPU tier / prompt tokens looked up, once per request's "
        "first admission (the same denominator as the prefix-cache hit rate: the two add up to "
        "the share not recomputed).",
    ),
    SummaryMetric(
        "offload_cpu_blocks", "CPU-tier blocks", Unit.COUNT, OFFLOAD, "KV blocks the tier holds."
    ),
    SummaryMetric(
        "offload_loaded_blocks",
        "Blocks loaded",
        Unit.COUNT,
        OFFLOAD,
        "KV blocks copied from the tier to the GPU.",
    ),
    SummaryMetric(
        "offload_stored_blocks",
        "Blocks stored",
        Unit.COUNT,
        OFFLOAD,
        "KV blocks written to the tier (as their steps computed them; one it held already is "
        "not written again).",
    ),
    SummaryMetric(
        "offload_evicted_blocks",
        "Blocks evicted",
        Unit.COUNT,
        OFFLOAD,
        "Blocks the tier dropped, least recently used first, to make room.",
    ),
    SummaryMetric(
        "offload_refused_blocks",
        "Stores refused",
        Unit.COUNT,
        OFFLOAD,
        "Blocks not stored: the tier had no room that was not being stored or loaded.",
    ),
    SummaryMetric(
        "offload_load_wait_mean_s",
        "Load wait",
        Unit.SECONDS,
        OFFLOAD,
        "Mean time from a request's tier hit to its blocks on the GPU (queueing on the link "
        "included): the wait its first step adds to its TTFT.",
    ),
    SummaryMetric(
        "offload_store_wait_mean_s",
        "Store wait",
        Unit.SECONDS,
        OFFLOAD,
        "Mean time from a step's end to its blocks being stored (queueing included): until "
        "then they cannot be hit.",
    ),
    SummaryMetric(
        "offload_load_link_demand",
        "Load link demand",
        Unit.RATIO,
        OFFLOAD,
        "Transfer time the loads asked of the host-to-GPU link / the run's duration: above 1 "
        "the link cannot keep up (saturated) and loads queue without bound.",
    ),
    SummaryMetric(
        "offload_store_link_demand",
        "Store link demand",
        Unit.RATIO,
        OFFLOAD,
        "The same for the stores on the GPU-to-host link: above 1 stores fall ever further "
        "behind and their blocks come too late to be hit.",
    ),
)

"""Glossary entries of the KV-memory figures of a summary (`reports.glossary` lists them among
its SUMMARY_METRICS), and the summary keys behind the memory-waste bars (reports/memory_plots.py).

Definitions follow docs/design.md ("Memory" and "Metrics": memory waste and sharing).
"""

from __future__ import annotations

from pagesim.reports.glossary_types import SummaryMetric, Unit
from pagesim.simulator.metrics.result import KV_CATEGORIES

_SHARE_OF_KV = "time-weighted average (over busy time after warm-up) share of the KV-cache capacity"

KV_MEMORY_METRICS: tuple[SummaryMetric, ...] = (
    SummaryMetric(
        "kv_token_share",
        "KV: token states",
        Unit.SHARE,
        "KV memory",
        f"{_SHARE_OF_KV} holding KV of tokens already computed.",
    ),
    SummaryMetric(
        "kv_reserved_share",
        "KV: reservation",
        Unit.SHARE,
        "KV memory",
        f"{_SHARE_OF_KV} held for tokens a request will still produce.",
    ),
    SummaryMetric(
        "kv_internal_frag_share",
        "KV: internal fragmentation",
        Unit.SHARE,
        "KV memory",
        f"{_SHARE_OF_KV} held that its request will never use (over-reservation past the final "
        "length; the unused tail of the last block).",
    ),
    SummaryMetric(
        "kv_external_frag_share",
        "KV: external fragmentation",
        Unit.SHARE,
        "KV memory",
        f"{_SHARE_OF_KV} that is free but cannot serve the next waiting request because it is "
        "not contiguous, plus a buddy allocator's rounding of each region up to a power of two, "
        "as the vLLM paper counts it (contiguous allocators only).",
    ),
    SummaryMetric(
        "kv_free_share", "KV: free", Unit.SHARE, "KV memory", f"{_SHARE_OF_KV} that is free."
    ),
    SummaryMetric(
        "kv_waste_share",
        "KV: waste",
        Unit.SHARE,
        "KV memory",
        "Memory waste = reservation + internal fragmentation + external fragmentation shares "
        "(time-weighted; shared blocks count once).",
    ),
    SummaryMetric(
        "kv_waste_of_used_share",
        "KV: waste of used",
        Unit.SHARE,
        "KV memory",
        "Waste as a share of the KV memory not free: kv_waste_share / (1 − kv_free_share).",
    ),
    SummaryMetric(
        "peak_kv_used_share",
        "KV: peak used",
        Unit.SHARE,
        "KV memory",
        "Largest share of the KV capacity held by requests at any step.",
    ),
    SummaryMetric(
        "kv_saved_share",
        "KV: saved by sharing",
        Unit.SHARE,
        "KV memory",
        f"{_SHARE_OF_KV} that sharing saved: block copies that prefix-cache hits and forked "
        "sequences would have held without sharing (prefix + fork below).",
    ),
    SummaryMetric(
        "kv_prefix_saved_share",
        "KV: saved by prefix caching",
        Unit.SHARE,
        "KV memory",
        f"{_SHARE_OF_KV} saved by prefix-cache hits on blocks in use (requests sharing a "
        "prompt prefix hold its blocks once).",
    ),
    SummaryMetric(
        "kv_fork_saved_share",
        "KV: saved by forks",
        Unit.SHARE,
        "KV memory",
        f"{_SHARE_OF_KV} saved by forked sequences (parallel samples, beams) sharing their "
        "prompt and common history, copied on write.",
    ),
    SummaryMetric(
        "peak_kv_saved_share",
        "KV: peak saved by sharing",
        Unit.SHARE,
        "KV memory",
        "Largest share of the KV capacity that sharing saved at any step.",
    ),
    SummaryMetric(
        "kv_saved_of_unshared_share",
        "Memory saving by sharing",
        Unit.SHARE,
        "KV memory",
        "What sharing saved as a share of what the requests would have held without it "
        "(time-averaged saved / (used + saved)): the vLLM paper's 'memory saving' (figure 15).",
    ),
)

# Summary keys behind the memory-waste bars, in stacking order, with the step column each
# summarizes (so a missing summary key can fall back to a display average of the steps frame).
WASTE_SHARES: dict[str, str] = {
    "kv_token_share": "kv_token_slots",
    "kv_reserved_share": "kv_reserved_slots",
    "kv_internal_frag_share": "kv_internal_frag_slots",
    "kv_external_frag_share": "kv_external_frag_slots",
    "kv_free_share": "kv_free_slots",
}
assert set(WASTE_SHARES.values()) == set(KV_CATEGORIES)

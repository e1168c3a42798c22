"""[report]: the question a scenario asks, read into a `ReportConfig`.

    [report]
    key_metric = "slot_utilization"     # the summary key the first headline answers with
    metrics = ["ttft_p50_s"]            # the next headlines, in order (optional)
    compare = "rank" | "agreement"      # best to worst (default), or % apart from `reference`
    reference = "measured"              # agreement: the system the others are compared with

The report's headline logic reads these (reports.headlines); it holds no list of scenario names.
A metric must be one a headline can compare: HEADLINE_METRICS, each a summary key that the
reports' glossary defines (tests/reports/test_headlines.py keeps the two in step).
"""

from __future__ import annotations

from collections.abc import Sequence

from pagesim.simulator.core.config import Comparison, ReportConfig
from pagesim.simulator.core.errors import choices_text
from pagesim.simulator.scenario.table import Table, described, suggest

_LATENCIES = tuple(
    f"{stem}_{stat}_s"
    for stem in ("ttft", "tpot", "e2e", "normalized_latency")
    for stat in ("mean", "p50", "p90", "p99")
)
HEADLINE_METRICS: tuple[str, ...] = (
    "throughput_req_s",
    "throughput_tok_s",
    "goodput_req_s",
    *_LATENCIES,
    "kv_capacity_tokens",
    "kv_waste_share",
    "kv_internal_frag_share",
    "kv_external_frag_share",
    "kv_reserved_share",
    "peak_kv_used_share",
    "kv_saved_share",
    "kv_saved_of_unshared_share",
    "slot_utilization",
    "mfu",
    "mbu",
    "mean_batch_requests",
    "mean_batch_seqs",
    "num_preemptions",
    "num_swaps",
    "swap_time_s",
    "num_recomputed_tokens",
    "prefix_hit_rate",
    "spec_mean_acceptance_length",
    "spec_draft_share",
    "moe_experts_touched_per_layer",
    "moe_expert_bytes_per_step",
    "output_tok_s_per_gpu",  # a DP group (cluster/dp_group.py); systems on unlike GPU counts
    "dp_sync_wait_share",
    "all2all_s_per_step",
    "moe_hot_share",
    "goodput_req_s_per_gpu",
    "load_imbalance",
    "link_busy_share",
    "energy_per_output_token_j",  # simulator/metrics/energy.py
    "energy_per_request_j",
    "power_mean_w",
    "power_peak_w",
    "offload_hit_rate",  # simulator/policies/offload.py
    "offload_load_wait_mean_s",
    "offload_load_link_demand",
    "offload_store_link_demand",
)


def _metric(t: Table, name: str, value: object, index: int | None = None) -> str:
    key = t.path(name) + ("" if index is None else f"[{index}]")
    if not isinstance(value, str):
        t.ctx.fail(key, f"expected a summary key (a string), got {described(value)}")
    if value not in HEADLINE_METRICS:
        t.ctx.fail(
            key,
            f"unknown metric {value!r}{suggest(value, HEADLINE_METRICS)}; valid: "
            f"{choices_text(HEADLINE_METRICS)}",
        )
    return value


def read_report(t: Table, system_names: Sequence[str]) -> ReportConfig:
    """The [report] table (all keys optional; an absent table is the default ReportConfig)."""
    key_metric = _metric(t, "key_metric", t.data["key_metric"]) if t.has("key_metric") else None
    raw = t.data.get("metrics", [])
    if not isinstance(raw, list):
        t.fail("metrics", f"expected an array of summary keys, got {described(raw)}")
    metrics = tuple(_metric(t, "metrics", m, i) for i, m in enumerate(raw))
    if metrics and key_metric is None:
        t.fail("metrics", "needs key_metric: the first headline is the key metric's")
    repeated = [m for i, m in enumerate(metrics) if m == key_metric or m in metrics[:i]]
    if repeated:
        t.fail("metrics", f"{repeated[0]!r} is listed twice (key_metric counts)")
    compare = t.choice("compare", Comparison, Comparison.RANK)
    reference = t.text("reference", None)
    if reference is not None:
        if compare is not Comparison.AGREEMENT:
            t.fail("reference", 'applies to compare = "agreement" only')
        if reference not in system_names:
            t.fail(
                "reference",
                f"no system {reference!r}{suggest(reference, system_names)}; systems: "
                f"{choices_text(system_names)}",
            )
    if compare is Comparison.AGREEMENT and key_metric is None:
        t.fail("compare", '"agreement" needs key_metric: the metric the systems agree on')
    return ReportConfig(key_metric, metrics, compare, reference)

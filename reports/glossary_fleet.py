"""Glossary entries of a fleet's summary (simulator/cluster/result.py): the cluster's figures,
and each replica's, whose keys follow the pattern `replica_<i>_<figure>`.

`reports.glossary` appends FLEET_METRICS to its SUMMARY_METRICS; a `replica_<i>_*` key is
looked up with `replica_metric`, which gives it the pattern's label with the replica's number.
"""

from __future__ import annotations

import re

from pagesim.reports.glossary_energy import REPLICA_ENERGY_METRICS
from pagesim.reports.glossary_types import SummaryMetric, Unit

FLEET = "Fleet"
FLEET_METRICS: tuple[SummaryMetric, ...] = (
    SummaryMetric("num_replicas", "Replicas", Unit.COUNT, FLEET, "Replicas in the fleet."),
    SummaryMetric(
        "num_gpus",
        "GPUs",
        Unit.COUNT,
        FLEET,
        "GPUs in the fleet: the sum over replicas of their tensor-parallel degrees.",
    ),
    SummaryMetric(
        "goodput_req_s_per_gpu",
        "Goodput per GPU",
        Unit.REQ_PER_S,
        FLEET,
        "Goodput / GPUs in the fleet.",
    ),
    SummaryMetric(
        "load_imbalance",
        "Load imbalance",
        Unit.RATIO,
        FLEET,
        "Max / mean of the requests in flight across replicas, as the router counts them, "
        "sampled at every arrival and averaged over the samples with something in flight "
        "(1 = even; N = everything on one of N replicas).",
    ),
)

# The per-replica figures: `replica_<i>_<suffix>`.
REPLICA_PATTERN = re.compile(r"replica_(\d+)_(\w+)")
REPLICA_METRICS: tuple[SummaryMetric, ...] = (
    SummaryMetric(
        "replica_<i>_num_requests",
        "requests",
        Unit.COUNT,
        FLEET,
        "Requests the router sent to replica i.",
    ),
    SummaryMetric(
        "replica_<i>_throughput_tok_s",
        "throughput",
        Unit.TOK_PER_S,
        FLEET,
        "Output tokens per second of replica i, over the arrival window.",
    ),
    SummaryMetric(
        "replica_<i>_busy_share",
        "busy share",
        Unit.SHARE,
        FLEET,
        "Share of the run's time replica i spent executing steps.",
    ),
    SummaryMetric(
        "replica_<i>_kv_used_share",
        "KV used",
        Unit.SHARE,
        FLEET,
        "Time-averaged share of replica i's KV capacity in use (1 − its free share).",
    ),
    SummaryMetric(
        "replica_<i>_prefix_hit_rate",
        "prefix-cache hit rate",
        Unit.SHARE,
        FLEET,
        "Prompt tokens replica i served from its prefix cache / prompt tokens it looked up.",
    ),
    SummaryMetric(
        "replica_<i>_spec_acceptance_rate",
        "draft acceptance rate",
        Unit.SHARE,
        FLEET,
        "Accepted draft tokens / draft tokens on replica i (speculative decoding).",
    ),
    SummaryMetric(
        "replica_<i>_moe_experts_touched_per_layer",
        "experts read per MoE layer",
        Unit.COUNT,
        FLEET,
        "Routed experts one MoE layer of replica i reads in a step, averaged over its steps "
        "(a mixture of experts).",
    ),
)
_BY_SUFFIX = {
    m.key.removeprefix("replica_<i>_"): m for m in (*REPLICA_METRICS, *REPLICA_ENERGY_METRICS)
}


def replica_metric(key: str) -> SummaryMetric | None:
    """The glossary entry of a `replica_<i>_*` key, labelled with its replica; None otherwise."""
    match = REPLICA_PATTERN.fullmatch(key)
    pattern = _BY_SUFFIX.get(match.group(2)) if match else None
    if match is None or pattern is None:
        return None
    return SummaryMetric(
        key, f"Replica {match.group(1)}: {pattern.label}", pattern.unit, FLEET, pattern.definition
    )

"""Glossary entries of a disaggregated fleet (simulator/cluster/disagg_result.py): its summary
keys and the request-table columns it adds.

`reports.glossary` appends DISAGG_METRICS to its SUMMARY_METRICS and DISAGG_REQUEST_COLUMNS to
the per-request section of the glossary.
"""

from __future__ import annotations

from pagesim.reports.glossary_types import SummaryMetric, Unit

DISAGG = "Disaggregation"

_PARTS = (  # stem, label, what the part spans
    ("ttft_queue", "TTFT queueing", "arrival to admission on the prefill replica"),
    (
        "ttft_prefill",
        "TTFT prefill",
        "prefill admission to the prompt's last chunk computed (chunks and preemptions included)",
    ),
    (
        "ttft_transfer",
        "TTFT KV transfer",
        "prefill end to the KV landed on the decode replica (waits for decode memory and for "
        "the link's ports included)",
    ),
    (
        "transfer_wait",
        "Transfer wait",
        "prefill end to the transfer's start: the part of the KV transfer spent waiting for "
        "decode memory and for the link's ports",
    ),
    (
        "ttft_first_decode",
        "TTFT first decode",
        "KV landed to the first token (decode queueing, and the step recomputing the prompt's "
        "last token, which gives the first output token)",
    ),
)


def _part_metrics() -> list[SummaryMetric]:
    out = []
    for stem, name, span in _PARTS:
        for stat, word in (("mean", "Mean"), ("p99", "99th percentile")):
            out.append(
                SummaryMetric(
                    f"{stem}_{stat}_s",
                    f"{name} {stat}",
                    Unit.SECONDS,
                    DISAGG,
                    f"{word} over finished requests of the time from {span}. The means of "
                    "queueing, prefill, KV transfer and first decode add up to the TTFT mean.",
                )
            )
    return out


DISAGG_METRICS: tuple[SummaryMetric, ...] = (
    SummaryMetric(
        "num_prefill_replicas", "Prefill replicas", Unit.COUNT, DISAGG, "Replicas that prefill."
    ),
    SummaryMetric(
        "num_decode_replicas", "Decode replicas", Unit.COUNT, DISAGG, "Replicas that decode."
    ),
    SummaryMetric(
        "num_prefill_gpus",
        "Prefill GPUs",
        Unit.COUNT,
        DISAGG,
        "GPUs of the prefill replicas (the sum of their tensor-parallel degrees).",
    ),
    SummaryMetric(
        "num_decode_gpus",
        "Decode GPUs",
        Unit.COUNT,
        DISAGG,
        "GPUs of the decode replicas (the sum of their tensor-parallel degrees).",
    ),
    *_part_metrics(),
    SummaryMetric(
        "num_transfers",
        "KV transfers",
        Unit.COUNT,
        DISAGG,
        "Prompts whose KV crossed the link from a prefill to a decode replica.",
    ),
    SummaryMetric(
        "transfer_bytes_total",
        "Bytes transferred",
        Unit.BYTES,
        DISAGG,
        "KV bytes sent over the link: per prompt, tokens × decode TP × KV bytes per token "
        "per decode GPU (each decode GPU receives its KV-head shard of every layer).",
    ),
    SummaryMetric(
        "link_busy_share",
        "Link busy",
        Unit.SHARE,
        DISAGG,
        "Mean over the link's ports (one per replica) of the share of the run each spent "
        "carrying a transfer.",
    ),
    SummaryMetric(
        "link_busy_share_max",
        "Link busy, busiest port",
        Unit.SHARE,
        DISAGG,
        "The busiest port's share of the run spent carrying a transfer.",
    ),
)

DISAGG_REQUEST_COLUMNS: dict[str, str] = {
    "prefill_replica": "disaggregated fleets: the prefill replica (fleet index, prefill "
    "replicas first); `replica` is then the decode replica the prompt's KV landed on (empty "
    "for a request whose KV never left its prefill replica)",
    "ttft_queue_s": "disaggregated fleets: arrival -> admitted on the prefill replica, plus a "
    "served fleet's front end (s)",
    "ttft_prefill_s": "disaggregated fleets: prefill admission -> its last prompt chunk "
    "computed (s)",
    "ttft_transfer_s": "disaggregated fleets: prefill end -> KV landed on the decode replica, "
    "waits included (s)",
    "transfer_wait_s": "disaggregated fleets: of ttft_transfer_s, the wait for decode memory "
    "and for the link's ports (s)",
    "ttft_first_decode_s": "disaggregated fleets: KV landed -> first token (s); the four "
    "ttft_* parts add up to ttft_s",
    "transfer_start_s": "disaggregated fleets: the transfer's start on the link (s)",
    "transfer_end_s": "disaggregated fleets: the transfer's end (s)",
    "transfer_bytes": "disaggregated fleets: KV bytes the transfer carried",
}

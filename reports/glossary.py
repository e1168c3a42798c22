"""The metrics glossary: every summary key, request column and step column a report shows.

Definitions follow docs/design.md ("Metrics"); the request and step column texts come from the
contract in `simulator.metrics.result`, so the glossary cannot drift from the frames it describes.
Each summary key also carries a `Unit`, which the HTML table uses to format it for reading.
"""

from __future__ import annotations

from pagesim.reports.glossary_disagg import DISAGG_METRICS, DISAGG_REQUEST_COLUMNS
from pagesim.reports.glossary_energy import ENERGY_METRICS, REPLICA_ENERGY_METRICS
from pagesim.reports.glossary_fleet import FLEET_METRICS, REPLICA_METRICS, replica_metric
from pagesim.reports.glossary_memory import KV_MEMORY_METRICS
from pagesim.reports.glossary_models import (
    HYBRID_METRICS,
    MOE_METRICS,
    SPEC_METRICS,
    WIDE_EP_METRICS,
)
from pagesim.reports.glossary_offload import OFFLOAD_METRICS
from pagesim.reports.glossary_sweep import SWEEP_ENTRIES
from pagesim.reports.glossary_types import GlossaryEntry, SummaryMetric, Unit
from pagesim.simulator.metrics.result import REQUEST_COLUMNS, STEP_COLUMNS

__all__ = [
    "REPLICA_METRICS",
    "GlossaryEntry",
    "SummaryMetric",
    "Unit",
    "replica_metric",
]


_STATS = {"mean": "mean", "p50": "median (p50)", "p90": "90th percentile", "p99": "99th percentile"}

_LATENCIES: dict[str, tuple[str, Unit, str]] = {
    "ttft": (
        "TTFT",
        Unit.SECONDS,
        "time to first token = first token time − arrival time, over finished requests",
    ),
    "tpot": (
        "TPOT",
        Unit.SECONDS,
        "time per output token = (finish − first token) / (output tokens − 1), over finished "
        "requests with more than one output token",
    ),
    "e2e": ("E2E latency", Unit.SECONDS, "end-to-end latency = finish − arrival"),
    "normalized_latency": (
        "Normalized latency",
        Unit.SECONDS_PER_TOKEN,
        "E2E latency / output tokens (the vLLM paper's metric)",
    ),
}


def _latency_metrics() -> list[SummaryMetric]:
    metrics = []
    for stem, (label, unit, what) in _LATENCIES.items():
        for stat, stat_words in _STATS.items():
            metrics.append(
                SummaryMetric(
                    f"{stem}_{stat}_s",
                    f"{label} {stat}",
                    unit,
                    "Latency",
                    f"{stat_words} of {what}.",
                )
            )
    return metrics


SUMMARY_METRICS: tuple[SummaryMetric, ...] = (
    SummaryMetric("num_requests", "Requests", Unit.COUNT, "Requests", "Requests in the run."),
    SummaryMetric(
        "num_in_window",
        "Requests after warm-up",
        Unit.COUNT,
        "Requests",
        "Requests that arrived after the warm-up; latency statistics count these.",
    ),
    SummaryMetric(
        "num_finished", "Finished", Unit.COUNT, "Requests", "Requests that produced every token."
    ),
    SummaryMetric(
        "num_rejected",
        "Rejected",
        Unit.COUNT,
        "Requests",
        "Requests that could never be served (for example a prompt that cannot fit), each with "
        "a reason in requests.csv.",
    ),
    SummaryMetric(
        "num_unfinished",
        "Unfinished",
        Unit.COUNT,
        "Requests",
        "Requests still waiting or running when the run stopped (a time limit).",
    ),
    SummaryMetric(
        "duration_s", "Duration", Unit.SECONDS, "Requests", "Simulated time of the measured run."
    ),
    SummaryMetric(
        "throughput_req_s",
        "Throughput",
        Unit.REQ_PER_S,
        "Throughput",
        "Requests completed per second over the arrival window (first arrival after warm-up to "
        "the last arrival): the offered rate when the system keeps up, what it completed when "
        "it does not. A burst's window runs to the end of the run.",
    ),
    SummaryMetric(
        "throughput_tok_s",
        "Token throughput",
        Unit.TOK_PER_S,
        "Throughput",
        "Output tokens produced over the arrival window, per second of it: every token "
        "generated in it, requests still running included (one per sequence), so a saturated "
        "system reads its generation rate.",
    ),
    SummaryMetric(
        "goodput_req_s",
        "Goodput",
        Unit.REQ_PER_S,
        "Throughput",
        "Requests completed over the arrival window that met the scenario's SLO (TTFT and TPOT "
        "bounds), per second of it.",
    ),
    SummaryMetric(
        "drain_s",
        "Drain",
        Unit.SECONDS,
        "Throughput",
        "Simulated time from the last arrival to the end of the run (the backlog's drain).",
    ),
    SummaryMetric(
        "throughput_req_s_with_drain",
        "Throughput with drain",
        Unit.REQ_PER_S,
        "Throughput",
        "Requests completed per second from the first arrival after warm-up to the end of the "
        "run, the drain included.",
    ),
    SummaryMetric(
        "throughput_tok_s_with_drain",
        "Token throughput with drain",
        Unit.TOK_PER_S,
        "Throughput",
        "Output tokens of completed requests per second, the drain included.",
    ),
    SummaryMetric(
        "goodput_req_s_with_drain",
        "Goodput with drain",
        Unit.REQ_PER_S,
        "Throughput",
        "Requests that met the SLO per second, the drain included.",
    ),
    *_latency_metrics(),
    *KV_MEMORY_METRICS,
    SummaryMetric(
        "slot_utilization",
        "Slot utilization",
        Unit.SHARE,
        "Utilization",
        "Useful batch slots / the policy's own batch capacity (static: its batch size; the "
        "others: max_num_seqs), time-weighted after warm-up: how full its batches are (the "
        "textbook view of static batching's idle slots). Not comparable across policies, and "
        "not GPU utilization: that is MFU and MBU.",
    ),
    SummaryMetric(
        "mean_batch_requests",
        "Batch size (requests)",
        Unit.COUNT,
        "Utilization",
        "Requests computed per step (the batch that ran, finished ones included), time-weighted "
        "after warm-up.",
    ),
    SummaryMetric(
        "mean_batch_seqs",
        "Batch size (sequences)",
        Unit.COUNT,
        "Utilization",
        "Sequences computed per step, time-weighted after warm-up.",
    ),
    SummaryMetric(
        "mfu",
        "Compute utilization (MFU)",
        Unit.SHARE,
        "Utilization",
        "Model FLOPs / (peak FLOP/s × time).",
    ),
    SummaryMetric(
        "mbu",
        "Bandwidth utilization (MBU)",
        Unit.SHARE,
        "Utilization",
        "HBM bytes moved / (peak bandwidth × time).",
    ),
    SummaryMetric(
        "num_preemptions",
        "Preemptions",
        Unit.COUNT,
        "Preemption and caching",
        "Times a running request was preempted (by swap or by recompute).",
    ),
    SummaryMetric(
        "num_swaps",
        "Swaps",
        Unit.COUNT,
        "Preemption and caching",
        "Times a request was swapped out to CPU memory.",
    ),
    SummaryMetric(
        "swapped_blocks",
        "Swapped blocks",
        Unit.COUNT,
        "Preemption and caching",
        "KV blocks copied over the host link, both directions.",
    ),
    SummaryMetric(
        "swapped_bytes",
        "Swapped bytes",
        Unit.BYTES,
        "Preemption and caching",
        "KV bytes copied over the host link, both directions.",
    ),
    SummaryMetric(
        "swap_time_s",
        "Swap time",
        Unit.SECONDS,
        "Preemption and caching",
        "Simulated time spent on the host link swapping KV blocks.",
    ),
    SummaryMetric(
        "num_recomputed_tokens",
        "Recomputed tokens",
        Unit.COUNT,
        "Preemption and caching",
        "Tokens computed again after recompute preemptions.",
    ),
    SummaryMetric(
        "prefix_hit_rate",
        "Prefix-cache hit rate",
        Unit.SHARE,
        "Preemption and caching",
        "Prompt tokens served from the prefix cache / prompt tokens looked up, once per request's "
        "first admission.",
    ),
    SummaryMetric(
        "prefix_readmit_hit_rate",
        "Prefix-cache hit rate on re-admission",
        Unit.SHARE,
        "Preemption and caching",
        "The same over re-admissions after recompute preemption, which mostly find the "
        "request's own blocks (none when no request was recomputed).",
    ),
    SummaryMetric(
        "num_cow_copies",
        "Copy-on-write copies",
        Unit.COUNT,
        "Preemption and caching",
        "KV blocks copied before a write into a block shared by several sequences.",
    ),
    *SPEC_METRICS,
    *MOE_METRICS,
    *WIDE_EP_METRICS,
    SummaryMetric("num_steps", "Steps", Unit.COUNT, "Engine", "Engine iterations simulated."),
    SummaryMetric(
        "busy_s", "Busy time", Unit.SECONDS, "Engine", "Simulated time spent executing steps."
    ),
    SummaryMetric(
        "num_kv_blocks", "KV blocks", Unit.COUNT, "Engine", "Physical KV blocks on the GPU."
    ),
    SummaryMetric("block_size", "Block size", Unit.TOKENS, "Engine", "Tokens per KV block."),
    SummaryMetric(
        "kv_capacity_tokens",
        "KV capacity",
        Unit.TOKENS,
        "Engine",
        "Tokens of KV the GPU can hold (blocks × block size, or the contiguous pool). For a "
        "model laid out in layer groups (sliding-window or state layers, the hybrid KV-cache "
        "manager on), token slots of its groups' blocks: a sequence's token takes one in each "
        "group that keeps it.",
    ),
    *HYBRID_METRICS,
    *ENERGY_METRICS,
    *OFFLOAD_METRICS,
    *DISAGG_METRICS,  # before the fleet's, whose replica rows close the summary table
    *FLEET_METRICS,
)

SUMMARY_BY_KEY: dict[str, SummaryMetric] = {m.key: m for m in SUMMARY_METRICS}


def glossary_sections() -> list[tuple[str, list[GlossaryEntry]]]:
    """(section title, entries) for the HTML glossary: summary metrics, then the two frames."""
    summary = [
        GlossaryEntry(m.key, f"{m.label}: {m.definition}")
        for m in (*SUMMARY_METRICS, *REPLICA_METRICS, *REPLICA_ENERGY_METRICS)
    ]
    columns = REQUEST_COLUMNS | DISAGG_REQUEST_COLUMNS
    requests = [GlossaryEntry(k, _sentence(v)) for k, v in columns.items()]
    steps = [GlossaryEntry(k, _sentence(v)) for k, v in STEP_COLUMNS.items()]
    return [
        ("Summary metrics (summary.csv, summary.json)", summary),
        ("Sweep points (sweep.csv, evaluations.csv): beyond the summary", list(SWEEP_ENTRIES)),
        ("Per-request columns (requests.csv)", requests),
        ("Per-step columns (steps.csv)", steps),
    ]


def _sentence(text: str) -> str:
    text = text.strip()
    return (text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")) if text else text

"""Records every step and every request of a run, then builds the RunResult and its summary.

Steps go into a bounded step log (simulator.metrics.step_log: `record_step` is its own), which
builds each step's row and keeps totals of every step: one tuple a step (or, from the decode fast
path, a run of pure decode steps at once, in closed form: simulator/fastpath/run_rows.py);
requests become compact rows as soon
as they are done (simulator.metrics.request_log). Memory thus grows with the per-request records
only, however long the run. Frames are built once at the end. Metric definitions: docs/design.md.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pagesim.simulator.core.catalog import GPUSpec
from pagesim.simulator.core.config import SLO
from pagesim.simulator.core.request import Request
from pagesim.simulator.core.scheduler import Scheduler
from pagesim.simulator.metrics.delivery import next_step_delivery
from pagesim.simulator.metrics.request_log import RequestLog
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.metrics.step_log import StepLog, StepTotals

PERCENTILES = (50, 90, 99)


class Recorder:
    def __init__(
        self,
        gpu: GPUSpec,
        slo: SLO,
        warmup_s: float,
        block_bytes: int,
        *,
        frontend_s: float = 0.0,
        delivers_late: bool = False,
        delivery_after_s: float | None = None,
    ) -> None:
        self._block_bytes = block_bytes
        # The client's view (execution/frontend.py): a served system's front end in TTFT and
        # E2E; under vLLM V0, tokens returned during the step after theirs (metrics/delivery.py:
        # `delivery_after_s` into it, or at its end when None).
        self.requests = RequestLog(slo, warmup_s, frontend_s)
        self._delivers_late = delivers_late
        self._delivery_after_s = delivery_after_s
        self.steps = StepLog(
            window_start_s=warmup_s,
            peak_flops=gpu.fp16_flops,
            bandwidth_bps=gpu.mem_bandwidth_bps,
        )
        # Each step the engine ran goes straight to the step log, which builds its row.
        self.record_step = self.steps.record_step
        # The scheduler's output-token count at the first in-window arrival and at the last
        # arrival: the tokens produced over the arrival window (None until seen). The replica
        # sets them as each request arrives (cluster/replica.py add_request).
        self.window_tokens: list[int | None] = [None, None]

    def add_request(self, request: Request) -> None:
        self.requests.add(request)

    def result(
        self,
        scenario: str,
        system: str,
        end_s: float,
        scheduler: Scheduler,
        provenance: dict[str, object],
    ) -> RunResult:
        steps = self.steps.frame()
        late = self._delivers_late
        requests = self.requests.frame(
            next_step_delivery(steps, self._delivery_after_s) if late else None
        )
        start, last = self.window_tokens
        window_tokens = None if start is None or last is None else last - start
        summary = summarize(requests, self.steps.totals, self._block_bytes, end_s, window_tokens)
        summary["kv_capacity_tokens"] = scheduler.kv_capacity_slots
        hit_rate = scheduler.prefix_hit_rate()
        summary["prefix_hit_rate"] = None if hit_rate is None else float(hit_rate)
        readmit = scheduler.prefix_readmit_hit_rate()
        summary["prefix_readmit_hit_rate"] = None if readmit is None else float(readmit)
        hybrid = getattr(scheduler, "hybrid_summary", None)  # paged schedulers of hybrid models
        if hybrid is not None and (figures := hybrid()) is not None:
            summary.update(figures)
        provenance = provenance | {"step_table_row_steps": self.steps.row_steps}
        return RunResult(scenario, system, requests, steps, summary, provenance)


def _stats(prefix: str, values: np.ndarray) -> dict[str, float | None]:
    clean = values[~np.isnan(values)]
    if clean.size == 0:
        return {f"{prefix}_{stat}": None for stat in ("mean_s", *(f"p{p}_s" for p in PERCENTILES))}
    out: dict[str, float | None] = {f"{prefix}_mean_s": float(clean.mean())}
    for p, value in zip(PERCENTILES, np.percentile(clean, PERCENTILES), strict=True):
        out[f"{prefix}_p{p}_s"] = float(value)
    return out


def summarize(
    requests: pd.DataFrame,
    steps: StepTotals,
    block_bytes: int,
    end_s: float,
    window_tokens: int | None = None,
) -> dict[str, float | int | str | None]:
    """Scalars of a run that ended at `end_s`. Latency statistics and rates over finished requests
    that arrived after warm-up; time averages (memory shares, utilizations) weighted by step
    duration over busy time, from the totals of every step."""
    # Masks and single columns, not filtered copies of the frame: a long run has a million rows.
    status = requests["status"].to_numpy()
    window = requests["in_window"].to_numpy(dtype=bool)
    finished = window & (status == "finished")
    summary: dict[str, float | int | str | None] = {
        "num_requests": len(requests),
        "num_finished": int((status == "finished").sum()),
        "num_rejected": int((status == "rejected").sum()),
        "num_unfinished": int((status == "unfinished").sum()),
        "num_in_window": int(window.sum()),
    }
    for name, column in (
        ("ttft", "ttft_s"),
        ("tpot", "tpot_s"),
        ("e2e", "e2e_s"),
        ("normalized_latency", "normalized_latency_s"),
    ):
        summary |= _stats(name, requests[column].to_numpy(dtype=float)[finished])
    busy_s = steps.busy_s
    summary["num_steps"] = steps.num_steps
    summary["busy_s"] = busy_s
    shares = {
        "kv_token_share": "kv_token_slots",
        "kv_reserved_share": "kv_reserved_slots",
        "kv_internal_frag_share": "kv_internal_frag_slots",
        "kv_external_frag_share": "kv_external_frag_slots",
        "kv_free_share": "kv_free_slots",
    }
    total_slots = steps.total_kv_slots
    if total_slots:
        kv = {key: steps.time_average(column) / total_slots for key, column in shares.items()}
        summary |= kv
        summary["peak_kv_used_share"] = steps.peak_kv_used_slots / total_slots
        held = kv["kv_reserved_share"] + kv["kv_internal_frag_share"]
        summary["kv_waste_share"] = waste = held + kv["kv_external_frag_share"]
        used_share = 1.0 - kv["kv_free_share"]
        summary["kv_waste_of_used_share"] = waste / used_share if used_share > 0 else 0.0
    else:
        summary |= dict.fromkeys(shares)
        summary["peak_kv_used_share"] = summary["kv_waste_share"] = None
        summary["kv_waste_of_used_share"] = None
    _add_sharing(summary, steps)
    has_window = steps.window_steps > 0
    for key in ("slot_utilization", "mfu", "mbu"):
        summary[key] = steps.time_average(key) if has_window else None
    # The batch that ran, time-averaged over busy time after warm-up: requests computed in a
    # step, finished ones included (not the queue left after it).
    summary["mean_batch_requests"] = (
        steps.time_average("num_batch_requests") if has_window else None
    )
    summary["mean_batch_seqs"] = steps.time_average("num_seqs") if has_window else None
    summary["num_preemptions"] = int(requests["num_preemptions"].sum())
    summary["num_swaps"] = int(requests["num_swaps"].sum())
    summary["swapped_blocks"] = steps.num_swapped_blocks
    summary["swapped_bytes"] = float(steps.num_swapped_blocks) * block_bytes
    summary["swap_time_s"] = steps.swap_s
    summary["num_recomputed_tokens"] = int(requests["num_recomputed_tokens"].sum())
    summary["num_cow_copies"] = steps.num_cow_copies
    summary["duration_s"] = end_s
    _add_rates(summary, requests, window, finished, end_s, window_tokens)
    return summary


def _add_sharing(summary: dict[str, float | int | str | None], steps: StepTotals) -> None:
    """Memory sharing saved (docs/design.md: shared blocks count once, so what they would have taken
    unshared is the saving): time-averaged shares of the KV capacity by cause, the peak, and
    the saving as a share of what the requests would have held without sharing."""
    total_slots = steps.total_kv_slots
    keys = (
        "kv_prefix_saved_share",
        "kv_fork_saved_share",
        "kv_saved_share",
        "peak_kv_saved_share",
        "kv_saved_of_unshared_share",
    )
    if not total_slots:
        summary.update(dict.fromkeys(keys))
        return
    prefix = steps.time_average("kv_prefix_saved_slots")
    fork = steps.time_average("kv_fork_saved_slots")
    used = sum(
        steps.time_average(c)
        for c in ("kv_token_slots", "kv_reserved_slots", "kv_internal_frag_slots")
    )
    summary["kv_prefix_saved_share"] = prefix / total_slots
    summary["kv_fork_saved_share"] = fork / total_slots
    summary["kv_saved_share"] = (prefix + fork) / total_slots
    summary["peak_kv_saved_share"] = steps.peak_kv_saved_slots / total_slots
    unshared = used + prefix + fork
    summary["kv_saved_of_unshared_share"] = (prefix + fork) / unshared if unshared > 0 else 0.0


def _add_rates(
    summary: dict[str, float | int | str | None],
    requests: pd.DataFrame,
    window: np.ndarray,
    finished: np.ndarray,
    end_s: float,
    window_tokens: int | None = None,
) -> None:
    """Throughput and goodput per second over the arrival window (`window` and `finished` are
    masks of the requests).

    The arrival window runs from the first in-window arrival to the last arrival. Request rates
    count the requests finished within it, so a system that keeps up reads the offered rate and
    one that does not reads what it completed. The token rate counts the output tokens produced
    within it (`window_tokens`, from the scheduler's count at both edges), requests still
    running included: a saturated system reads its decode rate, not only the tokens of the
    requests that happened to finish. The drain after the last arrival is reported apart
    (`drain_s`, and the rates from the window's start to the end of the run, `*_with_drain`,
    which count every request finished after the window opened). A burst (every request at one
    instant) has no window: its rates run to the end of the run.
    """
    arrivals = requests["arrival_s"].to_numpy(dtype=float)
    start = float(arrivals[window].min()) if window.any() else 0.0
    last = float(arrivals.max()) if len(arrivals) else 0.0
    whole = end_s - start
    span = last - start
    finish = requests["finish_s"].to_numpy(dtype=float)
    after_start = finished & (finish >= start)
    in_span = after_start & (finish <= last) if span > 0 else after_start
    lengths = requests["num_output_tokens"].to_numpy()
    tokens = float(lengths[in_span].sum())
    if span > 0 and window_tokens is not None:
        tokens = float(window_tokens)
    if span <= 0:
        span = whole
    meets = requests["meets_slo"].to_numpy(dtype=bool)
    rows = (
        ("", in_span, span, tokens),
        ("_with_drain", after_start, whole, float(lengths[after_start].sum())),
    )
    for suffix, mask, length, num_tokens in rows:
        ok = length > 0
        summary[f"throughput_req_s{suffix}"] = int(mask.sum()) / length if ok else None
        summary[f"throughput_tok_s{suffix}"] = num_tokens / length if ok else None
        summary[f"goodput_req_s{suffix}"] = int((meets & mask).sum()) / length if ok else None
    summary["drain_s"] = max(0.0, end_s - last)

"""Records every step and every request of a run, then builds the RunResult and its summary.

Per-step values go into plain column lists (one append per column per step, no per-step objects
or DataFrame work); frames are built once at the end. Metric definitions are DESIGN.md's.
"""

from __future__ import annotations

from array import array
from operator import itemgetter

import numpy as np
import pandas as pd

from simulator.catalog import GPUSpec
from simulator.config import SLO
from simulator.plan import StepCost, StepPlan
from simulator.request import Request, RequestStatus
from simulator.result import REQUEST_COLUMNS, STEP_COLUMNS, RunResult
from simulator.scheduler import Scheduler

PERCENTILES = (50, 90, 99)
# Step columns holding seconds or shares (float64 in the frame); the others are counts (int64).
_FLOAT_COLUMNS = frozenset(
    ("start_s", "duration_s", "compute_s", "swap_s", "slot_utilization", "mfu", "mbu")
)
_FLOAT_NAMES = tuple(name for name in STEP_COLUMNS if name in _FLOAT_COLUMNS)
_INT_NAMES = tuple(name for name in STEP_COLUMNS if name not in _FLOAT_COLUMNS)
# A step's values (in STEP_COLUMNS order) split into its floats and its counts, in C.
_FLOATS_OF = itemgetter(*(i for i, name in enumerate(STEP_COLUMNS) if name in _FLOAT_COLUMNS))
_INTS_OF = itemgetter(*(i for i, name in enumerate(STEP_COLUMNS) if name not in _FLOAT_COLUMNS))


class Recorder:
    def __init__(self, gpu: GPUSpec, slo: SLO, warmup_s: float, block_bytes: int) -> None:
        self._gpu = gpu
        self._slo = slo
        self._warmup_s = warmup_s
        self._block_bytes = block_bytes
        self.requests: list[Request] = []
        # Typed buffers, 8 bytes a value: a list of Python numbers costs ~4x that, which adds up
        # to gigabytes over the millions of steps of a long run. Row-major, one buffer per type,
        # so a step is two C-level extends rather than one append per column.
        self._floats = array("d")  # [num_steps, len(_FLOAT_NAMES)]
        self._ints = array("q")  # [num_steps, len(_INT_NAMES)]

    def add_request(self, request: Request) -> None:
        self.requests.append(request)

    def record_step(
        self, start_s: float, plan: StepPlan, cost: StepCost, scheduler: Scheduler
    ) -> None:
        duration = cost.duration_s
        running, waiting, swapped = scheduler.queue_lengths()
        memory = scheduler.memory_breakdown()
        values = (
            start_s,
            duration,
            cost.compute_s,
            cost.swap_s,
            running,
            waiting,
            swapped,
            plan.num_seqs,
            plan.num_prefill_tokens,
            plan.num_decode_tokens,
            len(plan.preemptions),
            plan.num_swap_in_blocks,
            plan.num_swap_out_blocks,
            len(plan.copies),
            memory.token_slots,
            memory.reserved_slots,
            memory.internal_frag_slots,
            memory.external_frag_slots,
            memory.free_slots,
            scheduler.useful_slots(plan) / scheduler.batch_capacity,
            cost.flops / (self._gpu.fp16_flops * duration) if duration > 0 else 0.0,
            cost.bytes_moved / (self._gpu.mem_bandwidth_bps * duration) if duration > 0 else 0.0,
        )
        self._floats.extend(_FLOATS_OF(values))
        self._ints.extend(_INTS_OF(values))

    # -- results ---------------------------------------------------------------------------
    def request_frame(self) -> pd.DataFrame:
        rows = []
        slo = self._slo
        for r in self.requests:
            finished = r.status is RequestStatus.FINISHED
            status = "finished" if finished else "rejected" if r.is_done else "unfinished"
            ttft = (r.first_token_s - r.arrival_s) if r.first_token_s is not None else np.nan
            e2e = (r.finish_s - r.arrival_s) if finished and r.finish_s is not None else np.nan
            tpot = np.nan
            if finished and r.output_len > 1 and r.first_token_s is not None:
                tpot = (r.finish_s - r.first_token_s) / (r.output_len - 1)
            meets = finished and (
                (slo.ttft_s is None or ttft <= slo.ttft_s)
                and (slo.tpot_s is None or np.isnan(tpot) or tpot <= slo.tpot_s)
            )
            rows.append(
                (
                    r.request_id,
                    r.arrival_s,
                    np.nan if r.admitted_s is None else r.admitted_s,
                    np.nan if r.first_token_s is None else r.first_token_s,
                    np.nan if r.last_token_s is None else r.last_token_s,
                    np.nan if r.finish_s is None else r.finish_s,
                    r.prompt_len,
                    r.output_len,
                    r.num_seqs,
                    status,
                    r.rejection_reason or "",
                    r.num_preemptions,
                    r.num_swaps,
                    r.num_recomputed_tokens,
                    r.num_cached_tokens,
                    ttft,
                    tpot,
                    e2e,
                    e2e / r.output_len if finished else np.nan,
                    bool(meets),
                    r.arrival_s >= self._warmup_s,
                )
            )
        return pd.DataFrame.from_records(rows, columns=list(REQUEST_COLUMNS))

    def step_frame(self) -> pd.DataFrame:
        if not len(self._floats):
            return pd.DataFrame({name: [] for name in STEP_COLUMNS})  # no rows: pandas' dtypes
        floats = np.frombuffer(self._floats, dtype=np.float64).reshape(-1, len(_FLOAT_NAMES))
        ints = np.frombuffer(self._ints, dtype=np.int64).reshape(-1, len(_INT_NAMES))
        columns: dict[str, np.ndarray] = {name: floats[:, i] for i, name in enumerate(_FLOAT_NAMES)}
        columns |= {name: ints[:, i] for i, name in enumerate(_INT_NAMES)}
        # Each column copied out of the buffers: contiguous, writable, the recorder's own.
        return pd.DataFrame({name: np.array(columns[name]) for name in STEP_COLUMNS})

    def result(
        self,
        scenario: str,
        system: str,
        end_s: float,
        scheduler: Scheduler,
        provenance: dict[str, object],
    ) -> RunResult:
        requests = self.request_frame()
        steps = self.step_frame()
        summary = summarize(requests, steps, self._block_bytes, end_s)
        summary["kv_capacity_tokens"] = scheduler.kv_capacity_slots
        hit_rate = scheduler.prefix_hit_rate()
        summary["prefix_hit_rate"] = None if hit_rate is None else float(hit_rate)
        return RunResult(scenario, system, requests, steps, summary, provenance)


def _stats(prefix: str, values: pd.Series) -> dict[str, float | None]:
    clean = values.dropna().to_numpy(dtype=float)
    if clean.size == 0:
        return {f"{prefix}_mean_s": None} | {f"{prefix}_p{p}_s": None for p in PERCENTILES}
    out: dict[str, float | None] = {f"{prefix}_mean_s": float(clean.mean())}
    for p, value in zip(PERCENTILES, np.percentile(clean, PERCENTILES), strict=True):
        out[f"{prefix}_p{p}_s"] = float(value)
    return out


def summarize(
    requests: pd.DataFrame, steps: pd.DataFrame, block_bytes: int, end_s: float
) -> dict[str, float | int | str | None]:
    """Scalars of a run that ended at `end_s`. Latency statistics and rates over finished requests
    that arrived after warm-up; time averages (memory shares, utilizations) weighted by step
    duration over busy time."""
    window = requests[requests["in_window"]]
    finished = window[window["status"] == "finished"]
    summary: dict[str, float | int | str | None] = {
        "num_requests": len(requests),
        "num_finished": int((requests["status"] == "finished").sum()),
        "num_rejected": int((requests["status"] == "rejected").sum()),
        "num_unfinished": int((requests["status"] == "unfinished").sum()),
        "num_in_window": len(window),
    }
    for name, column in (
        ("ttft", "ttft_s"),
        ("tpot", "tpot_s"),
        ("e2e", "e2e_s"),
        ("normalized_latency", "normalized_latency_s"),
    ):
        summary |= _stats(name, finished[column])
    durations = steps["duration_s"].to_numpy(dtype=float)
    busy_s = float(durations.sum())
    summary["num_steps"] = len(steps)
    summary["busy_s"] = busy_s
    shares = {
        "kv_token_share": "kv_token_slots",
        "kv_reserved_share": "kv_reserved_slots",
        "kv_internal_frag_share": "kv_internal_frag_slots",
        "kv_external_frag_share": "kv_external_frag_slots",
        "kv_free_share": "kv_free_slots",
    }
    # The five parts sum to the KV capacity at every step (MemoryBreakdown): read it off the first.
    total_slots = float(steps[list(shares.values())].iloc[0].sum()) if len(steps) else None
    for key, column in shares.items():
        summary[key] = (
            _time_average(steps[column], durations, busy_s) / total_slots if total_slots else None
        )
    if total_slots:
        used = (
            steps["kv_token_slots"] + steps["kv_reserved_slots"] + steps["kv_internal_frag_slots"]
        )
        summary["peak_kv_used_share"] = float(used.max() / total_slots)
        held = summary["kv_reserved_share"] + summary["kv_internal_frag_share"]  # type: ignore[operator]
        summary["kv_waste_share"] = held + summary["kv_external_frag_share"]  # type: ignore[operator]
        used_share = 1.0 - summary["kv_free_share"]  # type: ignore[operator]
        summary["kv_waste_of_used_share"] = (
            summary["kv_waste_share"] / used_share if used_share > 0 else 0.0  # type: ignore[operator]
        )
    else:
        summary["peak_kv_used_share"] = summary["kv_waste_share"] = None
        summary["kv_waste_of_used_share"] = None
    for key in ("slot_utilization", "mfu", "mbu"):
        summary[key] = _time_average(steps[key], durations, busy_s) if busy_s else None
    summary["num_preemptions"] = int(requests["num_preemptions"].sum())
    summary["num_swaps"] = int(requests["num_swaps"].sum())
    swapped_blocks = steps["num_swap_in_blocks"].sum() + steps["num_swap_out_blocks"].sum()
    summary["swapped_blocks"] = int(swapped_blocks)
    summary["swapped_bytes"] = float(swapped_blocks) * block_bytes
    summary["swap_time_s"] = float(steps["swap_s"].sum())
    summary["num_recomputed_tokens"] = int(requests["num_recomputed_tokens"].sum())
    summary["num_cow_copies"] = int(steps["num_cow_copies"].sum())
    summary["duration_s"] = end_s
    _add_rates(summary, window, finished, end_s)
    return summary


def _time_average(values: pd.Series, durations: np.ndarray, busy_s: float) -> float:
    if busy_s <= 0:
        return float(values.mean()) if len(values) else 0.0
    return float(np.dot(values.to_numpy(dtype=float), durations) / busy_s)


def _add_rates(summary: dict, window: pd.DataFrame, finished: pd.DataFrame, end_s: float) -> None:
    """Throughput and goodput per second from the first in-window arrival to the end."""
    span = end_s - (window["arrival_s"].min() if len(window) else 0.0)
    if span <= 0:
        span = end_s
    output_tokens = float((finished["output_len"] * finished["num_seqs"]).sum())
    summary["throughput_req_s"] = len(finished) / span if span > 0 else None
    summary["throughput_tok_s"] = output_tokens / span if span > 0 else None
    summary["goodput_req_s"] = int(finished["meets_slo"].sum()) / span if span > 0 else None

"""Per-request records of a run: a compact row per request once it is done, and the request frame.

A `Request` object carries its lifecycle history and scheduler-facing state (hundreds of bytes);
holding every one until the end made a long run's memory grow with everything it ever served.
The log keeps requests only while they may still change; `settle` turns the finished and rejected
ones into a typed row (120 bytes) and lets the object go. The frame is built column by column at
the end, in arrival order, with the metric definitions of docs/design.md ("Metrics").
"""

from __future__ import annotations

from array import array
from collections.abc import Callable

import numpy as np
import pandas as pd

from pagesim.simulator.core.config import SLO
from pagesim.simulator.core.request import FINISHED, REJECTED, Request
from pagesim.simulator.metrics.result import REQUEST_COLUMNS

SETTLE_EVERY = 4096  # requests added between looks for done ones
_STATUS_NAMES = ("finished", "rejected", "unfinished")
_FINISHED, _REJECTED, _UNFINISHED = range(3)
_TIMES = ("arrival_s", "admitted_s", "first_token_s", "last_token_s", "finish_s")
_COUNTS = (
    "position",  # order of arrival in the run
    "request_id",
    "prompt_len",
    "output_len",
    "num_seqs",
    "num_output_tokens",
    "status",
    "num_preemptions",
    "num_swaps",
    "num_recomputed_tokens",
    "num_cached_tokens",
)


_NAN = np.nan  # (a Python float)


class RequestLog:
    def __init__(self, slo: SLO, warmup_s: float, frontend_s: float = 0.0) -> None:
        self._slo = slo
        self._warmup_s = warmup_s
        # A served system's time per request outside the engine (execution/frontend.py): in
        # TTFT and E2E as the client sees them.
        self._frontend_s = frontend_s
        self._live: list[tuple[int, Request]] = []  # (position, request) not yet settled
        self._num_added = 0
        # `add` settles when the live list reaches this: amortized O(1) a request, even when
        # most of the live ones are still in flight (then it waits twice as long).
        self._settle_at = SETTLE_EVERY
        self._times = array("d")  # [settled, len(_TIMES)]
        self._counts = array("q")  # [settled, len(_COUNTS)]
        self._reasons: dict[int, str] = {}  # position -> why it was rejected

    @property
    def frontend_s(self) -> float:
        return self._frontend_s

    def add(self, request: Request) -> None:
        self._live.append((self._num_added, request))
        self._num_added += 1
        if len(self._live) >= self._settle_at:
            self.settle()
            self._settle_at = max(SETTLE_EVERY, 2 * len(self._live))

    def settle(self, *, everything: bool = False) -> None:
        """Record the requests that are done (all, at the end of a run) and drop them."""
        live = []
        for position, request in self._live:
            if everything or request.is_done:
                self._record(position, request)
            else:
                live.append((position, request))
        self._live = live

    def _record(self, position: int, r: Request) -> None:
        if r.status is FINISHED:
            status = _FINISHED
        elif r.status is REJECTED:
            status = _REJECTED
            self._reasons[position] = r.rejection_reason or ""
        else:
            status = _UNFINISHED
        self._times.extend(  # a time not reached: NaN
            (
                r.arrival_s,
                _NAN if r.admitted_s is None else r.admitted_s,
                _NAN if r.first_token_s is None else r.first_token_s,
                _NAN if r.last_token_s is None else r.last_token_s,
                _NAN if r.finish_s is None else r.finish_s,
            )
        )
        self._counts.extend(
            (
                position,
                r.request_id,
                r.prompt_len,
                r.output_len,
                r.num_seqs,
                sum(r.sample_output_lens) if r.sample_output_lens else r.output_len * r.num_seqs,
                status,
                r.num_preemptions,
                r.num_swaps,
                r.num_recomputed_tokens,
                r.num_cached_tokens,
            )
        )

    def frame(self, deliver: Callable[[np.ndarray], np.ndarray] | None = None) -> pd.DataFrame:
        """REQUEST_COLUMNS, a row per request in arrival order (settles everything first).

        The timestamps are the engine's; the latencies are the client's: `deliver` maps a
        token's engine time to when it reaches the client (metrics/delivery.py; None: at once),
        and the front end's time is added to TTFT and E2E."""
        self.settle(everything=True)
        times = np.frombuffer(self._times, dtype=np.float64).reshape(-1, len(_TIMES))
        counts = np.frombuffer(self._counts, dtype=np.int64).reshape(-1, len(_COUNTS))
        # Rows settle roughly in arrival order; put them exactly in it.
        order = np.argsort(counts[:, 0], kind="stable")
        times, counts = times[order], counts[order]
        t = {name: times[:, i] for i, name in enumerate(_TIMES)}
        c = {name: counts[:, i] for i, name in enumerate(_COUNTS)}
        status = c["status"]
        finished = status == _FINISHED
        first, finish = t["first_token_s"], t["finish_s"]
        if deliver is not None:
            first, finish = deliver(first), deliver(finish)
        with np.errstate(invalid="ignore", divide="ignore"):
            ttft = first - t["arrival_s"] + self._frontend_s
            e2e = np.where(finished, finish - t["arrival_s"] + self._frontend_s, np.nan)
            has_tpot = finished & (c["output_len"] > 1) & ~np.isnan(first)
            tpot = np.where(has_tpot, (finish - first) / (c["output_len"] - 1), np.nan)
            normalized = np.where(finished, e2e / c["output_len"], np.nan)
        meets = finished.copy()
        if self._slo.ttft_s is not None:
            meets &= ttft <= self._slo.ttft_s
        if self._slo.tpot_s is not None:
            meets &= np.isnan(tpot) | (tpot <= self._slo.tpot_s)
        reasons = np.full(len(status), "", dtype=object)
        for position, reason in self._reasons.items():
            reasons[position] = reason
        columns = {
            "request_id": c["request_id"],
            **{name: t[name] for name in _TIMES},
            "prompt_len": c["prompt_len"],
            "output_len": c["output_len"],
            "num_seqs": c["num_seqs"],
            "num_output_tokens": c["num_output_tokens"],
            "status": np.array(_STATUS_NAMES, dtype=object)[status],
            "rejection_reason": reasons,
            "num_preemptions": c["num_preemptions"],
            "num_swaps": c["num_swaps"],
            "num_recomputed_tokens": c["num_recomputed_tokens"],
            "num_cached_tokens": c["num_cached_tokens"],
            "ttft_s": ttft,
            "tpot_s": tpot,
            "e2e_s": e2e,
            "normalized_latency_s": normalized,
            "meets_slo": meets,
            "in_window": t["arrival_s"] >= self._warmup_s,
        }
        # copy=False: the columns are this frame's own already (a million-row run's peak memory).
        return pd.DataFrame({name: columns[name] for name in REQUEST_COLUMNS}, copy=False)

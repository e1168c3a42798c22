"""The per-step table of a run, bounded in memory, and the step totals the summary needs.

A run of a million requests takes millions of steps; a row each would grow without bound (176 B a
step, gigabytes over a long trace). So steps are buffered raw in chunks; each chunk adds to
running totals (`StepTotals`, everything the summary reads) and is then stored as rows. Once the
stored rows pass `max_rows`, neighbouring rows merge in pairs and later chunks are stored
`row_steps` steps to a row: memory stays under ~`max_rows` rows however long the run. A merged
row is honest about what it holds: times and counts are sums over its steps, states and
utilizations their duration-weighted means, and `row_steps` says how many steps it stands for.
Runs under `max_rows` steps (every built-in scenario) keep one row per step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Protocol

import numpy as np
import pandas as pd

from pagesim.simulator.core.plan import StepCost, StepPlan
from pagesim.simulator.core.scheduler import Scheduler
from pagesim.simulator.metrics.result import KV_CATEGORIES, STEP_COLUMNS

MAX_ROWS = 1 << 17  # ~24 MB of rows; reports plot a few hundred buckets, so a row per step is rare
CHUNK_STEPS = 4096  # steps buffered raw before they are totalled and stored

_COL = {name: i for i, name in enumerate(STEP_COLUMNS)}
_NUM_COLUMNS = len(STEP_COLUMNS)
_NO_ROWS = np.empty((0, _NUM_COLUMNS))  # never written to: shared by every log
# How a column merges across steps. "start_s" keeps the first; these add up; the rest (queue
# lengths, KV slots, batch sizes, utilizations) are states or rates: duration-weighted means.
SUMMED_COLUMNS = frozenset(
    (
        "duration_s",
        "compute_s",
        "swap_s",
        "num_prefill_tokens",
        "num_decode_tokens",
        "num_preemptions",
        "num_swap_in_blocks",
        "num_swap_out_blocks",
        "num_cow_copies",
        "row_steps",
    )
)
_MEANS = tuple(
    i for i, name in enumerate(STEP_COLUMNS) if name not in SUMMED_COLUMNS and name != "start_s"
)
_SUMS = tuple(_COL[name] for name in STEP_COLUMNS if name in SUMMED_COLUMNS)
_FLOAT_COLUMNS = frozenset(
    ("start_s", "duration_s", "compute_s", "swap_s", "slot_utilization", "mfu", "mbu")
)
# Columns that are whole numbers in every row, merged or not (sums of counts).
_COUNT_COLUMNS = frozenset(name for name in SUMMED_COLUMNS if name not in _FLOAT_COLUMNS)
_KV = tuple(_COL[name] for name in KV_CATEGORIES)
_USED = tuple(
    _COL[name] for name in ("kv_token_slots", "kv_reserved_slots", "kv_internal_frag_slots")
)
_SAVED = tuple(_COL[name] for name in ("kv_prefix_saved_slots", "kv_fork_saved_slots"))
_AVERAGED = tuple(
    (name, _COL[name])
    for name in (
        *KV_CATEGORIES,
        "kv_prefix_saved_slots",
        "kv_fork_saved_slots",
        "slot_utilization",
        "mfu",
        "mbu",
        "num_seqs",
        "num_batch_requests",
    )
)


@dataclass
class StepTotals:
    """Totals over every step of a run, whether or not its rows merge: what `summarize` reads.

    Counts and times cover every step. Time averages (the KV categories, utilizations, batch
    sizes) cover the steps that start at or after `window_start_s` (the scenario's warm-up), as
    the latency metrics cover the requests arriving then: `weighted[c]` is the sum over those
    steps of column c x duration, `plain[c]` the unweighted sum, `window_busy_s` their time.
    """

    window_start_s: float = 0.0
    num_steps: int = 0
    busy_s: float = 0.0
    window_steps: int = 0
    window_busy_s: float = 0.0
    swap_s: float = 0.0
    num_swapped_blocks: int = 0
    num_cow_copies: int = 0
    total_kv_slots: float | None = None  # the five KV categories' sum (the same at every step)
    peak_kv_used_slots: float = 0.0
    peak_kv_saved_slots: float = 0.0  # prefix + fork saved slots, at the step they peaked
    # Over every step: sum of duration x compute share, MFU / (MFU + MBU), and its peak: what
    # a step's power draw follows (metrics/energy.py), exact however the rows merge.
    compute_share_s: float = 0.0
    peak_compute_share: float = 0.0
    weighted: dict[str, float] = field(default_factory=dict)
    plain: dict[str, float] = field(default_factory=dict)

    def add(self, steps: np.ndarray) -> None:
        """Add raw steps [num_steps, len(STEP_COLUMNS)]."""
        if not len(steps):
            return
        durations = steps[:, _COL["duration_s"]]
        if self.total_kv_slots is None:
            self.total_kv_slots = float(steps[0, list(_KV)].sum())
        self.num_steps += len(steps)
        self.busy_s += float(durations.sum())
        self.swap_s += float(steps[:, _COL["swap_s"]].sum())
        swaps = steps[:, _COL["num_swap_in_blocks"]] + steps[:, _COL["num_swap_out_blocks"]]
        self.num_swapped_blocks += int(swaps.sum())
        self.num_cow_copies += int(steps[:, _COL["num_cow_copies"]].sum())
        share = compute_shares(steps[:, _COL["mfu"]], steps[:, _COL["mbu"]])
        self.compute_share_s += float(share @ durations)
        self.peak_compute_share = max(self.peak_compute_share, float(share.max()))
        if self.window_start_s > 0:
            steps = steps[steps[:, _COL["start_s"]] >= self.window_start_s]
            if not len(steps):
                return
            durations = steps[:, _COL["duration_s"]]
        self.window_steps += len(steps)
        self.window_busy_s += float(durations.sum())
        used = steps[:, list(_USED)].sum(axis=1)
        self.peak_kv_used_slots = max(self.peak_kv_used_slots, float(used.max()))
        saved = steps[:, list(_SAVED)].sum(axis=1)
        self.peak_kv_saved_slots = max(self.peak_kv_saved_slots, float(saved.max()))
        for name, i in _AVERAGED:
            self.weighted[name] = self.weighted.get(name, 0.0) + float(steps[:, i] @ durations)
            self.plain[name] = self.plain.get(name, 0.0) + float(steps[:, i].sum())

    def time_average(self, column: str) -> float:
        """Duration-weighted mean of `column` over the window's busy time (plain mean if no time
        passed)."""
        if self.window_busy_s > 0:
            return self.weighted.get(column, 0.0) / self.window_busy_s
        if self.window_steps:
            return self.plain.get(column, 0.0) / self.window_steps
        return 0.0


def compute_shares(mfu: np.ndarray, mbu: np.ndarray) -> np.ndarray:
    """MFU / (MFU + MBU) per step, in [0, 1] (0 where neither was measured)."""
    total = mfu + mbu
    share = np.divide(mfu, total, out=np.zeros_like(total, dtype=float), where=total > 0)
    clipped: np.ndarray = np.clip(share, 0.0, 1.0)
    return clipped


def merge_rows(rows: np.ndarray, group: int) -> np.ndarray:
    """Rows [n, columns] merged `group` at a time (the last group may be short)."""
    n = len(rows)
    if group <= 1 or n == 0:
        return rows
    starts = np.arange(0, n, group)
    durations = rows[:, _COL["duration_s"]]
    spans = np.add.reduceat(durations, starts)
    counts = np.diff(np.append(starts, n))
    out = np.empty((len(starts), _NUM_COLUMNS))
    out[:, _COL["start_s"]] = rows[starts, _COL["start_s"]]
    sums = list(_SUMS)
    out[:, sums] = np.add.reduceat(rows[:, sums], starts, axis=0)
    means = list(_MEANS)
    weighted = np.add.reduceat(rows[:, means] * durations[:, None], starts, axis=0)
    plain = np.add.reduceat(rows[:, means], starts, axis=0) / counts[:, None]
    timed = spans > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        out[:, means] = np.where(timed[:, None], weighted / spans[:, None], plain)
    return out


class RowSource(Protocol):
    """Steps kept elsewhere in a compact form until the log totals them (the decode fast
    path's runs of pure steps, simulator/fastpath/run_rows.py)."""

    def take_rows(self) -> np.ndarray:
        """Every step it holds, as rows [steps, len(STEP_COLUMNS)] in order; it holds none
        after."""
        ...


class StepLog:
    """Record one step at a time (`record_step`, the engine's: its row built from the plan, its
    price and the scheduler after it; or `append`, one tuple) or steps a `RowSource` holds
    (`append_rows`: the fast path's runs, in closed form); read the table once at the end
    (`frame`: it hands the rows over, so a second call has none; `totals` stay).

    `peak_flops` and `bandwidth_bps` (the GPU's) are what a recorded step's MFU and MBU are
    shares of: `record_step` needs them."""

    def __init__(
        self,
        max_rows: int | None = None,
        chunk_steps: int | None = None,
        *,
        window_start_s: float = 0.0,
        peak_flops: float = 0.0,
        bandwidth_bps: float = 0.0,
    ) -> None:
        max_rows = MAX_ROWS if max_rows is None else max_rows
        chunk_steps = CHUNK_STEPS if chunk_steps is None else chunk_steps
        if max_rows < 2 or chunk_steps < 1:
            raise ValueError("a step log keeps at least 2 rows and buffers at least 1 step")
        self.max_rows = max_rows
        self._peak_flops = peak_flops
        self._bandwidth_bps = bandwidth_bps
        self.totals = StepTotals(window_start_s)
        self.row_steps = 1  # steps a stored row stands for (a power of two)
        # The steps not yet totalled: one tuple each (`append`), converted to floats a chunk at
        # a time, by NumPy in one call (a third of the time of extending an array("d") step by
        # step); steps a row source holds (`append_rows`: the fast path's runs, in closed form),
        # each span with its place among them, taken from it then too; and first `_ahead`, the
        # rows past the last whole chunk (a run may overrun a chunk: chunks are totalled exactly
        # `chunk_steps` steps at a time, whatever the runs, so that sums add up in one order).
        self._ahead = _NO_ROWS
        self._raw: list[Sequence[float]] = []
        self._source: RowSource | None = None  # one for the log's life (the replica's runs)
        self._run_spans: list[int] = []  # (steps buffered before, its steps), flat
        self._num_buffered = 0  # steps in all three
        self._chunk_steps = chunk_steps
        self._stored: list[np.ndarray] = []  # rows [n, len(STEP_COLUMNS)]
        self._carry = np.empty((0, _NUM_COLUMNS))  # raw steps short of a whole row
        self._num_stored = 0

    def record_step(
        self, start_s: float, plan: StepPlan, cost: StepCost, scheduler: Scheduler
    ) -> None:
        """The step that started at `start_s` ran `plan` at `cost`; `scheduler` has completed
        it (its queues and memory are as the step left them)."""
        duration = cost.duration_s
        running, waiting, swapped = scheduler.queue_lengths()
        token, reserved, internal, external, free, prefix, fork = scheduler.memory_row()
        num_seqs = plan.num_seqs
        self._raw.append(  # `append`, inlined (every planned step)
            (
                start_s,
                duration,
                cost.compute_s,
                cost.swap_s,
                running,
                waiting,
                swapped,
                num_seqs,
                plan.num_requests,
                plan.num_prefill_tokens,
                plan.num_decode_tokens,
                len(plan.preemptions),
                plan.num_swap_in_blocks,
                plan.num_swap_out_blocks,
                len(plan.copies),
                token,
                reserved,
                internal,
                external,
                free,
                prefix,
                fork,
                (num_seqs - plan.num_padding_seqs) / scheduler.batch_capacity,
                cost.flops / (self._peak_flops * duration) if duration > 0 else 0.0,
                cost.bytes_moved / (self._bandwidth_bps * duration) if duration > 0 else 0.0,
                1,  # row_steps
            )
        )
        self._num_buffered += 1
        if self._num_buffered >= self._chunk_steps:
            self._total(final=False)

    def append(self, values: Sequence[float]) -> None:
        """Add one step's values in STEP_COLUMNS order (`row_steps` last: 1)."""
        self._raw.append(values)
        self._num_buffered += 1
        if self._num_buffered >= self._chunk_steps:
            self._total(final=False)

    def append_rows(self, source: RowSource, num_steps: int) -> None:
        """Add the next `num_steps` steps that `source` holds, in order (taken when totalled)."""
        if not num_steps:
            return
        assert self._source is None or self._source is source, "one row source a log"
        self._source = source
        self._run_spans += (self._num_buffered, num_steps)
        self._num_buffered += num_steps
        if self._num_buffered >= self._chunk_steps:
            self._total(final=False)

    def flush(self) -> None:
        """Total the buffered steps and store them as rows, merging rows if over `max_rows`."""
        self._total(final=True)

    def _total(self, final: bool) -> None:
        """Total the buffered steps a chunk at a time: all of them if `final`, else the whole
        chunks (the rest waits in `_ahead`)."""
        steps = self._buffered()
        self._raw, self._run_spans = [], []  # (the source gave up its rows in `_buffered`)
        chunk = self._chunk_steps
        end = len(steps) if final else len(steps) // chunk * chunk
        for at in range(0, end, chunk):
            self._add(steps[at : at + chunk])
        # (a copy: a view would keep the whole buffer alive after the last chunk)
        self._ahead = steps[end:].copy() if end < len(steps) else _NO_ROWS
        self._num_buffered = len(self._ahead)

    def _buffered(self) -> np.ndarray:
        """The buffered steps' rows, in order."""
        raw, spans, ahead = self._raw, self._run_spans, self._ahead
        if raw and set(map(len, raw)) != {_NUM_COLUMNS}:  # fromiter would shift the columns
            raise ValueError(f"a step row must hold {_NUM_COLUMNS} values (STEP_COLUMNS)")
        plain = np.fromiter(
            chain.from_iterable(raw), dtype=np.float64, count=len(raw) * _NUM_COLUMNS
        ).reshape(-1, _NUM_COLUMNS)
        if not spans and not len(ahead):
            return plain
        steps = np.empty((self._num_buffered, _NUM_COLUMNS))
        steps[: len(ahead)] = ahead
        is_plain = np.ones(self._num_buffered, dtype=bool)
        is_plain[: len(ahead)] = False
        if spans:
            at, num_steps = np.fromiter(spans, np.int64, len(spans)).reshape(-1, 2).T
            edges = np.zeros(self._num_buffered + 1, dtype=np.int64)  # +1 where a span opens,
            edges[at] = 1  # -1 where it ends (where another may open: 0), in_run where > 0
            edges[at + num_steps] -= 1
            in_run = np.cumsum(edges[:-1]).astype(bool)
            assert self._source is not None
            steps[in_run] = self._source.take_rows()
            is_plain &= ~in_run
        steps[is_plain] = plain
        return steps

    def _add(self, steps: np.ndarray) -> None:
        """Total a chunk of steps and store them as rows, merging rows if over `max_rows`."""
        if not len(steps):
            return
        self.totals.add(steps)
        # Steps short of a whole row wait for the next chunk (rows may hold more than a chunk).
        pending = np.concatenate((self._carry, steps)) if len(self._carry) else steps
        num_whole = len(pending) // self.row_steps * self.row_steps
        self._carry = pending[num_whole:]
        if num_whole:
            self._store(merge_rows(pending[:num_whole], self.row_steps))

    def _store(self, rows: np.ndarray) -> None:
        self._stored.append(rows)
        self._num_stored += len(rows)
        while self._num_stored > self.max_rows:
            merged = merge_rows(np.concatenate(self._stored), 2)
            self._stored = [merged]
            self._num_stored = len(merged)
            self.row_steps *= 2

    def frame(self) -> pd.DataFrame:
        """The table: one row per step, or per `row_steps` steps once the log has merged rows."""
        self.flush()
        if len(self._carry):  # the run's last, partial row
            self._stored.append(merge_rows(self._carry, len(self._carry)))
            self._carry = self._carry[:0]
        if not self._stored:
            return pd.DataFrame({name: [] for name in STEP_COLUMNS})  # no rows: pandas' dtypes
        # The rows move into the table: the log keeps none of them (the table is read once, at
        # the run's end), and each column is gathered from the stored chunks without a second
        # copy of every row (a fleet holds one log per replica until its table is built).
        stored, self._stored, self._num_stored = self._stored, [], 0
        whole = self.row_steps == 1  # nothing merged: states are still whole numbers
        columns = {}
        for i, name in enumerate(STEP_COLUMNS):
            column = np.concatenate([rows[:, i] for rows in stored])
            if name in _COUNT_COLUMNS or (whole and name not in _FLOAT_COLUMNS):
                column = column.astype(np.int64)
            columns[name] = column
        # copy=False: the columns stay separate arrays, not copied into pandas' 2-D blocks (no
        # second copy of the table at its peak; a fleet then frees each as it merges them)
        return pd.DataFrame(columns, copy=False)

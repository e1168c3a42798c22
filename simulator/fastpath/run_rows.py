"""The step records of runs of pure decode steps (pure_runs.py), kept compact and expanded
with NumPy a chunk at a time.

A run's steps differ only in their start, duration and memory row, and the rows follow in closed
form (`RunMemory`), their FLOPs and bytes from their context tokens (decode_costs.py
`step_work`, which NumPy applies to a chunk's steps at once). Building each step's tuple in
Python cost more than pricing it; so `RunRecorder` keeps a `DecodeRun` in its `RunBuffer`,
tells the step log (metrics/step_log.py `StepLog.append_rows`) how many steps wait there, and
the log takes them (`RunBuffer.take_rows`) when it totals a chunk: every run of the chunk
turned into rows in one
pass of array operations. The rows are exactly `StepLog.record_step`'s for such steps: the
same values, the floats from the same operations in the same order
(tests/simulator/fastpath/test_run_rows.py; tests/simulator/cluster/test_windows.py compares
whole runs with the per-step loop's).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import NamedTuple

import numpy as np

from pagesim.simulator.core.catalog import GPUSpec
from pagesim.simulator.core.memory import MemoryRow
from pagesim.simulator.fastpath.decode_costs import DecodeTerms, step_cost, step_work
from pagesim.simulator.metrics.result import STEP_COLUMNS
from pagesim.simulator.metrics.step_log import StepLog

_NUM_COLUMNS = len(STEP_COLUMNS)
_COL = {name: i for i, name in enumerate(STEP_COLUMNS)}
_COUNT_COLUMNS = ("num_seqs", "num_batch_requests", "num_decode_tokens")  # one a sequence
_QUEUES = ("num_running", "num_waiting", "num_swapped")
_MEMORY = (
    "kv_token_slots",
    "kv_reserved_slots",
    "kv_internal_frag_slots",
    "kv_external_frag_slots",
    "kv_free_slots",
    "kv_prefix_saved_slots",
    "kv_fork_saved_slots",
)
# RunBuffer's counts a run (its `_counts`): steps, members, block size, the queues, the first
# row, the first step's context tokens, the queues after its last step; and its floats (its
# `_floats`): share, FLOP/s, B/s, `_WORK`'s terms
_WORK = (
    "base_flops",
    "pair_flops",
    "mla_pair_flops",
    "mla_upproject_flops",
    "base_bytes",
    "kv_bytes_per_token",
)
assert DecodeTerms._fields[-len(_WORK) :] == _WORK  # what `RunBuffer.add` copies
# a pure step's: no swap, no prefill, no preemption, no copy
_ZERO_COLUMNS = [
    _COL[name]
    for name in (
        "swap_s",
        "num_prefill_tokens",
        "num_preemptions",
        "num_swap_in_blocks",
        "num_swap_out_blocks",
        "num_cow_copies",
    )
]
_AT_FIRST = 3 + len(_QUEUES)
_AT_CONTEXT = _AT_FIRST + len(_MEMORY)
_AT_TAIL = _AT_CONTEXT + 1
_NUM_COUNTS = _AT_TAIL + len(_QUEUES)
_AT_WORK = 3
_NUM_FLOATS = _AT_WORK + len(_WORK)


class RunMemory(NamedTuple):
    """What a step record reads after each of a run's pure decode steps (the queue lengths,
    then the memory row), in closed form: decode_window.py `complete_pure_steps` gives it,
    `RunBuffer` expands it for a whole chunk of steps at once.

    The first `num_steps` steps (k = 0, 1, ...) keep `queues` (the last of them
    `tail_queues`: a request may have arrived while it ran), and their rows follow `first`
    (the row after step 0, but for the blocks taken with it: 0 in `takes[0]` if it was
    started before): by step k each of `num_members` sequences added k computed slots and
    used k reserved ones, and the steps' new blocks (`takes[j]` at step j, one per crossing
    member) moved block_size slots each from free to held, their caps' gain (`gains[j]`) to
    reserved and the rest to internal fragmentation. `last`: the queue
    lengths and row after one more, final step in which members finished (taken afresh).
    A tuple: one is made per catch-up, and a frozen dataclass's fields cost more to set.
    """

    num_steps: int
    num_members: int
    block_size: int
    queues: tuple[int, int, int]
    tail_queues: tuple[int, int, int]
    first: MemoryRow | None  # None when num_steps is 0
    gains: list[int]  # per step from the first (more entries are ignored)
    takes: list[int]
    last: tuple[int, ...] | None


# A RunMemory from one tuple of its fields in order, built in C (core/plan.py's `seq_work_of`
# says why): one a catch-up.
run_memory_of = partial(tuple.__new__, RunMemory)


class DecodeRun(NamedTuple):
    """`memory.num_steps` steps of a run: their starts and durations (more entries are
    ignored), `memory.num_members` lone sequences decoding in each, the first step reading
    `first_context` KV tokens (each later one `num_members` more) and priced with `terms`
    (decode_costs.py); `useful_share` is the slot utilization (sequences over the scheduler's
    batch capacity), `peak_flops` and `bandwidth` the GPU's (for MFU and MBU)."""

    starts: Sequence[float]
    durations: Sequence[float]
    first_context: int
    terms: DecodeTerms
    memory: RunMemory
    useful_share: float
    peak_flops: float
    bandwidth: float


class RunBuffer:
    """Runs waiting to be expanded, in flat lists (a run adds to each in C, and `stack` reads
    each in one call): its steps' starts, durations, cap gains and blocks taken, and
    `_NUM_COUNTS` counts and `_NUM_FLOATS` floats, flat, of what holds throughout it."""

    __slots__ = (
        "_counts",
        "_durations",
        "_gains",
        "_reals",
        "_starts",
        "_steps",
        "_takes",
        "num_steps",
    )

    def __init__(self, steps: StepLog | None = None) -> None:
        self._steps = steps  # the step log told of each run added (RunRecorder), if any
        self._clear()

    def _clear(self) -> None:
        self._starts: list[float] = []
        self._durations: list[float] = []
        self._gains: list[int] = []
        self._takes: list[int] = []
        # Per run, flat (lists of numbers, which NumPy reads far faster than tuples), its
        # counts: steps, members, block size, queue lengths (3), first row (7), the first step's
        # context tokens, the queue lengths after its last step; and its floats: share, FLOP/s,
        # B/s, the price terms of its FLOPs and bytes (`_WORK`). Two lists, not one: NumPy reads
        # an int into a float array through a float object made for it.
        self._counts: list[int] = []
        self._reals: list[float] = []
        self.num_steps = 0

    def add(self, run: DecodeRun) -> None:
        self.add_parts(*run)

    def add_parts(
        self,
        starts: Sequence[float],
        durations: Sequence[float],
        first_context: int,
        terms: DecodeTerms,
        memory: RunMemory,
        useful_share: float,
        peak_flops: float,
        bandwidth: float,
    ) -> None:
        """`add(DecodeRun(...))`, the run's fields as they are (the recorder's way: no tuple).
        With a step log, it is told of the run's steps, and of its last step's row where
        members finished in it (`memory.last`): the recorder's whole work, in one call."""
        n = memory.num_steps
        steps = self._steps
        if n:
            assert memory.first is not None
            self.num_steps += n
            # the first n of each (usually all of them), inlined: four calls a run cost more
            gains, takes = memory.gains, memory.takes
            self._starts += starts if len(starts) == n else starts[:n]
            self._durations += durations if len(durations) == n else durations[:n]
            self._gains += gains if len(gains) == n else gains[:n]
            self._takes += takes if len(takes) == n else takes[:n]
            self._counts += (
                n,
                memory.num_members,
                memory.block_size,
                *memory.queues,
                *memory.first,
                first_context,
                *memory.tail_queues,
            )
            self._reals += (useful_share, peak_flops, bandwidth, *terms[-len(_WORK) :])
            if steps is not None:
                steps.append_rows(self, n)
        if memory.last is None or steps is None:
            return
        # The run's last step, in which members finished: its row as `record_step` has it.
        num_seqs = memory.num_members
        cost = step_cost(terms, first_context + n * num_seqs, durations[n])
        compute_s, swap_s, _, flops, bytes_moved, duration = cost  # duration > 0: decodes compute
        state = memory.last
        steps.append(
            (
                starts[n],
                duration,
                compute_s,
                swap_s,
                *state[:3],  # queue lengths
                # sequences, requests (one sequence each), prefill tokens, decode tokens,
                # preemptions, blocks swapped in and out, copies
                *(num_seqs, num_seqs, 0, num_seqs, 0, 0, 0, 0),
                *state[3:],  # the memory row
                useful_share,
                flops / (peak_flops * duration),
                bytes_moved / (bandwidth * duration),
                1,
            )
        )

    def take_rows(self) -> np.ndarray:
        """The runs' rows (`stack`), the buffer emptied: what the step log takes."""
        rows = self.stack()
        self._clear()
        return rows

    def stack(self) -> np.ndarray:
        """The runs' rows, one per step, run after run: [steps, len(STEP_COLUMNS)]."""
        num_steps = self.num_steps
        out = np.empty((num_steps, _NUM_COLUMNS))  # every column written below
        if not num_steps:
            return out
        out[:, _ZERO_COLUMNS] = 0  # (zeroing the whole array cost a tenth of this function)
        per_run = _ints(self._counts).reshape(-1, _NUM_COUNTS)
        lengths = per_run[:, 0]
        of_run = np.repeat(np.arange(len(per_run)), lengths)  # each step's run
        first_step = np.cumsum(lengths) - lengths
        k = np.arange(num_steps) - first_step[of_run]  # step index within its run
        counts = np.repeat(per_run, lengths, axis=0)  # each step's run's counts
        reals = np.repeat(_floats(self._reals).reshape(-1, _NUM_FLOATS), lengths, axis=0)
        members = counts[:, 1]
        block_size = counts[:, 2]
        first = counts[:, _AT_FIRST:_AT_CONTEXT]  # (a view: `memory` below adds to it)
        share, peak_flops, bandwidth = reals[:, :_AT_WORK].T
        contexts = counts[:, _AT_CONTEXT] + k * members
        work = _WorkColumns(members, *reals[:, _AT_WORK:].T)
        flops, bytes_moved = step_work(work, contexts)

        starts = _floats(self._starts)
        duration = _floats(self._durations)  # all compute (decode_costs.py)

        # Each step's grows, summed from its run's start.
        gained = _sum_within(_ints(self._gains), first_step, of_run)
        taken = _sum_within(_ints(self._takes), first_step, of_run)
        taken_slots = taken * block_size
        grown = k * members

        out[:, _COL["start_s"]] = starts
        out[:, _COL["duration_s"]] = duration
        out[:, _COL["compute_s"]] = duration
        last_steps = first_step + lengths - 1
        for i, name in enumerate(_QUEUES):
            out[:, _COL[name]] = counts[:, 3 + i]
            out[last_steps, _COL[name]] = per_run[:, _AT_TAIL + i]
        for name in _COUNT_COLUMNS:
            out[:, _COL[name]] = members
        memory = first
        memory[:, 0] += grown  # computed
        memory[:, 1] += gained - grown  # reserved
        memory[:, 2] += taken_slots - gained  # internal fragmentation
        memory[:, 4] -= taken_slots  # free
        for i, name in enumerate(_MEMORY):
            out[:, _COL[name]] = memory[:, i]
        out[:, _COL["slot_utilization"]] = share
        out[:, _COL["mfu"]] = flops / (peak_flops * duration)
        out[:, _COL["mbu"]] = bytes_moved / (bandwidth * duration)
        out[:, _COL["row_steps"]] = 1
        return out


class RunRecorder(RunBuffer):
    """Records runs of pure decode steps into a replica's step log, as `StepLog.record_step`
    would record each step (a plan's counts: `memory.num_members` lone sequences decoding),
    in closed form: a `RunBuffer` that tells `steps` of each run it adds (`add_parts`, one
    call a run); `gpu`'s peaks (`peak_flops`, `bandwidth`, which a run passes on) give MFU
    and MBU. (tests/simulator/cluster/test_windows.py compares these rows with
    `record_step`'s.)"""

    __slots__ = ("bandwidth", "peak_flops")

    def __init__(self, steps: StepLog, gpu: GPUSpec) -> None:
        super().__init__(steps)
        self.peak_flops, self.bandwidth = gpu.fp16_flops, gpu.mem_bandwidth_bps


class _WorkColumns(NamedTuple):
    """`step_work`'s terms (decode_costs.py), one entry a step: each step's run's."""

    num_seqs: np.ndarray
    base_flops: np.ndarray
    pair_flops: np.ndarray
    mla_pair_flops: np.ndarray
    mla_upproject_flops: np.ndarray
    base_bytes: np.ndarray
    kv_bytes_per_token: np.ndarray


def _floats(values: list[float]) -> np.ndarray:
    """`values` as an array: `np.fromiter`, which takes a list of numbers in far fewer
    instructions than `np.array`, which first works out the list's shape and type."""
    return np.fromiter(values, dtype=np.float64, count=len(values))


def _ints(values: list[int]) -> np.ndarray:
    """`values` as an array (`_floats`'s way)."""
    return np.fromiter(values, dtype=np.int64, count=len(values))


def _sum_within(values: np.ndarray, first_step: np.ndarray, of_run: np.ndarray) -> np.ndarray:
    """Running sums of `values` that restart at each run's first step."""
    total: np.ndarray = np.cumsum(values)
    before = total[first_step] - values[first_step]  # the sum before each run
    within: np.ndarray = total - before[of_run]
    return within

"""The step records of runs of pure decode steps (cluster/pure_runs.py), kept compact and
expanded with NumPy a chunk at a time.

A run's steps differ only in their start, price and memory row, and the rows follow in closed
form (core/memory.py `RunMemory`). Building each step's tuple in Python cost more than pricing
it; the step log (step_log.py) keeps a `DecodeRun` instead and `stack` turns every run of a
chunk into rows in one pass of array operations. The rows are exactly `Recorder.record_step`'s
for such steps: the same values, the floats from the same operations in the same order
(tests/simulator/metrics/test_run_rows.py; tests/simulator/cluster/test_windows.py compares
whole runs with the per-step loop's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, islice

import numpy as np

from pagesim.simulator.core.memory import RunMemory
from pagesim.simulator.core.plan import StepCost
from pagesim.simulator.metrics.result import STEP_COLUMNS

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


@dataclass(frozen=True, slots=True)
class DecodeRun:
    """`memory.num_steps` steps of a run: their starts and prices, `memory.num_members` lone
    sequences decoding in each; `useful_share` is the slot utilization (sequences over the
    scheduler's batch capacity), `peak_flops` and `bandwidth` the GPU's (for MFU and MBU)."""

    starts: Sequence[float]
    costs: Sequence[StepCost]
    memory: RunMemory
    useful_share: float
    peak_flops: float
    bandwidth: float

    def __len__(self) -> int:
        return self.memory.num_steps


def stack(runs: Sequence[DecodeRun]) -> np.ndarray:
    """The runs' rows, one per step, run after run: [steps, len(STEP_COLUMNS)]."""
    runs = [run for run in runs if len(run)]
    lengths = np.fromiter(map(len, runs), dtype=np.int64, count=len(runs))
    num_steps = int(lengths.sum())
    out = np.zeros((num_steps, _NUM_COLUMNS))  # prefill tokens, preemptions, swaps, copies: 0
    if not num_steps:
        return out
    of_run = np.repeat(np.arange(len(runs)), lengths)  # each step's run
    first_step = np.cumsum(lengths) - lengths
    k = np.arange(num_steps) - first_step[of_run]  # step index within its run

    starts = _floats(chain.from_iterable(islice(r.starts, len(r)) for r in runs), num_steps)
    costs = _floats(
        chain.from_iterable(chain.from_iterable(islice(r.costs, len(r)) for r in runs)),
        num_steps * len(StepCost._fields),
    ).reshape(num_steps, len(StepCost._fields))
    compute_s, swap_s, copy_s, flops, bytes_moved = costs.T
    duration = compute_s + swap_s + copy_s  # StepCost.duration_s, in its order

    # Per run: members, block size, queue lengths, the first row, slot share, GPU figures.
    constants = np.array(
        [
            (
                r.memory.num_members,
                r.memory.block_size,
                *r.memory.queues,
                *(r.memory.first or (0,) * len(_MEMORY)),
                r.useful_share,
                r.peak_flops,
                r.bandwidth,
            )
            for r in runs
        ]
    )[of_run]
    members = constants[:, 0].astype(np.int64)
    block_size = constants[:, 1].astype(np.int64)
    first = constants[:, 5 : 5 + len(_MEMORY)].astype(np.int64)

    # Each step's grows, summed from its run's start: the first step's are in `first`.
    gains = _ints(chain.from_iterable(_after_first(r, r.memory.gains) for r in runs), num_steps)
    takes = _ints(chain.from_iterable(_after_first(r, r.memory.takes) for r in runs), num_steps)
    gained = _sum_within(gains, first_step, of_run)
    taken_slots = _sum_within(takes, first_step, of_run) * block_size
    grown = k * members

    out[:, _COL["start_s"]] = starts
    out[:, _COL["duration_s"]] = duration
    out[:, _COL["compute_s"]] = compute_s
    out[:, _COL["swap_s"]] = swap_s
    for i, name in enumerate(_QUEUES):
        out[:, _COL[name]] = constants[:, 2 + i]
    for name in _COUNT_COLUMNS:
        out[:, _COL[name]] = members
    memory = first.copy()
    memory[:, 0] += grown  # computed
    memory[:, 1] += gained - grown  # reserved
    memory[:, 2] += taken_slots - gained  # internal fragmentation
    memory[:, 4] -= taken_slots  # free
    for i, name in enumerate(_MEMORY):
        out[:, _COL[name]] = memory[:, i]
    out[:, _COL["slot_utilization"]] = constants[:, 5 + len(_MEMORY)]
    out[:, _COL["mfu"]] = flops / (constants[:, 6 + len(_MEMORY)] * duration)
    out[:, _COL["mbu"]] = bytes_moved / (constants[:, 7 + len(_MEMORY)] * duration)
    out[:, _COL["row_steps"]] = 1
    return out


def _after_first(run: DecodeRun, per_step: list[int]) -> chain[int]:
    """0 for the run's first step, then `per_step`'s entries for its later ones."""
    return chain((0,), islice(per_step, len(run) - 1))


def _sum_within(values: np.ndarray, first_step: np.ndarray, of_run: np.ndarray) -> np.ndarray:
    """Running sums of `values` that restart at each run's first step."""
    total: np.ndarray = np.cumsum(values)
    before = total[first_step] - values[first_step]  # the sum before each run
    within: np.ndarray = total - before[of_run]
    return within


def _floats(values: chain[float], count: int) -> np.ndarray:
    return np.fromiter(values, dtype=np.float64, count=count)


def _ints(values: chain[int], count: int) -> np.ndarray:
    return np.fromiter(values, dtype=np.int64, count=count)

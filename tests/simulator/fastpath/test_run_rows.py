"""Runs of pure decode steps recorded in closed form (fastpath/run_rows.py): the rows NumPy
expands must be the ones a step at a time would have made, to the last bit, and the step log
must total them in the same chunks whatever the runs' lengths (sums of floats depend on order).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.simulator.fastpath.decode_costs import DecodeTerms, step_cost
from pagesim.simulator.fastpath.run_rows import DecodeRun, RunBuffer, RunMemory
from pagesim.simulator.metrics.result import STEP_COLUMNS
from pagesim.simulator.metrics.step_log import StepLog

PEAK_FLOPS, BANDWIDTH = 312e12, 2.039e12  # A100's figures (any positive floats would do)


def _memory_rows(memory: RunMemory) -> list[tuple[int, ...]]:
    """Each step's queue lengths and memory row as RunMemory's docstring defines them, one step
    at a time (as the per-step loop's records have them)."""
    out: list[tuple[int, ...]] = []
    if memory.first is not None:
        row = list(memory.first)
        members, block_size = memory.num_members, memory.block_size
        for k in range(memory.num_steps):
            gained, taken = memory.gains[k], memory.takes[k]
            if k:
                row[0] += members  # computed
                row[1] -= members  # reserved, used
            row[1] += gained  # reserved
            row[2] += taken * block_size - gained  # internal fragmentation
            row[4] -= taken * block_size  # free
            queues = memory.tail_queues if k == memory.num_steps - 1 else memory.queues
            out.append(queues + tuple(row))
    if memory.last is not None:
        out.append(memory.last)
    return out


def stack(runs: list[DecodeRun]) -> np.ndarray:
    buffer = RunBuffer()
    for run in runs:
        buffer.add(run)
    return buffer.stack()


def _python_rows(run: DecodeRun) -> list[tuple[float, ...]]:
    """The rows as `StepLog.record_step` builds them, one step at a time, each step priced as
    one (`step_cost`)."""
    m = run.memory.num_members
    rows = []
    costs = [
        step_cost(run.terms, run.first_context + k * m, duration)
        for k, duration in enumerate(run.durations)
    ]
    for start, cost, state in zip(run.starts, costs, _memory_rows(run.memory), strict=False):
        duration = cost.compute_s + cost.swap_s + cost.copy_s
        rows.append(
            (
                start,
                duration,
                cost.compute_s,
                cost.swap_s,
                *state[:3],
                *(m, m, 0, m, 0, 0, 0, 0),
                *state[3:],
                run.useful_share,
                cost.flops / (run.peak_flops * duration),
                cost.bytes_moved / (run.bandwidth * duration),
                1,
            )
        )
    return rows


@st.composite
def runs(draw: st.DrawFn) -> DecodeRun:
    num_steps = draw(st.integers(0, 40))
    members = draw(st.integers(1, 300))
    block_size = draw(st.sampled_from([1, 16, 32]))
    first = tuple(draw(st.lists(st.integers(0, 10**9), min_size=7, max_size=7)))
    grows = st.lists(st.integers(0, 50), min_size=num_steps + 2, max_size=num_steps + 2)
    floats = st.floats(1e-6, 10.0, allow_nan=False)
    durations = [draw(floats) for _ in range(num_steps)]
    terms = _terms(draw, members)
    start = draw(st.floats(0, 1e5))
    starts = [start + i * 0.25 for i in range(num_steps)]
    queues = (members, draw(st.integers(0, 9)), 0)
    # a request may have arrived during the last step: it ended with one more waiting
    tail_queues = (members, queues[1] + draw(st.integers(0, 2)), 0)
    memory = RunMemory(
        num_steps,
        members,
        block_size,
        queues,
        tail_queues,
        first if num_steps else None,
        draw(grows),
        draw(grows),
        None,
    )
    first_context = draw(st.integers(members, 10**7))
    return DecodeRun(
        starts, durations, first_context, terms, memory, members / 256, PEAK_FLOPS, BANDWIDTH
    )


def _terms(draw: st.DrawFn, members: int) -> DecodeTerms:
    """Price terms: the timing ones unread here (zeros), the FLOPs and bytes ones drawn, MLA's
    (0.0 without MLA) included."""
    positive = st.floats(1e-3, 1e13, allow_nan=False)
    return DecodeTerms(
        members,
        *[0.0] * 8,
        draw(positive),
        draw(positive),
        draw(st.one_of(st.just(0.0), positive)),
        draw(st.sampled_from([0.0, 2.5e6])),
        draw(positive),
        draw(positive),
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(runs(), min_size=1, max_size=6))
def test_stacked_rows_are_the_step_at_a_time_rows_to_the_last_bit(batch: list[DecodeRun]) -> None:
    expected = [row for run in batch for row in _python_rows(run)]
    got = stack(batch)
    assert got.shape == (len(expected), len(STEP_COLUMNS))
    assert np.array_equal(got, np.array(expected, dtype=np.float64).reshape(got.shape))


def test_a_run_narrated() -> None:
    # Two members, block size 4: step 1 grows one member (cap +4, one block), step 2 nobody.
    # A request arrived during the last step: it ended with two waiting.
    memory = RunMemory(
        3, 2, 4, (2, 1, 0), (2, 2, 0), (10, 6, 0, 0, 40, 0, 0), [0, 4, 0], [0, 1, 0], None
    )
    assert _memory_rows(memory) == [
        (2, 1, 0, 10, 6, 0, 0, 40, 0, 0),
        (2, 1, 0, 12, 8, 0, 0, 36, 0, 0),  # +2 computed, +4 - 2 reserved, a block from free
        (2, 2, 0, 14, 6, 0, 0, 36, 0, 0),
    ]
    # 1e12 FLOPs a step whatever its context, 1e9 bytes
    terms = DecodeTerms(2, *[0.0] * 8, 1e12, 0.0, 0.0, 0.0, 1e9, 0.0)
    run = DecodeRun([0.0, 0.5, 1.0], [0.5] * 3, 7, terms, memory, 2 / 256, PEAK_FLOPS, BANDWIDTH)
    rows = stack([run])
    col = list(STEP_COLUMNS).index
    assert rows[:, col("kv_token_slots")].tolist() == [10, 12, 14]
    assert rows[:, col("kv_free_slots")].tolist() == [40, 36, 36]
    assert rows[:, col("num_waiting")].tolist() == [1, 1, 2]
    assert rows[:, col("num_decode_tokens")].tolist() == [2, 2, 2]
    assert rows[:, col("num_prefill_tokens")].tolist() == [0, 0, 0]
    assert rows[:, col("mfu")].tolist() == [1e12 / (PEAK_FLOPS * 0.5)] * 3


@settings(max_examples=40, deadline=None)
@given(
    pieces=st.lists(st.one_of(runs(), st.integers(1, 5)), min_size=1, max_size=25),
    chunk_steps=st.integers(1, 50),
    max_rows=st.integers(2, 40),
)
def test_runs_total_and_store_as_their_steps_one_by_one_would(
    pieces: list[DecodeRun | int], chunk_steps: int, max_rows: int
) -> None:
    """Runs overrunning chunks: the same chunks, so the same totals (exactly) and rows."""
    by_run = StepLog(max_rows, chunk_steps, window_start_s=1.0)
    by_step = StepLog(max_rows, chunk_steps, window_start_s=1.0)
    buffer = RunBuffer()
    plain = 0
    for piece in pieces:
        if isinstance(piece, int):  # a few steps of the per-step loop
            for _ in range(piece):
                row = (2.0 + plain, 0.5, 0.5, 0.0, *[float(plain % 7)] * 21, 1)
                by_run.append(row)
                by_step.append(row)
                plain += 1
            continue
        buffer.add(piece)  # as a RunRecorder adds a run, then tells its log
        by_run.append_rows(buffer, piece.memory.num_steps)
        for row in _python_rows(piece):
            by_step.append(row)
    a, b = by_run.frame(), by_step.frame()
    assert by_run.totals == by_step.totals
    assert by_run.row_steps == by_step.row_steps
    assert a.equals(b)


def test_a_row_of_the_wrong_length_is_refused_beside_runs() -> None:
    log = StepLog(chunk_steps=100)
    memory = RunMemory(1, 1, 16, (1, 0, 0), (1, 0, 0), (1, 15, 0, 0, 0, 0, 0), [0], [0], None)
    buffer = RunBuffer()
    terms = DecodeTerms(1, *[0.0] * 8, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0)
    buffer.add(DecodeRun([0.0], [1.0], 3, terms, memory, 1.0, 1.0, 1.0))
    log.append_rows(buffer, 1)
    log.append((1.0, 2.0))
    with pytest.raises(ValueError, match="must hold"):
        log.flush()

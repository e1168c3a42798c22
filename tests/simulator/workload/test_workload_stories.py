"""Workload generation, exact stories: explicit requests, arrival patterns, trace slices, prefix
groups, capping and seeds give exactly the requests worked out by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from workload_helpers import BIG, FIXED_10, TRACE_LEN, generate, generate_requests, synthetic

from pagesim.simulator.core.config import (
    ArrivalKind,
    ArrivalProcess,
    ExplicitRequest,
    LengthDist,
    LengthKind,
    PrefixGroup,
)
from pagesim.simulator.core.request import Request, SamplingKind, prompt_segments
from pagesim.simulator.workload.samplers import LengthSource
from pagesim.simulator.workload.stream import WorkloadStats
from pagesim.simulator.workload.trace_files import BUILTIN_TRACES
from pagesim.simulator.workload.traces import load_trace, resolve_trace


def identity(r: Request) -> tuple:
    return (r.request_id, r.arrival_s, r.prompt_len, r.output_len, r.prefix_group, r.prefix_len)


def test_explicit_requests_come_back_as_written_sorted_stably_by_arrival() -> None:
    workload = synthetic(
        explicit=(
            ExplicitRequest(prompt_len=7, output_len=3, arrival_s=2.0),
            ExplicitRequest(prompt_len=5, output_len=1, arrival_s=0.0, priority=2),
            ExplicitRequest(prompt_len=9, output_len=4, arrival_s=2.0, priority=1),
        ),
        num_requests=None,  # explicit requests need no other bound
        prefix_groups=(PrefixGroup(100, 1.0),),  # generators, ignored
        sampling=SamplingKind.PARALLEL,
        num_seqs=3,
    )
    requests = generate(workload)
    got = [(r.request_id, r.arrival_s, r.prompt_len, r.output_len, r.priority) for r in requests]
    assert got == [(0, 0.0, 5, 1, 2), (1, 2.0, 7, 3, 0), (2, 2.0, 9, 4, 1)]
    assert all(r.prefix_group is None and r.prefix_len == 0 for r in requests)
    assert all(r.sampling is SamplingKind.PARALLEL and r.num_seqs == 3 for r in requests)


def test_constant_arrivals_start_at_the_first_gap() -> None:
    workload = synthetic(
        arrival=ArrivalProcess(ArrivalKind.CONSTANT, rate_per_s=4.0), num_requests=5
    )
    assert [r.arrival_s for r in generate(workload)] == [0.25, 0.5, 0.75, 1.0, 1.25]


def test_burst_puts_everything_at_zero() -> None:
    workload = synthetic(arrival=ArrivalProcess(ArrivalKind.BURST), num_requests=6)
    assert [r.arrival_s for r in generate(workload)] == [0.0] * 6


def test_trace_slice_reproduces_the_csv_rows_shifted_to_zero_and_scaled() -> None:
    workload = synthetic(
        arrival=ArrivalProcess(ArrivalKind.TRACE),
        prompt=TRACE_LEN,
        output=TRACE_LEN,
        trace_name="azure-conv",
        trace_offset=100,
        num_requests=50,
        time_scale=2.0,
    )
    requests = generate(workload)
    rows = pd.read_csv(BUILTIN_TRACES["azure-conv"]).iloc[100:150]
    assert [r.request_id for r in requests] == list(range(50))
    assert [r.prompt_len for r in requests] == rows["num_prefill_tokens"].tolist()
    assert [r.output_len for r in requests] == rows["num_decode_tokens"].tolist()
    expected_s = ((rows["arrived_at"] - rows["arrived_at"].iloc[0]) / 2.0).tolist()
    assert requests[0].arrival_s == 0.0
    assert [r.arrival_s for r in requests] == pytest.approx(expected_s, abs=1e-12)


def test_trace_without_count_uses_every_row_from_the_offset() -> None:
    workload = synthetic(
        prompt=TRACE_LEN,
        output=TRACE_LEN,
        trace_name="azure-code",
        trace_offset=8800,
        num_requests=None,
    )
    requests = generate(workload)
    assert len(requests) == 8819 - 8800
    assert (
        requests[-1].prompt_len
        == pd.read_csv(BUILTIN_TRACES["azure-code"])["num_prefill_tokens"].iloc[-1]
    )


def test_load_trace_slice_has_typed_columns() -> None:
    frame = load_trace(BUILTIN_TRACES["azure-code"], offset=3, num_rows=2)
    assert list(frame.columns) == ["arrived_at", "num_prefill_tokens", "num_decode_tokens"]
    assert frame["num_prefill_tokens"].tolist() == [7433, 34]
    assert frame["num_decode_tokens"].dtype == np.int64
    assert frame["arrived_at"].dtype == np.float64
    arxiv = load_trace(BUILTIN_TRACES["arxiv-summarization"], num_rows=1)
    assert "arrived_at" not in arxiv.columns


def test_resolve_trace_takes_builtin_names_and_paths(tmp_path: Path) -> None:
    assert resolve_trace("Azure-Conv") == BUILTIN_TRACES["azure-conv"]
    assert all(path.is_file() for path in BUILTIN_TRACES.values())
    own = tmp_path / "mine.csv"
    own.write_text("num_prefill_tokens,num_decode_tokens\n5,6\n")
    assert resolve_trace(str(own)) == own


def test_prefix_groups_membership_and_prompt_composition() -> None:
    workload = synthetic(
        num_requests=20_000,
        prefix_groups=(PrefixGroup(num_tokens=100, fraction=0.3), PrefixGroup(50, 0.2)),
    )
    stats = WorkloadStats()
    requests = generate_requests(workload, BIG, np.random.default_rng(1), stats)
    by_group: dict[int | None, int] = {0: 0, 1: 0, None: 0}
    for r in requests:
        by_group[r.prefix_group] += 1
        assert r.prefix_len == {0: 100, 1: 50, None: 0}[r.prefix_group]
        assert r.prompt_len == r.prefix_len + 10  # the system prompt precedes the user's
    assert by_group[0] / 20_000 == pytest.approx(0.3, abs=0.02)
    assert by_group[1] / 20_000 == pytest.approx(0.2, abs=0.02)
    assert stats.num_with_prefix == by_group[0] + by_group[1]
    assert stats.num_requests == 20_000


def test_prompt_segments() -> None:
    shared = Request(7, 0.0, prompt_len=110, output_len=5, prefix_group=1, prefix_len=100)
    assert prompt_segments(shared) == [((1, 1), 100), ((2, 7), 10)]
    alone = Request(8, 0.0, prompt_len=30, output_len=5)
    assert prompt_segments(alone) == [((2, 8), 30)]
    all_prefix = Request(9, 0.0, prompt_len=100, output_len=5, prefix_group=0, prefix_len=100)
    assert prompt_segments(all_prefix) == [((1, 0), 100)]


def test_output_is_capped_to_max_seq_len_and_too_long_prompts_are_kept() -> None:
    workload = synthetic(
        explicit=(
            ExplicitRequest(prompt_len=60, output_len=30),  # fits
            ExplicitRequest(prompt_len=60, output_len=50, arrival_s=1.0),  # capped to 40
            ExplicitRequest(prompt_len=100, output_len=5, arrival_s=2.0),  # == max: kept
            ExplicitRequest(prompt_len=150, output_len=5, arrival_s=3.0),  # > max: kept
        )
    )
    stats = WorkloadStats()
    requests = generate_requests(workload, 100, np.random.default_rng(0), stats)
    assert [(r.prompt_len, r.output_len) for r in requests] == [
        (60, 30),
        (60, 40),
        (100, 5),
        (150, 5),
    ]
    assert stats == WorkloadStats(
        num_requests=4,
        num_output_capped=1,
        num_prompt_too_long=2,
        num_with_prefix=0,
        length_source=LengthSource.EXPLICIT,
    )


def test_generated_outputs_are_capped_too() -> None:
    workload = synthetic(prompt=FIXED_10, output=LengthDist(LengthKind.FIXED, value=500))
    stats = WorkloadStats()
    requests = generate_requests(workload, 64, np.random.default_rng(0), stats)
    assert {r.output_len for r in requests} == {54}
    assert stats.num_output_capped == 100


def test_same_seed_identical_different_seed_different() -> None:
    workload = synthetic(
        prompt=LengthDist(LengthKind.LOGNORMAL, mean=100, cv=1.0),
        output=LengthDist(LengthKind.UNIFORM, low=1, high=300),
        prefix_groups=(PrefixGroup(32, 0.5),),
        num_requests=5000,  # more than one chunk
    )
    first = [identity(r) for r in generate(workload, seed=3)]
    assert first == [identity(r) for r in generate(workload, seed=3)]
    assert first != [identity(r) for r in generate(workload, seed=4)]

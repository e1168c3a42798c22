"""Workload generation: exact stories, statistics with fixed seeds, laziness, properties, errors."""

from __future__ import annotations

import itertools
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.simulator.core.config import (
    ArrivalKind,
    ArrivalProcess,
    ExplicitRequest,
    LengthDist,
    LengthKind,
    PrefixGroup,
    WorkloadConfig,
)
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.request import Request, SamplingKind, prompt_segments
from pagesim.simulator.workload.samplers import LengthSource
from pagesim.simulator.workload.stream import (
    WorkloadStats,
    iter_requests,
)
from pagesim.simulator.workload.trace_files import BUILTIN_TRACES
from pagesim.simulator.workload.traces import load_trace, resolve_trace


def generate_requests(
    workload: WorkloadConfig,
    max_seq_len: int,
    rng: np.random.Generator,
    stats: WorkloadStats | None = None,
) -> list[Request]:
    return list(iter_requests(workload, max_seq_len, rng, stats))


FIXED_10 = LengthDist(LengthKind.FIXED, value=10)
TRACE_LEN = LengthDist(LengthKind.TRACE)
BIG = 10**9  # a max_seq_len that caps nothing


def synthetic(**changes: object) -> WorkloadConfig:
    base = WorkloadConfig(
        arrival=ArrivalProcess(ArrivalKind.POISSON, rate_per_s=4.0),
        prompt=FIXED_10,
        output=FIXED_10,
        num_requests=100,
    )
    return replace(base, **changes)


def generate(workload: WorkloadConfig, max_seq_len: int = BIG, seed: int = 0) -> list[Request]:
    return generate_requests(workload, max_seq_len, np.random.default_rng(seed))


def identity(r: Request) -> tuple:
    return (r.request_id, r.arrival_s, r.prompt_len, r.output_len, r.prefix_group, r.prefix_len)


def cv(x: np.ndarray) -> float:
    return float(np.std(x) / np.mean(x))


# ---------------------------------------------------------------------------- exact narratives


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


# ------------------------------------------------------------------------------- statistics


def gaps_of(workload: WorkloadConfig) -> np.ndarray:
    arrivals = np.array([r.arrival_s for r in generate(replace(workload, num_requests=20_000))])
    return np.diff(np.concatenate(([0.0], arrivals)))


def test_poisson_gaps_mean_and_cv() -> None:
    gaps = gaps_of(synthetic(arrival=ArrivalProcess(ArrivalKind.POISSON, rate_per_s=5.0)))
    assert gaps[0] > 0  # the first request arrives after the first gap
    assert gaps.mean() == pytest.approx(0.2, rel=0.03)
    assert cv(gaps) == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize("requested_cv", [0.5, 3.0])
def test_gamma_gaps_mean_and_cv(requested_cv: float) -> None:
    gaps = gaps_of(synthetic(arrival=ArrivalProcess(ArrivalKind.GAMMA, 2.0, cv=requested_cv)))
    assert gaps.mean() == pytest.approx(0.5, rel=0.08)
    assert cv(gaps) == pytest.approx(requested_cv, rel=0.1)


def test_gamma_with_cv_one_is_poisson() -> None:
    poisson = synthetic(arrival=ArrivalProcess(ArrivalKind.POISSON, rate_per_s=3.0))
    gamma = synthetic(arrival=ArrivalProcess(ArrivalKind.GAMMA, rate_per_s=3.0, cv=1.0))
    assert [r.arrival_s for r in generate(poisson)] == [r.arrival_s for r in generate(gamma)]


def test_lognormal_lengths_mean_and_cv() -> None:
    workload = synthetic(
        prompt=LengthDist(LengthKind.LOGNORMAL, mean=300.0, cv=0.8), num_requests=20_000
    )
    lengths = np.array([r.prompt_len for r in generate(workload)])
    assert lengths.min() >= 1
    assert lengths.mean() == pytest.approx(300.0, rel=0.03)
    assert cv(lengths) == pytest.approx(0.8, rel=0.1)


def test_uniform_lengths_stay_in_bounds() -> None:
    workload = synthetic(output=LengthDist(LengthKind.UNIFORM, low=3, high=6), num_requests=2000)
    assert {r.output_len for r in generate(workload)} == {3, 4, 5, 6}


def test_empirical_mean_matches_the_column_mean(tmp_path: Path) -> None:
    column = pd.read_csv(BUILTIN_TRACES["azure-code"])["num_decode_tokens"]
    workload = synthetic(
        output=LengthDist(
            LengthKind.EMPIRICAL, trace_name="azure-code", column="num_decode_tokens"
        ),
        num_requests=20_000,
    )
    outputs = np.array([r.output_len for r in generate(workload)])
    assert outputs.mean() == pytest.approx(column.mean(), rel=0.05)
    assert set(outputs.tolist()) <= set(column.tolist())
    own = tmp_path / "lengths.csv"
    own.write_text("tokens\n4\n8\n")
    by_path = synthetic(prompt=LengthDist(LengthKind.EMPIRICAL, path=own, column="tokens"))
    assert {r.prompt_len for r in generate(by_path)} == {4, 8}


# --------------------------------------------------------------------------- laziness, properties


def test_taking_ten_of_ten_million_is_bounded_work() -> None:
    workload = synthetic(
        prompt=LengthDist(LengthKind.LOGNORMAL, mean=100, cv=1.0), num_requests=10**7
    )
    start = time.perf_counter()
    first = list(itertools.islice(iter_requests(workload, 2048, np.random.default_rng(0)), 10))
    assert time.perf_counter() - start < 1.0
    assert [r.request_id for r in first] == list(range(10))


length_dists = st.one_of(
    st.builds(lambda v: LengthDist(LengthKind.FIXED, value=v), st.integers(1, 5000)),
    st.builds(
        lambda lo, extra: LengthDist(LengthKind.UNIFORM, low=lo, high=lo + extra),
        st.integers(1, 2000),
        st.integers(0, 2000),
    ),
    st.builds(
        lambda m, c: LengthDist(LengthKind.LOGNORMAL, mean=m, cv=c),
        st.floats(0.5, 5000.0),
        st.floats(0.0, 4.0),
    ),
    st.just(LengthDist(LengthKind.EMPIRICAL, trace_name="azure-conv")),
    st.just(TRACE_LEN),
)
arrivals = st.one_of(
    st.builds(
        ArrivalProcess,
        st.sampled_from([ArrivalKind.POISSON, ArrivalKind.CONSTANT]),
        st.floats(0.01, 1000.0),
    ),
    st.builds(
        lambda r, c: ArrivalProcess(ArrivalKind.GAMMA, r, c),
        st.floats(0.01, 1000.0),
        st.floats(0.1, 5.0),
    ),
    st.just(ArrivalProcess(ArrivalKind.BURST)),
    st.just(ArrivalProcess(ArrivalKind.TRACE)),
)
prefix_groups = st.lists(
    st.builds(PrefixGroup, st.integers(1, 3000), st.floats(0.0, 0.3)), max_size=3
).map(tuple)


@settings(max_examples=60, deadline=None)
@given(
    arrival=arrivals,
    prompt=length_dists,
    output=length_dists,
    groups=prefix_groups,
    num_requests=st.integers(1, 300),
    offset=st.integers(0, 10_000),
    max_seq_len=st.integers(1, 8192),
    seed=st.integers(0, 2**32),
)
def test_property_every_request_is_well_formed(
    arrival: ArrivalProcess,
    prompt: LengthDist,
    output: LengthDist,
    groups: tuple[PrefixGroup, ...],
    num_requests: int,
    offset: int,
    max_seq_len: int,
    seed: int,
) -> None:
    workload = WorkloadConfig(
        arrival,
        prompt,
        output,
        num_requests,
        trace_name="azure-conv",
        trace_offset=offset,
        prefix_groups=groups,
    )
    stats = WorkloadStats()
    requests = generate_requests(workload, max_seq_len, np.random.default_rng(seed), stats)
    assert [r.request_id for r in requests] == list(range(num_requests))
    assert all(r.prompt_len >= 1 and r.output_len >= 1 for r in requests)
    assert all(a.arrival_s <= b.arrival_s for a, b in itertools.pairwise(requests))
    assert all(r.arrival_s >= 0.0 for r in requests)
    for r in requests:
        assert r.prompt_len >= max_seq_len or r.total_len <= max_seq_len
    assert stats.num_requests == num_requests
    assert stats.num_prompt_too_long == sum(r.prompt_len >= max_seq_len for r in requests)


# ------------------------------------------------------------------------------------- errors


def raises(workload: WorkloadConfig, *fragments: str, max_seq_len: int = BIG) -> None:
    # Raised at the call, before any request is taken: the engine never fails mid-run.
    with pytest.raises(InputError) as info:
        iter_requests(workload, max_seq_len, np.random.default_rng(0))
    for fragment in fragments:
        assert fragment in str(info.value)


def test_unknown_trace_names_the_field_and_lists_builtins() -> None:
    raises(
        synthetic(prompt=TRACE_LEN, trace_name="azure-chat"),
        "workload.trace_name",
        "azure-chat",
        "azure-conv, azure-code, arxiv-summarization",
    )
    raises(
        synthetic(prompt=LengthDist(LengthKind.EMPIRICAL, trace_name="nope", column="x")),
        "workload.prompt.trace_name",
    )


def test_missing_column_names_file_column_and_columns_it_has(tmp_path: Path) -> None:
    raises(
        synthetic(
            prompt=LengthDist(LengthKind.EMPIRICAL, trace_name="azure-code", column="tokens")
        ),
        "workload.prompt.column",
        "azure_code_2023.csv",
        "'tokens'",
        "arrived_at, num_prefill_tokens, num_decode_tokens",
    )
    own = tmp_path / "short.csv"
    own.write_text("arrived_at,num_prefill_tokens\n0.0,5\n")
    raises(
        synthetic(prompt=TRACE_LEN, trace_path=own, num_requests=None),
        "workload.trace_path",
        "short.csv",
        "'num_decode_tokens'",
        "arrived_at, num_prefill_tokens",
    )
    raises(
        synthetic(arrival=ArrivalProcess(ArrivalKind.TRACE), trace_name="arxiv-summarization"),
        "workload.arrival.kind = trace",
        "'arrived_at'",
    )


def test_bad_trace_values_name_the_line(tmp_path: Path) -> None:
    own = tmp_path / "bad.csv"
    own.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,5,6\n1.0,0,6\n")
    raises(
        synthetic(prompt=TRACE_LEN, trace_path=own, num_requests=None),
        "bad.csv",
        "num_prefill_tokens",
        "line 3",
    )
    unsorted = tmp_path / "unsorted.csv"
    unsorted.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n2.0,5,6\n1.0,5,6\n")
    raises(
        synthetic(
            arrival=ArrivalProcess(ArrivalKind.TRACE), trace_path=unsorted, num_requests=None
        ),
        "line 3",
    )


def test_prefix_fractions_above_one() -> None:
    groups = (PrefixGroup(10, 0.7), PrefixGroup(20, 0.5))
    raises(synthetic(prefix_groups=groups), "workload.prefix_groups", "1.2")
    raises(synthetic(prefix_groups=(PrefixGroup(0, 0.5),)), "workload.prefix_groups[0].num_tokens")


def test_unbounded_count() -> None:
    raises(synthetic(num_requests=None), "workload.num_requests", "bound")


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"arrival": ArrivalProcess(ArrivalKind.POISSON, rate_per_s=0.0)}, "arrival.rate_per_s"),
        ({"arrival": ArrivalProcess(ArrivalKind.GAMMA, 1.0, cv=0.0)}, "arrival.cv"),
        ({"prompt": LengthDist(LengthKind.FIXED, value=0)}, "workload.prompt.value"),
        ({"output": LengthDist(LengthKind.UNIFORM, low=5, high=4)}, "workload.output"),
        ({"prompt": LengthDist(LengthKind.LOGNORMAL, mean=-1.0)}, "workload.prompt.mean"),
        ({"prompt": LengthDist(LengthKind.EMPIRICAL)}, "workload.prompt"),
        ({"num_requests": 0}, "workload.num_requests"),
        ({"num_seqs": 2}, "workload.num_seqs"),
        ({"prompt": TRACE_LEN}, "workload.prompt.kind = trace"),
        ({"prompt": TRACE_LEN, "trace_name": "azure-code", "trace_offset": 9000}, "trace_offset"),
        ({"prompt": TRACE_LEN, "trace_name": "azure-code", "num_requests": 10**5}, "num_requests"),
        ({"time_scale": 0.0}, "workload.time_scale"),
        ({"explicit": (ExplicitRequest(0, 5),)}, "workload.explicit[0].prompt_len"),
    ],
)
def test_non_positive_and_inconsistent_fields(changes: dict, field: str) -> None:
    raises(synthetic(**changes), field)


def test_load_trace_rejects_rows_past_the_end() -> None:
    with pytest.raises(InputError, match="8819 rows"):
        load_trace(BUILTIN_TRACES["azure-code"], offset=10_000)
    with pytest.raises(InputError, match="no such file"):
        load_trace(Path("/nonexistent/trace.csv"))

"""Workload generation, statistics with fixed seeds, laziness and properties: gaps and lengths
have the requested moments, the stream is lazy, and every request is well formed."""

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
from workload_helpers import TRACE_LEN, generate, generate_requests, synthetic

from pagesim.simulator.core.config import (
    ArrivalKind,
    ArrivalProcess,
    LengthDist,
    LengthKind,
    PrefixGroup,
    WorkloadConfig,
)
from pagesim.simulator.workload.stream import WorkloadStats, iter_requests
from pagesim.simulator.workload.trace_files import BUILTIN_TRACES


def cv(x: np.ndarray) -> float:
    return float(np.std(x) / np.mean(x))


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

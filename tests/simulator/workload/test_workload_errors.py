"""Workload generation, errors: a bad workload is refused when the stream is made, with a message
naming the field, the file and the line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from workload_helpers import BIG, TRACE_LEN, synthetic

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
from pagesim.simulator.workload.stream import iter_requests
from pagesim.simulator.workload.trace_files import BUILTIN_TRACES
from pagesim.simulator.workload.traces import load_trace


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

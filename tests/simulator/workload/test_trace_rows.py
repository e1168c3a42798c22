"""Lengths as the traces hold them: a prompt keeps the output it came with, and a row too long for
the model is clipped as Vidur clips it (vidur/request_generator/trace_replay_request_generator.py:
the prompt is cut by the excess) rather than rejected; the counts reach the run's provenance."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sim_helpers import scenario, system

from pagesim.simulator.core.config import (
    ArrivalKind,
    ArrivalProcess,
    EmpiricalPairing,
    LengthDist,
    LengthKind,
    Policy,
    PrefixGroup,
    StopConfig,
    WorkloadConfig,
)
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.engine import simulate
from pagesim.simulator.workload.samplers import LengthSource
from pagesim.simulator.workload.stream import WorkloadStats, iter_requests
from pagesim.simulator.workload.trace_files import BUILTIN_TRACES

ROWS = [(100, 10), (4000, 200), (50, 5000), (5000, 20), (4095, 1)]  # (prompt, output)


def write_trace(folder: Path) -> Path:
    path = folder / "rows.csv"
    lines = ["arrived_at,num_prefill_tokens,num_decode_tokens"]
    lines += [f"{i * 0.5},{p},{o}" for i, (p, o) in enumerate(ROWS)]
    path.write_text("\n".join(lines) + "\n")
    return path


def trace_rows(path: Path, **changes: object) -> WorkloadConfig:
    workload = WorkloadConfig(
        arrival=ArrivalProcess(ArrivalKind.TRACE),
        prompt=LengthDist(LengthKind.TRACE),
        output=LengthDist(LengthKind.TRACE),
        trace_path=path,
    )
    return replace(workload, **changes)


def lengths(workload: WorkloadConfig, max_seq_len: int, stats: WorkloadStats) -> list:
    requests = iter_requests(workload, max_seq_len, np.random.default_rng(0), stats)
    return [(r.prompt_len, r.output_len) for r in requests]


def test_a_row_too_long_for_the_model_loses_prompt_tokens_not_its_answer(tmp_path: Path) -> None:
    # Vidur's trace replay (microsoft/vidur, vidur/request_generator/
    # trace_replay_request_generator.py): num_prefill_tokens -= max(0, total - max_tokens).
    stats = WorkloadStats()
    assert lengths(trace_rows(write_trace(tmp_path)), 4096, stats) == [
        (100, 10),  # fits
        (3896, 200),  # 4,200 tokens: the prompt loses the 104 over
        (1, 4095),  # the answer alone is too long: one prompt token stays, the output is capped
        (4076, 20),  # a prompt past the maximum is cut too, not rejected
        (4095, 1),  # exactly 4,096: untouched
    ]
    assert stats == WorkloadStats(
        num_requests=5,
        num_prompt_clipped=3,
        num_output_capped=1,
        num_prompt_too_long=0,
        num_with_prefix=0,
        length_source=LengthSource.TRACE_ROWS,
    )


def test_a_shared_prefix_survives_the_clip(tmp_path: Path) -> None:
    workload = trace_rows(write_trace(tmp_path), prefix_groups=(PrefixGroup(100, 1.0),))
    stats = WorkloadStats()
    got = lengths(workload, 4096, stats)
    # 100 + 4,000 + 200 = 4,300: the user's part loses 204; 100 + 5,000 + 20: it loses 1,024.
    assert got == [(200, 10), (3896, 200), (101, 3995), (4076, 20), (4095, 1)]
    assert (stats.num_prompt_clipped, stats.num_output_capped) == (4, 1)


def test_lengths_drawn_on_their_own_keep_the_servers_limit(tmp_path: Path) -> None:
    # Not a row (the output is not the trace's): the output is capped, a prompt at or past the
    # maximum stays whole for the scheduler to reject, as before.
    workload = trace_rows(write_trace(tmp_path), output=LengthDist(LengthKind.FIXED, value=300))
    stats = WorkloadStats()
    assert lengths(workload, 4096, stats) == [
        (100, 300),
        (4000, 96),
        (50, 300),
        (5000, 300),
        (4095, 1),
    ]
    assert (stats.num_prompt_clipped, stats.num_output_capped, stats.num_prompt_too_long) == (
        0,
        2,
        1,
    )
    assert stats.length_source is LengthSource.INDEPENDENT


def empirical(path: Path, pairing: EmpiricalPairing | None = None) -> WorkloadConfig:
    return WorkloadConfig(
        arrival=ArrivalProcess(ArrivalKind.BURST),
        prompt=LengthDist(LengthKind.EMPIRICAL, path=path, column="num_prefill_tokens"),
        output=LengthDist(LengthKind.EMPIRICAL, path=path, column="num_decode_tokens"),
        num_requests=12,
        empirical_pairing=pairing,
    )


def test_empirical_lengths_from_one_file_are_whole_rows(tmp_path: Path) -> None:
    path = tmp_path / "pairs.csv"
    path.write_text("num_prefill_tokens,num_decode_tokens\n3000,5\n20,700\n")
    stats = WorkloadStats()
    got = lengths(empirical(path), 8192, stats)
    # One draw per request picks its row (burst arrivals and no prefix groups draw nothing).
    rows = np.random.default_rng(0).integers(0, 2, size=12)
    assert got == [[(3000, 5), (20, 700)][i] for i in rows]
    assert stats.length_source is LengthSource.RESAMPLED_ROWS
    # Independent sampling stays a choice, and breaks the pairing.
    independent = lengths(empirical(path, EmpiricalPairing.INDEPENDENT), 8192, WorkloadStats())
    assert {(3000, 700), (20, 5)} & set(independent)
    assert lengths(empirical(path), 8192, WorkloadStats()) == got  # same seed, same requests


def test_resampled_rows_keep_the_traces_pairing() -> None:
    # In the arXiv summarization trace, longer papers get shorter summaries: prompt and output
    # lengths correlate at -0.46. Whole rows keep that; resampling each column loses it.
    workload = replace(empirical(BUILTIN_TRACES["arxiv-summarization"]), num_requests=4000)
    frame = pd.read_csv(BUILTIN_TRACES["arxiv-summarization"])
    prompts, outputs = frame["num_prefill_tokens"], frame["num_decode_tokens"]
    got = np.array(lengths(workload, 10**9, WorkloadStats()))
    assert set(map(tuple, got.tolist())) <= set(zip(prompts, outputs, strict=True))
    independent = replace(workload, empirical_pairing=EmpiricalPairing.INDEPENDENT)
    broken = np.array(lengths(independent, 10**9, WorkloadStats()))
    r_trace = np.corrcoef(prompts, outputs)[0, 1]
    assert r_trace == pytest.approx(-0.463, abs=0.001)
    assert np.corrcoef(got[:, 0], got[:, 1])[0, 1] == pytest.approx(r_trace, abs=0.05)
    assert abs(np.corrcoef(broken[:, 0], broken[:, 1])[0, 1]) < 0.05


def test_rows_need_one_file() -> None:
    workload = replace(
        empirical(BUILTIN_TRACES["azure-code"], EmpiricalPairing.ROWS),
        output=LengthDist(LengthKind.EMPIRICAL, trace_name="azure-conv"),
    )
    with pytest.raises(InputError, match='"rows" draws both lengths from one row of one file'):
        iter_requests(workload, 4096, np.random.default_rng(0))
    # Without the explicit choice, two files are drawn from each on its own.
    stats = WorkloadStats()
    lengths(replace(workload, empirical_pairing=None), 4096, stats)
    assert stats.length_source is LengthSource.INDEPENDENT


def test_the_run_says_how_lengths_were_made(tmp_path: Path) -> None:
    s = scenario(trace_rows(write_trace(tmp_path)), system(Policy.VLLM_V1))
    s = replace(s, stop=StopConfig(max_time_s=1.2))  # rows 0..2 arrive by 1.0 s; row 3 at 1.5
    result = simulate(s)
    assert result.provenance["workload"] == {
        "lengths": "trace rows",
        "max_seq_len_rule": "a row longer than max_seq_len has its prompt cut by the excess "
        "(Vidur)",
        "num_requests": 3,  # the request past max_time_s was drawn but not taken: not counted
        "num_prompt_clipped": 2,  # rows 1 and 2
        "num_output_capped": 1,  # row 2
        "num_prompt_too_long": 0,
        "num_with_prefix": 0,
    }
    assert result.summary["num_rejected"] == 0

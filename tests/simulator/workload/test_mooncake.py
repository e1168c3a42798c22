"""Mooncake traces: rows become requests whose block hashes share exactly what hash_ids share."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from pagesim.simulator.core.config import MooncakeTrace
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.request import prompt_segments
from pagesim.simulator.kv.prefix_hash import SequenceHasher
from pagesim.simulator.workload.mooncake import (
    BLOCK_TOKENS,
    BUILTIN_MOONCAKE,
    mooncake_requests,
    read_mooncake,
)
from pagesim.simulator.workload.stream import WorkloadStats


def write(tmp_path: Path, rows: list[object]) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def row(stamp: float, input_len: int, output_len: int, ids: list[int]) -> dict[str, object]:
    return {
        "timestamp": stamp,
        "input_length": input_len,
        "output_length": output_len,
        "hash_ids": ids,
    }


def hashes(request: object, block_size: int) -> list[int]:
    hasher = SequenceHasher(block_size)
    for key, length in prompt_segments(request):  # type: ignore[arg-type]
        hasher.extend(key, length)
    return list(hasher.block_hashes())


def shared_blocks(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@pytest.mark.parametrize("block_size", [16, 100, 512, 1024])
def test_requests_share_exactly_the_blocks_their_hash_ids_share(
    tmp_path: Path, block_size: int
) -> None:
    # Rows 0 and 1 share ids 7, 8 (1,024 tokens); row 2 shares only id 7, then differs.
    path = write(
        tmp_path,
        [
            row(0, 1500, 10, [7, 8, 9]),
            row(250, 2000, 10, [7, 8, 10, 11]),
            row(1000, 600, 10, [7, 12]),
        ],
    )
    stats = WorkloadStats()
    a, b, c = mooncake_requests(MooncakeTrace(path), 4096, stats)
    assert [r.arrival_s for r in (a, b, c)] == [0.0, 0.25, 1.0]
    assert (a.prompt_len, b.prompt_len, c.prompt_len) == (1500, 2000, 600)
    assert stats.num_requests == 3
    assert shared_blocks(hashes(a, block_size), hashes(b, block_size)) == 1024 // block_size
    assert shared_blocks(hashes(a, block_size), hashes(c, block_size)) == 512 // block_size


def test_rows_longer_than_the_model_lose_prompt_tokens_and_their_blocks(tmp_path: Path) -> None:
    path = write(tmp_path, [row(0, 1500, 100, [1, 2, 3])])
    stats = WorkloadStats()
    (request,) = mooncake_requests(MooncakeTrace(path), 1024, stats)
    assert (request.prompt_len, request.output_len) == (924, 100)
    assert request.content is not None
    assert [tokens for _, tokens in request.content] == [512, 412]
    assert stats.num_prompt_clipped == 1


def test_the_shipped_traces_read_whole() -> None:
    conversation = read_mooncake(BUILTIN_MOONCAKE["mooncake-conversation"])
    assert len(conversation) == 12_031  # the shared traces README
    assert len(read_mooncake(BUILTIN_MOONCAKE["mooncake-synthetic"])) == 3_993
    ids = [i for block in conversation.hash_ids for i in block]
    assert (len(ids), len(set(ids))) == (288_500, 182_790)  # the README's block references
    assert np.mean(conversation.input_lengths) == pytest.approx(12_035, abs=1)
    trace = MooncakeTrace(BUILTIN_MOONCAKE["mooncake-conversation"], offset=10, num_requests=5)
    requests = list(mooncake_requests(trace, 32768, WorkloadStats()))
    assert [r.request_id for r in requests] == [0, 1, 2, 3, 4]
    assert requests[0].arrival_s == 0.0
    fast = list(mooncake_requests(replace(trace, time_scale=2.0), 32768, WorkloadStats()))
    assert [r.arrival_s * 2 for r in fast] == [r.arrival_s for r in requests]
    assert BLOCK_TOKENS == 512


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        (row(0, 1000, 5, [1, "x"]), "hash_ids: expected a list of integers >= 0"),  # type: ignore[list-item]
        (row(0, 1000, 5, [1, 2, 3]), "hash_ids: 3 ids for input_length 1000"),
        (row(0, 1000, 5, [-1, 2]), "hash_ids: expected a list of integers >= 0"),
        ({"timestamp": 0, "input_length": 10, "output_length": 1}, "missing hash_ids"),
        (row(0, 0, 5, []), "input_length: expected a whole number of tokens from 1 to"),
        (row(0, 10**12, 5, []), "input_length: expected a whole number of tokens from 1 to"),
        ({**row(10**400, 10, 5, [1]), "hash_ids": [1]}, "timestamp: expected a finite number"),
        ("nope", "expected a JSON object"),
    ],
)
def test_a_malformed_row_names_the_file_line_and_field(
    tmp_path: Path, bad: object, needle: str
) -> None:
    path = write(tmp_path, [row(0, 600, 5, [1, 2]), bad])
    with pytest.raises(InputError, match="line 2") as caught:
        read_mooncake(path)
    assert needle in str(caught.value) and str(path) in str(caught.value)


def test_rows_out_of_time_order_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, [row(5, 600, 5, [1, 2]), row(4, 600, 5, [1, 2])])
    with pytest.raises(InputError, match="line 2: timestamp: 4 ms is before"):
        read_mooncake(path)

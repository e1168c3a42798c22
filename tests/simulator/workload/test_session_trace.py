"""Session traces: recorded turns replayed open loop, each prompt extending the turn before."""

from __future__ import annotations

from pathlib import Path

import pytest

from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.request import ANSWER_SEGMENT, UNIQUE_SEGMENT
from pagesim.simulator.workload.session_trace import read_session_trace, session_trace_requests
from pagesim.simulator.workload.stream import WorkloadStats

HEADER = "session_id,turn,arrived_at,num_prefill_tokens,num_decode_tokens\n"


def write(tmp_path: Path, rows: str) -> Path:
    path = tmp_path / "turns.csv"
    path.write_text(HEADER + rows)
    return path


def test_turns_extend_the_previous_prompt_and_answer(tmp_path: Path) -> None:
    path = write(tmp_path, "7,0,2.0,412,230\n8,0,3.0,100,50\n7,1,33.5,38,120\n")
    first, other, second = session_trace_requests(path, 1.0, 4096, WorkloadStats())
    assert [r.arrival_s for r in (first, other, second)] == [0.0, 1.0, 31.5]
    assert (first.session_id, other.session_id, second.session_id) == (7, 8, 7)
    assert second.prompt_len == 412 + 230 + 38 and second.output_len == 120
    assert second.content == (
        ((UNIQUE_SEGMENT, 0), 412),
        ((ANSWER_SEGMENT, 0), 230),
        ((UNIQUE_SEGMENT, 2), 38),
    )


def test_a_turn_past_the_maximum_length_keeps_its_prompt_for_the_scheduler(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, "1,0,0,900,100\n1,1,5,50,100\n")
    stats = WorkloadStats()
    first, second = session_trace_requests(path, 1.0, 1024, stats)
    assert (first.prompt_len, first.output_len) == (900, 100)
    assert second.prompt_len == 1050  # >= 1024: rejected with a reason when it arrives
    assert stats.num_prompt_too_long == 1


@pytest.mark.parametrize(
    ("rows", "needle"),
    [
        (
            "1,0,5.0,10,10\n1,1,4.0,10,10\n",
            "line 3: arrived_at: turn 1 of session 1 arrives at 4 s, before its session starts "
            "(turn 0 at 5 s, line 2)",
        ),
        (
            "1,0,0,10,10\n1,1,5,10,10\n1,2,4,10,10\n",
            "line 4: arrived_at: turn 2 of session 1 arrives at 4 s, before turn 1",
        ),
        (
            "1,0,0,10,10\n1,2,5,10,10\n",
            "line 3: turn: turn 2 of session 1 follows turn 0 (no turn 1)",
        ),
        ("1,0,0,10,10\n1,0,5,10,10\n", "turn 0 of session 1 appears twice"),
        ("1,0,soon,10,10\n", "line 2: arrived_at: expected a finite number of seconds >= 0"),
        ("1,0,0,0,10\n", "line 2: num_prefill_tokens: expected a whole number of tokens from 1 to"),
        ("x,0,0,1,10\n", "line 2: session_id: expected a whole number from 0 to"),
    ],
)
def test_a_session_trace_that_cannot_be_replayed_names_line_field_and_fix(
    tmp_path: Path, rows: str, needle: str
) -> None:
    with pytest.raises(InputError) as caught:
        read_session_trace(write(tmp_path, rows))
    assert needle in str(caught.value) and "turns.csv" in str(caught.value)


def test_a_missing_column_is_named(tmp_path: Path) -> None:
    path = tmp_path / "turns.csv"
    path.write_text("session_id,arrived_at\n1,0\n")
    with pytest.raises(InputError, match=r"missing column.*turn"):
        read_session_trace(path)

"""Session traces: recorded conversations replayed at their recorded times (open loop).

A CSV file, one row per turn:

    session_id,turn,arrived_at,num_prefill_tokens,num_decode_tokens
    7,0,0.00,412,230        # turn 0 starts session 7: 412 tokens of first prompt
    7,1,31.5,38,120         # turn 1: new user text only; the prompt is 412 + 230 + 38 tokens

`arrived_at` in seconds; `num_prefill_tokens` the *new* tokens of the turn (turn 0: the whole
first prompt); `num_decode_tokens` its answer. A turn's prompt is the previous turn's prompt, its
answer and the new text, with content keys that say so (as simulator/workload/sessions.py
builds them), so the prefix cache sees the shared context. Rows may come in any order; every
session must have turns 0, 1, ..., each arriving no earlier than the one before.
A turn that no longer fits the model's maximum length keeps its prompt (the scheduler rejects it
with a reason) or has its answer capped, as stream.py treats lengths drawn on their own.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pagesim.simulator.core.csv_rows import csv_rows
from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.core.limits import MAX_COUNT, TOKENS
from pagesim.simulator.core.numbers import Range
from pagesim.simulator.core.request import ANSWER_SEGMENT, UNIQUE_SEGMENT, Request
from pagesim.simulator.workload.counts import StreamCounts
from pagesim.simulator.workload.number_checks import check_arrival

COLUMNS = ("session_id", "turn", "arrived_at", "num_prefill_tokens", "num_decode_tokens")
MAX_TRACE_BYTES = 256 * 2**20


@dataclass(frozen=True, slots=True)
class Turn:
    line: int
    session_id: int
    turn: int
    arrived_at: float
    new_tokens: int
    output_tokens: int


# What each column may hold: ids and turn numbers from 0, token counts as a request trace's.
_ID = Range(0, MAX_COUNT, whole=True)
_RANGES = {
    "session_id": _ID,
    "turn": _ID,
    "arrived_at": Range(0, math.inf, unit="seconds"),
    "num_prefill_tokens": TOKENS,
    "num_decode_tokens": TOKENS,
}


def _cell(cells: dict[str, str], column: str, where: str) -> float:
    value = _RANGES[column].take(cells[column])
    if value is None:
        raise InputError(
            f"{where}: {column}: expected {_RANGES[column].describe()}, got "
            f"{cells[column][:40]!r}; fix the row"
        )
    return value


def read_session_trace(path: Path, label: str | None = None) -> list[Turn]:
    """The turns in arrival order (ties: session, then turn); InputError naming the file (as
    `label` says, default its path), line, column and fix for any row or session that cannot be
    replayed. Cells are read as request traces read theirs (simulator/core/csv_rows.py,
    simulator/core/numbers.py)."""
    shown = str(path) if label is None else label
    rows = csv_rows(path, shown, MAX_TRACE_BYTES)
    _, header = next(rows)
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise InputError(
            f"{shown} line 1: missing column(s) {choices_text(missing)}; the header needs "
            f"{','.join(COLUMNS)}"
        )
    at = {c: header.index(c) for c in COLUMNS}
    turns: list[Turn] = []
    for line, row in rows:
        where = f"{shown} line {line}"
        cells = {c: row[i] for c, i in at.items()}
        session_id, turn, arrived, new, output = (_cell(cells, c, where) for c in COLUMNS)
        turns.append(Turn(line, int(session_id), int(turn), arrived, int(new), int(output)))
    if not turns:
        raise InputError(f"{shown}: no rows below the header")
    _check_sessions(shown, turns)
    return sorted(turns, key=lambda t: (t.arrived_at, t.session_id, t.turn))


def _check_sessions(shown: str, turns: list[Turn]) -> None:
    sessions: dict[int, list[Turn]] = {}
    for t in turns:
        sessions.setdefault(t.session_id, []).append(t)
    for session_id, own in sessions.items():
        own.sort(key=lambda t: t.turn)
        for k, t in enumerate(own):
            if t.turn != k:
                problem = "appears twice" if t.turn < k else f"follows turn {k - 1} (no turn {k})"
                raise InputError(
                    f"{shown} line {t.line}: turn: turn {t.turn} of session {session_id} "
                    f"{problem}; number each session's turns 0, 1, 2, ..."
                )
        start = own[0]
        for before, t in itertools.pairwise(own):
            if t.arrived_at < start.arrived_at:
                raise InputError(
                    f"{shown} line {t.line}: arrived_at: turn {t.turn} of session {session_id} "
                    f"arrives at {t.arrived_at:g} s, before its session starts (turn 0 at "
                    f"{start.arrived_at:g} s, line {start.line}); fix the time or the turn number"
                )
            if t.arrived_at < before.arrived_at:
                raise InputError(
                    f"{shown} line {t.line}: arrived_at: turn {t.turn} of session {session_id} "
                    f"arrives at {t.arrived_at:g} s, before turn {before.turn} "
                    f"({before.arrived_at:g} s, line {before.line}); a turn follows the one "
                    "before it"
                )


def session_trace_requests(
    path: Path, time_scale: float, max_seq_len: int, stats: StreamCounts
) -> Iterator[Request]:
    """Requests in arrival order, ids 0, 1, ...; times start at the first turn's."""
    turns = read_session_trace(path)
    return _stream(turns, time_scale, max_seq_len, stats)


def _stream(
    turns: list[Turn], time_scale: float, max_seq_len: int, stats: StreamCounts
) -> Iterator[Request]:
    first_s = turns[0].arrived_at
    # The last turn of each session so far: its id, prompt content and lengths.
    last: dict[int, tuple[int, tuple[tuple[tuple[int, ...], int], ...], int, int]] = {}
    for request_id, t in enumerate(turns):
        segments: tuple[tuple[tuple[int, ...], int], ...] = ()
        prompt_len = 0
        if t.turn > 0:
            before_id, before_content, before_prompt, before_output = last[t.session_id]
            segments = (*before_content, ((ANSWER_SEGMENT, before_id), before_output))
            prompt_len = before_prompt + before_output
        segments = (*segments, ((UNIQUE_SEGMENT, request_id), t.new_tokens))
        prompt_len += t.new_tokens
        output_len = t.output_tokens
        room = max_seq_len - prompt_len
        capped = 0 < room < output_len
        if capped:
            output_len = room
        # The next turn repeats the answer as recorded, whatever this one was capped to.
        last[t.session_id] = (request_id, segments, prompt_len, t.output_tokens)
        arrival_s = check_arrival(
            "workload.session_trace.time_scale",
            request_id,
            (t.arrived_at - first_s) / time_scale,
            "raise time_scale, or replay less of the trace",
        )
        yield Request(
            request_id=request_id,
            arrival_s=arrival_s,
            prompt_len=prompt_len,
            output_len=output_len,
            session_id=t.session_id,
            content=segments,
        )
        stats.num_requests += 1
        stats.num_output_capped += capped
        stats.num_prompt_too_long += room <= 0

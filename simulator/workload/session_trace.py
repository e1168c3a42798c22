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

import csv
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.core.request import ANSWER_SEGMENT, UNIQUE_SEGMENT, Request
from pagesim.simulator.workload.counts import StreamCounts

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


def _int(text: str, column: str, where: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise InputError(
            f"{where}: {column}: expected an integer >= {minimum}, got {text!r}; fix the row"
        )
    return value


def read_session_trace(path: Path, label: str | None = None) -> list[Turn]:
    """The turns in arrival order (ties: session, then turn); InputError naming the file (as
    `label` says, default its path), line, column and fix for any row or session that cannot be
    replayed."""
    shown = str(path) if label is None else label
    try:
        if path.stat().st_size > MAX_TRACE_BYTES:
            raise InputError(f"{shown}: larger than {MAX_TRACE_BYTES >> 20} MiB: not a trace")
        with open(path, encoding="utf-8", newline="") as handle:
            rows = list(csv.reader(handle))
    except OSError as exc:
        raise InputError(f"{shown}: cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"{shown}: not a UTF-8 CSV file ({exc})") from None
    if not rows:
        raise InputError(f"{shown}: empty; the header is {','.join(COLUMNS)}")
    header = [name.strip() for name in rows[0]]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise InputError(
            f"{shown} line 1: missing column(s) {choices_text(missing)}; the header needs "
            f"{','.join(COLUMNS)}"
        )
    at = {c: header.index(c) for c in COLUMNS}
    turns: list[Turn] = []
    for line, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        where = f"{shown} line {line}"
        if len(row) < len(header):
            raise InputError(f"{where}: {len(row)} fields, the header has {len(header)}")
        cell = {c: row[i].strip() for c, i in at.items()}
        try:
            arrived = float(cell["arrived_at"])
        except ValueError:
            arrived = math.nan
        if not math.isfinite(arrived) or arrived < 0:
            raise InputError(
                f"{where}: arrived_at: expected seconds >= 0, got {cell['arrived_at']!r}"
            )
        turns.append(
            Turn(
                line,
                _int(cell["session_id"], "session_id", where, 0),
                _int(cell["turn"], "turn", where, 0),
                arrived,
                _int(cell["num_prefill_tokens"], "num_prefill_tokens", where, 1),
                _int(cell["num_decode_tokens"], "num_decode_tokens", where, 1),
            )
        )
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
        yield Request(
            request_id=request_id,
            arrival_s=(t.arrived_at - first_s) / time_scale,
            prompt_len=prompt_len,
            output_len=output_len,
            session_id=t.session_id,
            content=segments,
        )
        stats.num_requests += 1
        stats.num_output_capped += capped
        stats.num_prompt_too_long += room <= 0

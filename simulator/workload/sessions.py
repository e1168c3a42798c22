"""Multi-turn conversations: each turn's prompt is the previous prompt, its answer and new user
text, sent a think time after the answer ended (a closed loop: the next turn waits for the
fleet to answer).

    turn 0:  [first prompt ............]                          -> answer a0
    turn 1:  [first prompt ............][a0 ....][new text 1]     -> answer a1
    turn 2:  [first prompt ............][a0 ....][new text 1][a1 ..][new text 2] ...

The content keys (core/request.py) say so to the prefix cache: turn k + 1 starts with turn k's
prompt segments, then (ANSWER_SEGMENT, id of turn k) for its answer, then its own new text. So a
replica that still holds turn k's blocks serves the shared part from its cache. (An answer's
own generated blocks are hashed by the replica under its sequence id, so a next turn does not
hit them: the cache hit covers the previous prompt, a slight undercount of what vLLM V1 reuses.)

Session starts, first prompts (with any prefix group) and answer lengths come from the
[workload] generators; turns per session, new-text lengths and think times from [workload.sessions],
drawn from a random stream of each session's own (the seed and its id), so every router sees the
same conversations. A turn that would not fit the model's
maximum length ends its session (an application would cut the history; this one stops), and so
does a turn that was rejected.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from pagesim.simulator.core.config import SessionConfig, WorkloadConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.request import (
    ANSWER_SEGMENT,
    UNIQUE_SEGMENT,
    Request,
    RequestStatus,
    prompt_segments,
)
from pagesim.simulator.workload.number_checks import positive_float, positive_int
from pagesim.simulator.workload.samplers import Sampler, length_sampler
from pagesim.simulator.workload.stream import WorkloadStats, iter_requests

# The sessions' own random stream of the scenario seed (any fixed tag works).
SESSION_STREAM = 0x53455353


@dataclass(slots=True)
class _Session:
    turns_left: int  # turns still to send after the current one
    rng: np.random.Generator  # the session's own draws: the same whatever the routing


class SessionSource:
    """First turns as a stream; each later turn made when the previous one ends."""

    def __init__(
        self,
        workload: WorkloadConfig,
        max_seq_len: int,
        rng: np.random.Generator,
        seed: int,
        stats: WorkloadStats,
    ) -> None:
        config = workload.sessions
        assert config is not None
        self._config: SessionConfig = config
        self.num_sessions = num_sessions = positive_int(
            config.num_sessions, "workload.sessions.num_sessions"
        )
        self._think_s = positive_float(
            config.think_time_s, "workload.sessions.think_time_s", allow_zero=True
        )
        first = replace(workload, sessions=None, num_requests=num_sessions)
        self.first_turns: Iterator[Request] = iter_requests(first, max_seq_len, rng, stats)
        self._seed = seed
        self._turns: Sampler = length_sampler(config.turns, "sessions.turns", None)
        self._new: Sampler = length_sampler(config.new_tokens, "sessions.new_tokens", None)
        self._output: Sampler = length_sampler(workload.output, "output", None)
        self._max_seq_len = max_seq_len
        self._next_id = num_sessions
        self._sessions: dict[int, _Session] = {}
        self.num_open = 0
        self.num_turns = 0
        self.num_ended_at_max_len = 0

    def start(self, request: Request) -> None:
        """A first turn is about to be routed: its session opens."""
        session_id = request.session_id = request.request_id
        rng = np.random.default_rng((self._seed, SESSION_STREAM, session_id))
        turns = int(self._turns.take(1, rng)[0])
        if turns < 1:
            raise InputError(f"workload.sessions.turns: drew {turns}; a session has >= 1 turn")
        self._sessions[session_id] = _Session(turns - 1, rng)
        self.num_open += 1
        self.num_turns += 1

    def next_turn(self, done: Request) -> Request | None:
        """The turn after `done` (which just ended), with its arrival time; None closes the
        session."""
        session_id = done.session_id
        assert session_id is not None
        session = self._sessions[session_id]
        if session.turns_left == 0 or done.status is not RequestStatus.FINISHED:
            self._close(session_id)
            return None
        rng = session.rng
        new_tokens = int(self._new.take(1, rng)[0])
        output_len = int(self._output.take(1, rng)[0])
        think_s = float(rng.exponential(self._think_s)) if self._think_s > 0 else 0.0
        prompt_len = done.prompt_len + done.output_len + new_tokens
        room = self._max_seq_len - prompt_len
        if room <= 0:
            self.num_ended_at_max_len += 1
            self._close(session_id)
            return None
        request_id = self._next_id
        self._next_id += 1
        segments = (
            *prompt_segments(done),
            ((ANSWER_SEGMENT, done.request_id), done.output_len),
            ((UNIQUE_SEGMENT, request_id), new_tokens),
        )
        session.turns_left -= 1
        self.num_turns += 1
        assert done.finish_s is not None
        return Request(
            request_id=request_id,
            arrival_s=done.finish_s + think_s,
            prompt_len=prompt_len,
            output_len=min(output_len, room),
            session_id=session_id,
            content=segments,
        )

    def drop(self, request: Request) -> None:
        """A turn was not sent (past the stop time): its session ends."""
        assert request.session_id is not None
        self._close(request.session_id)

    def _close(self, session_id: int) -> None:
        del self._sessions[session_id]
        self.num_open -= 1

"""What a request stream counts as it goes (`stream.WorkloadStats` has these counters): the
trace readers beside stream.py update them without importing it."""

from __future__ import annotations

from typing import Protocol


class StreamCounts(Protocol):
    num_requests: int
    num_prompt_clipped: int
    num_output_capped: int
    num_prompt_too_long: int

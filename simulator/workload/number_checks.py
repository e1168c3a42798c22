"""The number checks workload generation applies to its configuration, with their messages.

Trace loading, the samplers and the plan all check the same kinds of values (a count, a rate, a
row offset); keeping the checks here gives each kind one wording, and lets the plan validate every
value before the first request is drawn.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard

import numpy as np

from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.limits import MAX_ARRIVAL_S


def is_int(value: object) -> TypeGuard[int | np.integer[Any]]:
    """An integer, Python's or NumPy's, and not a bool."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def is_real(value: object) -> TypeGuard[int | float | np.number[Any]]:
    """A number, Python's or NumPy's, and not a bool."""
    return isinstance(value, int | float | np.number) and not isinstance(value, bool)


def bad_int(value: object, minimum: int = 1) -> bool:
    return not is_int(value) or bool(value < minimum)


def positive_int(value: object, field: str) -> int:
    if not is_int(value) or value < 1:
        raise InputError(f"{field} must be a positive integer, got {value!r}")
    return int(value)


def positive_float(value: object, field: str, allow_zero: bool = False) -> float:
    if is_real(value) and math.isfinite(value) and (value > 0 or (allow_zero and value == 0)):
        return float(value)
    bound = ">= 0" if allow_zero else "> 0"
    raise InputError(f"{field} must be a finite number {bound}, got {value!r}")


def late_arrival(what: str, arrival_s: float, fix: str) -> str | None:
    """Why `what` (a request, a trace's last row) cannot arrive `arrival_s` seconds into the run,
    or None when it can: past MAX_ARRIVAL_S the simulated clock cannot resolve a
    step (simulator/core/limits.py). `fix` says what to change."""
    if arrival_s <= MAX_ARRIVAL_S:
        return None
    return (
        f"{what} would arrive {arrival_s:g} s into the run, past "
        f"{MAX_ARRIVAL_S:g} s, where the simulated clock (a float64) no longer resolves "
        f"millisecond steps; {fix}"
    )


def check_arrival(knob: str, request_id: int, arrival_s: float, fix: str) -> float:
    """`arrival_s`, or an InputError naming `knob` when request `request_id` would arrive past
    the clock's range (see `late_arrival`)."""
    problem = late_arrival(f"request {request_id}", arrival_s, fix)
    if problem is not None:
        raise InputError(f"{knob}: {problem}")
    return arrival_s

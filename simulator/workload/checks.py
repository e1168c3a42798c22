"""The number checks workload generation applies to its configuration, with their messages.

Trace loading, the samplers and the plan all check the same kinds of values (a count, a rate, a
row offset); keeping the checks here gives each kind one wording, and lets the plan validate every
value before the first request is drawn.
"""

from __future__ import annotations

import math

import numpy as np

from pagesim.simulator.core.errors import InputError


def bad_int(value: object, minimum: int = 1) -> bool:
    return isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum


def positive_int(value: object, field: str) -> int:
    if bad_int(value):
        raise InputError(f"{field} must be a positive integer, got {value!r}")
    return int(value)  # type: ignore[call-overload]


def positive_float(value: object, field: str, allow_zero: bool = False) -> float:
    ok = isinstance(value, int | float | np.number) and not isinstance(value, bool)
    if ok and math.isfinite(value) and (value > 0 or (allow_zero and value == 0)):  # type: ignore[arg-type]
        return float(value)  # type: ignore[arg-type]
    bound = ">= 0" if allow_zero else "> 0"
    raise InputError(f"{field} must be a finite number {bound}, got {value!r}")

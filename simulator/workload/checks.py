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

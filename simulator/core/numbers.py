"""Numbers read from data files (CSV cells, JSON values): one grammar and one bound check shared by
every reader (request traces, session traces, acceptance tables, Vidur's CSVs, profiles), so they
all accept and refuse the same text.

A cell holds a number when it is a plain ASCII decimal: an optional sign, digits with an optional
point, an optional exponent, spaces around it allowed. That is what pandas' CSV parser reads as a
number (the request traces' reader) and what spreadsheets export. Python's `int()` and `float()`
also take "1_0" (as 10), other scripts' digits ("١" as 1) and the words "inf", "nan" and
"infinity": in a data file none of them is a number.

A `Range` then says which numbers a field may hold (whole or not, from `lo` to `hi`, `lo` itself
excluded where a zero would be divided by), and describes itself for the error message.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

_DECIMAL = re.compile(r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*", re.ASCII)
_MAX_CELL_CHARS = 100  # a decimal longer than this is a broken file, not a measurement


def parse_decimal(text: str) -> float | None:
    """The number a cell's text writes, or None when it is not a plain ASCII decimal."""
    if len(text) > _MAX_CELL_CHARS or not _DECIMAL.fullmatch(text):
        return None
    return float(text)


def as_number(value: object) -> float | None:
    """A cell's text or a JSON / NumPy number as a float (inf beyond the float range); None for
    anything else (a bool, a non-decimal text, None)."""
    if isinstance(value, str):
        return parse_decimal(value)
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.number):
        return None
    try:
        return float(value)
    except OverflowError:  # an integer beyond the float range
        return math.inf if value > 0 else -math.inf


def column_numbers(values: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.float64]]:
    """A column (as pandas read it) as floats, NaN where a cell is not a number by this grammar:
    a column pandas parsed as numbers is taken as is, one it left as text is parsed cell by cell."""
    if values.dtype.kind in "iuf":
        return values.astype(np.float64)
    parsed = (as_number(v) for v in values)
    return np.fromiter((math.nan if v is None else v for v in parsed), np.float64, len(values))


def short_repr(value: object, limit: int = 40) -> str:
    """A value as an error message shows it: `repr` (a NumPy scalar as the Python number it
    holds, a cell's text quoted), cut to `limit` characters."""
    if isinstance(value, np.generic):
        value = value.item()
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def number_text(x: float) -> str:
    """1,000,000,000 for whole numbers a person reads at a glance, else the shortest float."""
    if float(x).is_integer() and abs(x) < 1e16:
        return f"{int(x):,}"
    return f"{x:g}"


@dataclass(frozen=True, slots=True)
class Range:
    """The numbers a field may hold: finite, from `lo` (excluded when `lo_open`) to `hi` (inf: no
    bound but finiteness), whole when `whole`; `unit` names what they count or measure ("tokens",
    "ms")."""

    lo: float
    hi: float
    whole: bool = False
    lo_open: bool = False
    unit: str = ""

    def take(self, value: object) -> float | None:
        """`value` (a cell's text or a number) when it is in the range, else None."""
        number = as_number(value)
        if number is None or not self.holds(number):
            return None
        return number

    def holds(self, number: float) -> bool:
        above = number > self.lo if self.lo_open else number >= self.lo
        inside = above and number <= self.hi and math.isfinite(number)
        return inside and (not self.whole or number.is_integer())

    def outside(
        self, numbers: np.ndarray[Any, np.dtype[np.float64]]
    ) -> np.ndarray[Any, np.dtype[np.bool_]]:
        """Which of `numbers` (NaN: not a number) the range does not hold."""
        with np.errstate(invalid="ignore"):
            above = numbers > self.lo if self.lo_open else numbers >= self.lo
            bad = ~(above & (numbers <= self.hi) & np.isfinite(numbers))  # NaN: outside
            if self.whole:
                bad |= numbers != np.floor(numbers)
        return np.asarray(bad)

    def describe(self) -> str:
        """'a whole number of tokens from 1 to 1,000,000,000', 'a number of ms above 0, up to
        60,000' ..."""
        kind = "a whole number" if self.whole else "a finite number"
        unit = f" of {self.unit}" if self.unit else ""
        if math.isinf(self.hi):
            return f"{kind}{unit} {'>' if self.lo_open else '>='} {number_text(self.lo)}"
        if self.lo_open:
            return f"{kind}{unit} above {number_text(self.lo)}, up to {number_text(self.hi)}"
        return f"{kind}{unit} from {number_text(self.lo)} to {number_text(self.hi)}"

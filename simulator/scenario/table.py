"""Reading one table of a scenario file, with a message a person can act on for every mistake.

A `Table` checks its keys against the schema and reads typed values (integers, numbers in a
range, choices of an enum, sub-tables); each failure is a one-line `ScenarioError` naming the file,
the dotted key, what is wrong and what would be valid. The helpers that describe a value in such a
message (`show`, `described`, `suggest`) and show a path (`display`) live here too.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time
from enum import Enum
from pathlib import Path
from typing import Any, NoReturn

from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.core.limits import MAX_COUNT
from pagesim.simulator.core.toml_text import toml_key
from pagesim.simulator.scenario.schema import Schema


class ScenarioError(InputError):
    """An InputError about one key of a scenario; `key` lets callers say which override set it."""

    def __init__(self, label: str, key: str, problem: str) -> None:
        message = f"{label}: {key}: {problem}" if key else f"{label}: {problem}"
        super().__init__(_CONTROL.sub(lambda m: repr(m[0])[1:-1], message))  # always one line
        self.label, self.key, self.problem = label, key, problem


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


# --- describing values in messages ---------------------------------------------------------

_TOML_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "float"),
    (str, "string"),
    (list, "array"),
    (dict, "table"),
    (datetime, "datetime"),
    (date, "date"),
    (time, "time"),
)


def _type_name(value: object) -> str:
    for cls, name in _TOML_TYPES:
        if isinstance(value, cls):
            return name
    return type(value).__name__


def show(value: object, limit: int = 60) -> str:
    """A short TOML-like rendering of a value for a message (never fails, never huge)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and value.bit_length() > 96:  # str() of a huge int is refused
        return f"<an integer of about {int(value.bit_length() * 0.30103)} digits>"
    if isinstance(value, list):
        text = "[" + ", ".join(show(v, 20) for v in value[:4]) + (", ...]" if value[4:] else "]")
    elif isinstance(value, dict):
        items = [f"{k} = {show(v, 20)}" for k, v in list(value.items())[:3]]
        text = "{ " + ", ".join(items) + (", ... }" if len(value) > 3 else " }")
    else:
        text = repr(value) if isinstance(value, str | int | float) else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def described(value: object) -> str:
    return f"{_type_name(value)} {show(value)}"


def suggest(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def display(path: Path) -> str:
    """A path as a person would type it: relative to the working directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except (ValueError, OSError, RuntimeError):
        return str(path)


MAX_DEPTH = 16  # tables and arrays nested in a scenario: its schema needs 4 at most


def deepest_key(data: object, limit: int = MAX_DEPTH) -> str | None:
    """The dotted key of a value nested more than `limit` tables or arrays deep (shortened), or
    None. Iterative: a hostile file may nest thousands deep."""
    stack: list[tuple[object, str, int]] = [(data, "", 0)]
    while stack:
        value, where, depth = stack.pop()
        if depth > limit:
            return where if len(where) <= 60 else where[:57] + "..."
        if isinstance(value, dict):
            stack.extend(
                (v, f"{where}.{k}" if where else str(k), depth + 1) for k, v in value.items()
            )
        elif isinstance(value, list):
            stack.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value))
    return None


def is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # name too long, embedded NUL byte...
        return False


# --- reading one table ---------------------------------------------------------------------

REQUIRED: Any = object()


@dataclass(frozen=True)
class Ctx:
    label: str  # the file, as messages name it
    base_dir: Path  # relative paths in the file resolve against this

    def fail(self, key: str, problem: str) -> NoReturn:
        raise ScenarioError(self.label, key, problem)

    def resolve(self, text: str) -> Path:
        try:
            path = Path(os.path.expanduser(text))
        except (ValueError, KeyError, RuntimeError):  # "~user\0..." and the like
            path = Path(text)
        return path if path.is_absolute() else self.base_dir / path


def number_text(x: float) -> str:
    if isinstance(x, int) or (x.is_integer() and abs(x) < 1e16):
        return str(int(x))
    return f"{x:g}"


def _range_text(lo: float, hi: float, lo_open: bool = False, hi_open: bool = False) -> str:
    opening, closing = "(" if lo_open else "[", ")" if hi_open else "]"
    return f"in {opening}{number_text(lo)}, {number_text(hi)}{closing}"


class Table:
    """One TOML table of the scenario: checks its keys, reads typed values with paths for errors."""

    def __init__(self, ctx: Ctx, key: str, data: object, schema: Schema) -> None:
        if not isinstance(data, dict):
            ctx.fail(key, f"expected a table, got {described(data)}")
        self.ctx, self.key, self.data, self.schema = ctx, key, data, schema
        for name in data:
            if name not in schema:
                valid = list(schema)
                ctx.fail(
                    self.path(str(name)),
                    f"unknown key {str(name)!r}{suggest(str(name), valid)}; "
                    f"valid keys here: {choices_text(valid)}",
                )

    def path(self, name: str) -> str:
        return f"{self.key}.{toml_key(name)}" if self.key else toml_key(name)

    def fail(self, name: str, problem: str) -> NoReturn:
        self.ctx.fail(self.path(name), problem)

    def has(self, name: str) -> bool:
        return name in self.data

    def _get(self, name: str, default: Any, expected: str) -> Any:
        if name in self.data:
            return self.data[name]
        if default is REQUIRED:
            self.fail(name, f"required key is missing ({expected})")
        return default

    def text(self, name: str, default: Any = REQUIRED, allow_empty: bool = False) -> Any:
        value = self._get(name, default, "a string")
        if value is default:
            return value
        if not isinstance(value, str):
            self.fail(name, f"expected a string, got {described(value)}")
        if not value.strip() and not allow_empty:
            self.fail(name, "must not be empty")
        return value

    def flag(self, name: str, default: Any = REQUIRED) -> Any:
        value = self._get(name, default, "true or false")
        if value is not default and not isinstance(value, bool):
            self.fail(name, f"expected true or false, got {described(value)}")
        return value

    def integer(self, name: str, default: Any = REQUIRED, lo: int = 1, hi: int = MAX_COUNT) -> Any:
        rng = _range_text(lo, hi)
        value = self._get(name, default, f"an integer {rng}")
        if value is default:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(name, f"expected an integer {rng}, got {described(value)}")
        if not lo <= value <= hi:
            self.fail(name, f"must be {rng}, got {show(value)}")
        return value

    def number(
        self,
        name: str,
        default: Any = REQUIRED,
        lo: float = 0.0,
        hi: float = 1e12,
        lo_open: bool = False,
        hi_open: bool = False,
    ) -> Any:
        """A float (an integer is accepted and converted); finite and inside its range."""
        rng = _range_text(lo, hi, lo_open, hi_open)
        value = self._get(name, default, f"a number {rng}")
        if value is default:
            return value
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(name, f"expected a number {rng}, got {described(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            self.fail(name, f"must be a finite number {rng}, got {show(value)}")
        # Every float is bounded above too: no inf, no overflow further down.
        too_low = value <= lo if lo_open else value < lo
        too_high = value >= hi if hi_open else value > hi
        if too_low or too_high:
            self.fail(name, f"must be {rng}, got {show(value)}")
        return float(value)

    def fraction(self, name: str, default: Any = REQUIRED, **kw: Any) -> Any:
        return self.number(name, default, lo=0.0, hi=1.0, **kw)

    def choice(self, name: str, enum: type[Enum], default: Any = REQUIRED) -> Any:
        valid = choices_text(m.value for m in enum)
        value = self._get(name, default, f"one of: {valid}")
        if value is default:
            return value
        if not isinstance(value, str):
            self.fail(name, f"expected a string (one of: {valid}), got {described(value)}")
        for member in enum:
            if member.value == value.lower():
                return member
        self.fail(name, f"unknown {name.replace('_', ' ')} {value!r}; valid: {valid}")

    def table(self, name: str, required: bool = False) -> Table:
        if name not in self.data and required:
            self.fail(name, f"required table [{self.path(name)}] is missing")
        return Table(self.ctx, self.path(name), self.data.get(name, {}), self.schema[name])

    def tables(self, name: str) -> list[Table]:
        """The entries of an array of tables ([[name]]); [] when absent."""
        items = self.data.get(name, [])
        if not isinstance(items, list):
            self.fail(name, f"expected an array of tables ([[{name}]]), got {described(items)}")
        schema = self.schema[name][0]
        return [Table(self.ctx, f"{self.path(name)}[{i}]", d, schema) for i, d in enumerate(items)]

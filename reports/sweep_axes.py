"""A sweep table's axes: which columns are swept values, and what to call each value.

`pagesim sweep` names an axis column by its scenario path (`workload.arrival.rate_per_s`,
`systems.block_size`, or a whole table such as `model`), and an axis value may be a table
(`{ preset = "deepseek-v3", tensor_parallel = 8 }`), which sweep.csv holds as its Python text.
A reader wants the value by what differs from the other points: "deepseek-v3", not the dict.
"""

from __future__ import annotations

import ast
import math
import numbers
from collections.abc import Sequence
from pathlib import PurePath

import pandas as pd

from pagesim.simulator.scenario.schema import SCHEMA

# Names a hand-made table may give its axes (they are otherwise summary keys).
PLAIN_AXES = ("rate", "rate_per_s", "block_size")
# Keys of a table-valued axis whose value names the thing itself: shown bare, not as key = value.
NAMING_KEYS = frozenset({"preset", "config", "name", "path", "trace", "kind", "method"})


def is_axis(column: object) -> bool:
    """A column named by a scenario path: its first key is a top-level key of the schema."""
    head = str(column).split(".", 1)[0].split("[", 1)[0]
    return head in SCHEMA


def axis_columns(sweep: pd.DataFrame) -> list[str]:
    """The swept axes of a sweep table, in order; a table without any named by a scenario path
    (a hand-made one) may name its axes `rate` and `block_size`."""
    found = [str(c) for c in sweep.columns if is_axis(c)]
    return found or [c for c in PLAIN_AXES if c in sweep]


def short_name(axis: str) -> str:
    """An axis by its last key: `workload.arrival.rate_per_s` -> `rate_per_s`."""
    return axis.rsplit(".", 1)[-1]


def _parsed(value: object) -> object:
    """A table or array read back from sweep.csv's text; anything else as it is."""
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return value
    return value


def _text(value: object) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _named(key: str, value: object) -> str:
    if key in NAMING_KEYS:
        text = _text(value)
        return PurePath(text).stem if key in ("config", "path") else text
    return f"{key} {_text(value)}"


def value_labels(values: Sequence[object]) -> list[str]:
    """Each value of one axis in words. Tables show the keys whose values differ between the
    points (all keys when none does), a naming key (preset, config, ...) by its value alone."""
    parsed = [_parsed(v) for v in values]
    if not parsed or not all(isinstance(v, dict) for v in parsed):
        return [_text(v) for v in parsed]
    tables = [v for v in parsed if isinstance(v, dict)]
    keys = list(dict.fromkeys(k for t in tables for k in t))
    differ = [k for k in keys if len({repr(t.get(k, ...)) for t in tables}) > 1] or keys
    return [", ".join(_named(str(k), t[k]) for k in differ if k in t) for t in tables]


def label_axes(sweep: pd.DataFrame) -> pd.DataFrame:
    """The table with every axis value that is not a number replaced by its label (numbers stay
    numbers, so that curves can be drawn against them)."""
    out = sweep.copy()
    for axis in axis_columns(sweep):
        numbers = pd.to_numeric(sweep[axis], errors="coerce")
        if numbers.notna().all():
            out[axis] = numbers
            continue
        present = [v for v in sweep[axis] if not _missing(v)]  # a row of another axis: none
        unique = list(dict.fromkeys(_key(v) for v in present))
        names = dict(zip(unique, value_labels(unique), strict=True))
        out[axis] = [None if _missing(v) else names[_key(v)] for v in sweep[axis]]
    return out


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _key(value: object) -> object:
    """A hashable stand-in for an axis value (a table is a dict, unhashable)."""
    return repr(value) if isinstance(value, dict | list) else value


def numeric_axes(sweep: pd.DataFrame) -> list[str]:
    """Axes whose values are all numbers and take several values (curves are drawn on them)."""
    found = []
    for axis in axis_columns(sweep):
        values = pd.to_numeric(sweep[axis], errors="coerce")
        if values.notna().all() and values.nunique() > 1:
            found.append(axis)
    return found


def _axis_value(axis: str, value: object) -> str:
    """A number with its axis's name ("max_num_seqs 8"); a word alone ("fp8")."""
    is_number = isinstance(value, numbers.Real) and not isinstance(value, bool)
    return f"{short_name(axis)} {_text(value)}" if is_number else _text(value)


def is_categorical(sweep: pd.DataFrame) -> bool:
    """Whether the sweep's points are named, not numbered: it has axes and none holds a number
    (models, dtypes, traces); such a sweep ranks its points rather than drawing curves."""
    axes = axis_columns(sweep)
    return bool(axes) and all(pd.to_numeric(sweep[a], errors="coerce").isna().all() for a in axes)


def point_names(sweep: pd.DataFrame) -> list[str]:
    """Each row by what differs between rows: its system (when there are several) and its value
    of each axis that takes several values, e.g. "fp8" or "vllm, sampling beam"."""
    axes = [a for a in axis_columns(sweep) if sweep[a].astype(str).nunique() > 1]
    many = "system" in sweep and sweep["system"].astype(str).nunique() > 1
    names = []
    for _, row in sweep.iterrows():
        parts = [str(row["system"])] if many else []
        parts += [_axis_value(a, row[a]) for a in axes]
        names.append(" · ".join(parts) or (str(row["system"]) if "system" in sweep else "all runs"))
    return names

"""Reading trace CSVs: a built-in name or a path becomes validated int64 token columns.

Workload generation reads traces two ways: whole rows, for trace-driven arrivals and lengths
(`load_trace`), and one column to resample, for empirical length distributions (`token_column`).
Both check every value with a message naming the file, column and line, and share one read per
file (cached on its mtime and size). Built-in trace names and column names live in
simulator/workload/trace_files.py.

The same idea in the scenario layer: simulator/scenario/traces.py checks the files before a run.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.core.limits import TOKENS
from pagesim.simulator.core.numbers import column_numbers, short_repr
from pagesim.simulator.workload.number_checks import bad_int
from pagesim.simulator.workload.trace_files import (
    ARRIVAL_COLUMN,
    BUILTIN_TRACES,
    OUTPUT_COLUMN,
    PROMPT_COLUMN,
)

TRACE_COLUMNS = {"prompt": PROMPT_COLUMN, "output": OUTPUT_COLUMN}  # workload part -> column


def resolve_trace(name_or_path: str | Path, field: str = "trace") -> Path:
    """A built-in trace name (case-insensitive) or the path of an existing CSV file."""
    builtin = BUILTIN_TRACES.get(str(name_or_path).lower())
    if builtin is not None:
        return builtin
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    raise InputError(
        f"{field}: unknown trace {str(name_or_path)!r}: neither a built-in trace "
        f"({choices_text(BUILTIN_TRACES)}) nor an existing CSV file"
    )


@functools.lru_cache(maxsize=16)
def _read_csv_cached(path: str, mtime_ns: int, size: int) -> pd.DataFrame:
    # Keyed on mtime and size so an edited file is read again. Callers never mutate the frame.
    # index_col=False: a row with a field more than the header must not turn the first column
    # into the index (shifting every other one); the scenario check refuses such rows first.
    return pd.read_csv(path, index_col=False)


def read_csv(path: Path, field: str) -> pd.DataFrame:
    try:
        stat = path.stat()
        if not path.is_file():
            raise InputError(f"{field}: {path} is not a file")
        return _read_csv_cached(str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    except FileNotFoundError:
        raise InputError(f"{field}: {path}: no such file") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as exc:
        raise InputError(f"{field}: {path}: cannot read it as CSV: {exc}") from None


def _require_column(frame: pd.DataFrame, column: str, path: Path, field: str) -> None:
    if column not in frame.columns:
        raise InputError(
            f"{field}: {path} has no column {column!r}; its columns: {choices_text(frame.columns)}"
        )


def token_column(
    frame: pd.DataFrame, column: str, path: Path, field: str, first_row: int = 0
) -> np.ndarray:
    """The column as int64 [rows]; every value must be a whole number from 1 to MAX_COUNT
    (tokens; beyond it int64 arithmetic on lengths could overflow)."""
    _require_column(frame, column, path, field)
    values = column_numbers(frame[column].to_numpy())
    bad = TOKENS.outside(values)
    if bad.any():
        i = int(np.argmax(bad))
        raise InputError(
            f"{field}: {path}, column {column!r}, line {first_row + i + 2}: "
            f"{short_repr(frame[column].iloc[i])} is not {TOKENS.describe()}"
        )
    return values.astype(np.int64)


def load_trace(
    path: Path, offset: int = 0, num_rows: int | None = None, field: str = "trace"
) -> pd.DataFrame:
    """Rows [offset, offset + num_rows) of a trace CSV (all rows from offset when None).

    Columns: `num_prefill_tokens`, `num_decode_tokens` (int64, >= 1, required) and `arrived_at`
    (float64 seconds, finite, non-decreasing) when the file has it. Reads are cached per file.
    """
    path = Path(path)
    frame = read_csv(path, field)
    total = len(frame)
    if bad_int(offset, minimum=0):
        raise InputError(f"{field}: offset must be a non-negative integer, got {offset!r}")
    if offset >= total:
        raise InputError(
            f"{field}: offset {offset} is past the last row of {path} ({total} rows; "
            f"valid: 0 to {total - 1})"
        )
    end = total if num_rows is None else offset + num_rows
    if num_rows is not None and (bad_int(num_rows) or end > total):
        raise InputError(
            f"{field}: asked for {num_rows!r} rows from row {offset}, but {path} has "
            f"{total - offset} rows there"
        )
    rows = frame.iloc[offset:end]
    out = {name: token_column(rows, name, path, field, offset) for name in TRACE_COLUMNS.values()}
    if ARRIVAL_COLUMN in rows.columns:
        times = column_numbers(rows[ARRIVAL_COLUMN].to_numpy())
        bad = ~np.isfinite(times)
        bad[1:] |= times[1:] < times[:-1]
        if bad.any():
            i = int(np.argmax(bad))
            raise InputError(
                f"{field}: {path}, column {ARRIVAL_COLUMN!r}, line {offset + i + 2}: "
                f"{rows[ARRIVAL_COLUMN].iloc[i]!r} is not a finite time at or after the previous "
                "row's (sort the file by arrived_at)"
            )
        out = {ARRIVAL_COLUMN: times, **out}
    return pd.DataFrame(out)

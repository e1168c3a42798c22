"""Checking a scenario's trace CSV files at the edge, before any run reads them.

`check_csv` proves a file parses, has rows and holds the columns asked for, with whole token
counts >= 1 and finite, non-decreasing times; whatever is wrong becomes a `ScenarioError` naming
the file, the line and the cell. It reads with the csv module only (trace_loading.py later reads
the same files with pandas), and remembers each file by size and modification time.

The same idea in the workload layer: simulator/workload/traces.py reads the files for a run.
"""

from __future__ import annotations

import functools
import math
import stat as stat_mode
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pagesim.simulator.core.csv_rows import csv_rows
from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.core.limits import TOKENS
from pagesim.simulator.core.numbers import parse_decimal
from pagesim.simulator.scenario.table import Ctx, Table, display, is_file
from pagesim.simulator.workload.number_checks import late_arrival
from pagesim.simulator.workload.trace_files import ARRIVAL_COLUMN, BUILTIN_TRACES

MAX_TRACE_BYTES = 512 * 2**20


@dataclass(frozen=True)
class CsvInfo:
    """What a scenario needs to know of a CSV file, read once per version of the file."""

    columns: tuple[str, ...]
    num_rows: int
    not_tokens: dict[str, str]  # column -> its first cell that is not a whole number >= 1
    not_times: dict[str, str]  # column -> its first cell that is not a finite, non-decreasing time
    spans: dict[str, float]  # time column -> its last time minus its first


def _cell_problems(cell: str, last: float) -> tuple[bool, bool, float]:
    """(is not a token count, is not a time after `last`, the cell as a number): read as the
    run reads it (simulator/core/numbers.py)."""
    number = parse_decimal(cell)
    if number is None:
        return True, True, last
    return not TOKENS.holds(number), not number >= last, number


@functools.lru_cache(maxsize=32)
def _read_csv(path: str, _mtime_ns: int, _size: int) -> CsvInfo | str:
    """Header, row count and each column's first bad cell of a CSV file, or why it is unreadable
    (the file named by its path, as `display` shows it)."""
    try:
        rows = csv_rows(Path(path), repr(display(Path(path))), MAX_TRACE_BYTES)
        _, header_cells = next(rows)
        header = tuple(header_cells)
        not_tokens: dict[str, str] = {}
        not_times: dict[str, str] = {}
        first = dict.fromkeys(header, math.nan)
        last = dict.fromkeys(header, -math.inf)
        num_rows = 0
        for line, row in rows:
            num_rows += 1
            for column, cell in zip(header, row, strict=True):
                bad_tokens, bad_time, last[column] = _cell_problems(cell, last[column])
                if num_rows == 1:
                    first[column] = last[column]
                where = f"line {line} holds {cell[:30]!r}"
                if bad_tokens:
                    not_tokens.setdefault(column, where)
                if bad_time:
                    not_times.setdefault(column, where)
    except InputError as exc:
        return str(exc)
    spans = {c: last[c] - first[c] for c in header if c not in not_times}
    return CsvInfo(header, num_rows, not_tokens, not_times, spans)


def _row_times(path: Path, column: str, first: int, last: int) -> tuple[float, float]:
    """The `column` cells of data rows `first` and `last` (0: the first row below the header) of
    a file `check_csv` found to hold times there."""
    rows = csv_rows(path, repr(display(path)), MAX_TRACE_BYTES)
    at = next(rows)[1].index(column)
    found = {}
    for i, (_, row) in enumerate(rows):
        if i in (first, last):
            found[i] = float(row[at])  # a plain decimal: check_csv read the column
        if i >= last:
            break
    return found[first], found[last]


def check_csv(
    ctx: Ctx, key: str, path: Path, tokens: Sequence[str] = (), times: Sequence[str] = ()
) -> CsvInfo:
    """A CSV that parses, with rows, whose `tokens` columns hold whole numbers >= 1 and whose
    `times` columns hold finite, non-decreasing times."""
    shown = display(path)
    try:
        stat = path.stat()
    except (OSError, ValueError):
        ctx.fail(key, f"no such file {shown!r}")
    if not stat_mode.S_ISREG(stat.st_mode):
        # A FIFO or a device would block or never end: only regular files are read.
        ctx.fail(key, f"{shown!r} is not a regular file (a folder, FIFO or device?)")
    if stat.st_size > MAX_TRACE_BYTES:
        ctx.fail(key, f"{shown!r} is larger than {MAX_TRACE_BYTES >> 20} MiB")
    info = _read_csv(str(path), stat.st_mtime_ns, stat.st_size)
    if isinstance(info, str):
        ctx.fail(key, info)
    if info.num_rows == 0:
        ctx.fail(key, f"{shown!r} has no rows")
    for columns, problems, wanted in (
        (tokens, info.not_tokens, TOKENS.describe()),
        (times, info.not_times, "a finite time at or after the previous row's"),
    ):
        for column in columns:
            if column not in info.columns:
                have = choices_text(info.columns)
                ctx.fail(key, f"{shown!r} has no column {column!r}; it has: {have}")
            if column in problems:
                ctx.fail(key, f"{shown!r} column {column!r}: {problems[column]}, not {wanted}")
    return info


def check_trace_span(
    ctx: Ctx, key: str, path: Path, info: CsvInfo, rows: tuple[int, int], time_scale: float
) -> None:
    """The arrival times of data rows `rows` (the first and last a workload replays, from 0) of
    the file `check_csv` read as `info` span no more than the simulated clock's range once divided
    by `time_scale`."""
    fix = "raise workload.time_scale, or replay fewer rows"
    if late_arrival("", info.spans[ARRIVAL_COLUMN] / time_scale, fix) is None:
        return  # the whole file fits: so does any slice
    first_s, last_s = _row_times(path, ARRIVAL_COLUMN, *rows)
    problem = late_arrival(f"row {rows[1] + 1}", (last_s - first_s) / time_scale, fix)
    if problem is not None:
        ctx.fail(key, problem)


def trace_file(t: Table, name: str) -> tuple[str | None, Path]:
    """(built-in name or None, CSV path) of a built-in trace name or a CSV path."""
    text = t.text(name)
    if text.lower() in BUILTIN_TRACES:
        return text.lower(), BUILTIN_TRACES[text.lower()]
    path = t.ctx.resolve(text)
    if not is_file(path):
        t.fail(
            name,
            f"unknown trace {text!r}: neither a built-in trace "
            f"({choices_text(BUILTIN_TRACES)}) nor an existing CSV file",
        )
    return None, path

"""Checking a scenario's trace CSV files at the edge, before any run reads them.

`check_csv` proves a file parses, has rows and holds the columns asked for, with whole token
counts >= 1 and finite, non-decreasing times; whatever is wrong becomes a `ScenarioError` naming
the file, the line and the cell. It reads with the csv module only (trace_loading.py later reads
the same files with pandas), and remembers each file by size and modification time.
"""

from __future__ import annotations

import csv
import functools
import math
import stat as stat_mode
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pagesim.simulator.core.errors import choices_text
from pagesim.simulator.core.limits import MAX_COUNT
from pagesim.simulator.scenario.table import Ctx, Table, display, is_file
from pagesim.simulator.workload.trace_files import BUILTIN_TRACES

MAX_TRACE_BYTES = 512 * 2**20


@dataclass(frozen=True)
class CsvInfo:
    """What a scenario needs to know of a CSV file, read once per version of the file."""

    columns: tuple[str, ...]
    num_rows: int
    not_tokens: dict[str, str]  # column -> its first cell that is not a whole number >= 1
    not_times: dict[str, str]  # column -> its first cell that is not a finite, non-decreasing time


def _cell_problems(cell: str, last: float) -> tuple[bool, bool, float]:
    """(is not a token count, is not a time after `last`, the cell as a number)."""
    try:
        number = float(cell)
    except ValueError:
        return True, True, last
    is_count = 1 <= number <= MAX_COUNT and number.is_integer()  # NaN and inf fail too
    return not is_count, not number >= last, number


@functools.lru_cache(maxsize=32)
def _read_csv(path: str, _mtime_ns: int, _size: int) -> CsvInfo | str:
    """Header, row count and each column's first bad cell of a CSV file, or why it is unreadable."""
    try:
        with open(path, encoding="utf-8", newline="") as file:
            rows = csv.reader(file)
            header = tuple(c.strip() for c in next(rows, ()))
            if not header:
                return "is empty"
            not_tokens: dict[str, str] = {}
            not_times: dict[str, str] = {}
            last = dict.fromkeys(header, -math.inf)
            num_rows = 0
            for row in rows:
                if not row:
                    continue  # a blank line
                num_rows += 1
                if len(row) != len(header):
                    # One field more would make pandas take the first column as the index and
                    # shift every other one: refused, like one field less.
                    return f"line {rows.line_num} has {len(row)} fields, the header {len(header)}"
                for column, cell in zip(header, row, strict=False):
                    bad_tokens, bad_time, last[column] = _cell_problems(cell, last[column])
                    where = f"line {rows.line_num} holds {cell[:30]!r}"
                    if bad_tokens:
                        not_tokens.setdefault(column, where)
                    if bad_time:
                        not_times.setdefault(column, where)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        return f"cannot be read as a CSV file ({exc})"
    return CsvInfo(header, num_rows, not_tokens, not_times)


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
        ctx.fail(key, f"{shown!r} {info}")
    if info.num_rows == 0:
        ctx.fail(key, f"{shown!r} has no rows")
    for columns, problems, wanted in (
        (tokens, info.not_tokens, f"a whole number of tokens from 1 to {MAX_COUNT:,}"),
        (times, info.not_times, "a finite time at or after the previous row's"),
    ):
        for column in columns:
            if column not in info.columns:
                have = choices_text(info.columns)
                ctx.fail(key, f"{shown!r} has no column {column!r}; it has: {have}")
            if column in problems:
                ctx.fail(key, f"{shown!r} column {column!r}: {problems[column]}, not {wanted}")
    return info


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

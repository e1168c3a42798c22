"""Reading a CSV data file row by row, as every CSV reader of pagesim that does not use pandas reads
one (a scenario's trace at the edge, session traces, acceptance tables), the way pandas reads the
request traces at run time:

- UTF-8, with or without the byte-order mark spreadsheet exports write first;
- a regular file only (a FIFO or a device would block or never end), and bounded in size;
- header cells stripped of spaces; blank lines (nothing but spaces) skipped;
- a row with more or fewer fields than the header refused: pandas would take one field more as
  the index and shift every other column, and one field fewer leaves a cell missing.

Problems are `InputError`s beginning with the file's label and the line.
"""

from __future__ import annotations

import csv
import stat as stat_mode
from collections.abc import Iterator
from pathlib import Path

from pagesim.simulator.core.errors import InputError


def csv_rows(path: Path, label: str, max_bytes: int) -> Iterator[tuple[int, list[str]]]:
    """Yields (1, header) first, then (line, cells) for each data row; InputError naming `label`
    (and the line) when the file cannot be read so."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise InputError(f"{label}: no such file") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{label}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    if not stat_mode.S_ISREG(info.st_mode):
        raise InputError(f"{label}: not a regular file (a folder, FIFO or device?)")
    if info.st_size > max_bytes:
        raise InputError(f"{label}: larger than {max_bytes >> 20} MiB: not a data file")
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            reader = csv.reader(handle)
            header = [cell.strip() for cell in next(reader, [])]
            if not any(header):
                raise InputError(f"{label}: empty (no header line)")
            yield 1, header
            for row in reader:
                if len(row) <= 1 and not "".join(row).strip():
                    continue  # a blank line (a line of commas is a row of empty cells)
                if len(row) != len(header):
                    raise InputError(
                        f"{label} line {reader.line_num}: {len(row)} fields, the header has "
                        f"{len(header)}"
                    )
                yield reader.line_num, row
    except OSError as exc:
        raise InputError(f"{label}: cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"{label}: not a UTF-8 CSV file ({exc})") from None

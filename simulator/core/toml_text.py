"""TOML text from Python values: the one writer behind a resolved scenario written back
(scenario/toml_writer.py) and the hardware presets written back (core/preset_files.py).

Python's standard library reads TOML (`tomllib`) but does not write it; these few rules cover
what pagesim writes: strings, numbers, booleans, arrays, inline tables, and documents of nested
tables and arrays of tables.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from datetime import date, time
from enum import Enum
from pathlib import Path

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {
    "\\": "\\\\",
    '"': '\\"',
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def _escape_control(char: str) -> str:
    return f"\\u{ord(char):04x}" if ord(char) < 0x20 or ord(char) == 0x7F else char


def toml_value(value: object) -> str:
    """A TOML literal: strings, numbers, booleans, arrays, inline tables, dates and times; an
    Enum as its value, a Path as its text. Floats as Python writes them, so they read back
    exactly."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return toml_value(value.value)
    if isinstance(value, Path):
        return toml_value(str(value))
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + "".join(_ESCAPES.get(c) or _escape_control(c) for c in value) + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items())
        return "{ " + items + " }"
    if isinstance(value, date | time):  # TOML's own date and time literals
        return str(value)
    return toml_value(str(value))


def toml_key(key: str) -> str:
    """A key as TOML writes it: bare when it can be, quoted otherwise."""
    return key if _BARE_KEY.fullmatch(key) else toml_value(key)


def _is_table_array(value: object) -> bool:
    if not isinstance(value, list | tuple) or not value:
        return False
    return all(isinstance(v, dict) for v in value)


def _table_lines(path: str, table: Mapping[str, object], is_array: bool) -> Iterator[str]:
    scalars = {k: v for k, v in table.items() if not isinstance(v, dict) and not _is_table_array(v)}
    if is_array:
        yield f"\n[[{path}]]"
    elif scalars and path:
        yield f"\n[{path}]"
    yield from (f"{toml_key(k)} = {toml_value(v)}" for k, v in scalars.items())
    for key, value in table.items():
        inner = f"{path}.{toml_key(key)}" if path else toml_key(key)
        if isinstance(value, dict):
            yield from _table_lines(inner, value, False)
        elif _is_table_array(value):
            assert isinstance(value, list | tuple)
            for item in value:
                yield from _table_lines(inner, item, True)


def toml_document(tables: Mapping[str, object], header: str = "") -> str:
    """A whole TOML document: `tables`' plain values first, then each nested dict as a
    [table] and each list of dicts as an [[array of tables]], depth first. `header`: comment
    lines put on top."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    lines += _table_lines("", tables, False)
    return "\n".join(lines).lstrip("\n") + "\n"

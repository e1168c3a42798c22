"""Readable numbers: seconds as µs/ms/s, shares as %, bytes as KiB…GiB, counts with separators."""

from __future__ import annotations

from pagesim.reports.frames import as_number
from pagesim.reports.glossary import Unit

MISSING = "–"  # shown for a metric that is absent, None or NaN


def format_seconds(value: float) -> str:
    magnitude = abs(value)
    if magnitude == 0:
        return "0 s"
    if magnitude < 1e-3:
        return f"{value * 1e6:.3g} µs"
    if magnitude < 1:
        return f"{value * 1e3:.3g} ms"
    if magnitude < 1000:
        return f"{value:.3g} s"
    return f"{value:,.0f} s"


def format_bytes(value: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


def format_number(value: float, digits: int = 3) -> str:
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def _scaled(value: float, unit: str) -> str:
    """J or W with k/M prefixes: 0.42 J, 850 W, 3.2 kW, 1.1 MJ."""
    for prefix, scale in (("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def format_value(value: object, unit: Unit | None) -> str:
    """One summary value for a table cell; strings pass through; missing values show a dash."""
    if isinstance(value, str):
        return value
    x = as_number(value)
    if x is None:
        return MISSING
    match unit:
        case Unit.SECONDS:
            return format_seconds(x)
        case Unit.SECONDS_PER_TOKEN:
            return f"{format_seconds(x)}/token"
        case Unit.SHARE:
            return f"{x * 100:.1f}%"
        case Unit.BYTES:
            return format_bytes(x)
        case Unit.REQ_PER_S:
            return f"{x:.3g} req/s"
        case Unit.TOK_PER_S:
            return f"{x:,.0f} tok/s" if abs(x) >= 100 else f"{x:.3g} tok/s"
        case Unit.TOKENS:
            return f"{format_number(x)} tokens"
        case Unit.JOULES:
            return _scaled(x, "J")
        case Unit.WATTS:
            return _scaled(x, "W")
        case _:
            return format_number(x)

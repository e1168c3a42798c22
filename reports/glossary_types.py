"""The glossary's types: a summary key's unit and entry (reports.glossary holds the entries)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Unit(Enum):
    COUNT = "count"
    SECONDS = "s"
    SECONDS_PER_TOKEN = "s/token"
    SHARE = "share"  # a fraction in [0, 1], shown as a percentage
    REQ_PER_S = "req/s"
    TOK_PER_S = "tok/s"
    BYTES = "bytes"
    TOKENS = "tokens"
    RATIO = "ratio"  # a dimensionless quotient, e.g. max / mean
    JOULES = "J"
    WATTS = "W"


@dataclass(frozen=True, slots=True)
class SummaryMetric:
    key: str
    label: str  # short, for table rows
    unit: Unit
    section: str  # the summary-table group it is shown in
    definition: str  # a plain sentence, with the formula where there is one


@dataclass(frozen=True, slots=True)
class GlossaryEntry:
    name: str
    definition: str

"""The published figures pagesim is checked against, as read from calibration/published/:

    measured.csv   the training set (vLLM CI builds 9523 and 9555): `judge` yes (the fit must meet
                   it) or info (printed only)
    held_out.csv   published runs kept apart (README.md there says how they were chosen): printed
                   beside their source, never fitted, never a pass/fail criterion

Both share the columns id, metric, measured, unit, gpu and source; measured.csv adds `judge`.
Lines starting with # are comments. A bad file is one clear line naming the file, row, field and
the valid choices.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Collection
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from pagesim.simulator.core.errors import InputError, choices_text

PUBLISHED_DIR = Path(__file__).parent / "published"
MEASURED_CSV = PUBLISHED_DIR / "measured.csv"
HELD_OUT_CSV = PUBLISHED_DIR / "held_out.csv"


class Role(Enum):
    """What a row is for."""

    JUDGED = "yes"  # training set: the fit must meet it
    INFO = "info"  # training set, printed only (e.g. set by an unpublished sample)
    HELD_OUT = "held-out"  # never fitted, never a criterion: reported as it falls


@dataclass(frozen=True, slots=True)
class MeasuredRow:
    """A row of measured.csv or held_out.csv."""

    id: str  # the CI test and statistic, e.g. "latency_llama70B_tp4 median"
    test: str
    metric: str
    measured: float
    unit: str
    gpu: str  # the CI's GPU name
    role: Role
    source: str

    @property
    def is_judged(self) -> bool:
        return self.role is Role.JUDGED


_COLUMNS = ("id", "metric", "measured", "unit", "gpu", "source")


def read_rows(
    path: Path, tests: Collection[str], metrics: Collection[str], gpus: Collection[str]
) -> list[MeasuredRow]:
    """The rows of a measured.csv (with `judge`) or held_out.csv (without), checked against the
    known CI tests, metrics and GPU names."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read it: {exc}") from None
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    reader = csv.DictReader(io.StringIO("\n".join(lines)))
    fields = reader.fieldnames or ()
    missing = [c for c in _COLUMNS if c not in fields]
    if missing:
        raise InputError(
            f"{path}: missing column(s) {', '.join(missing)}; need {_COLUMNS} "
            "(and judge, in a training file)"
        )
    has_judge = "judge" in fields
    rows = []
    for number, raw in enumerate(reader, start=2):
        where = f"{path}: row {number}"
        test = raw["id"].split()[0] if raw["id"] else ""
        if test not in tests:
            raise InputError(f"{where}: unknown test {test!r}; known: {choices_text(tests)}")
        if raw["metric"] not in metrics:
            raise InputError(f"{where}: metric {raw['metric']!r}; valid: {choices_text(metrics)}")
        if raw["gpu"] not in gpus:
            raise InputError(f"{where}: gpu {raw['gpu']!r}; valid: {choices_text(gpus)}")
        role = Role.HELD_OUT
        if has_judge:
            if raw["judge"] not in (Role.JUDGED.value, Role.INFO.value):
                raise InputError(f"{where}: judge {raw['judge']!r}; valid: yes, info")
            role = Role(raw["judge"])
        try:
            measured = float(raw["measured"])
        except (TypeError, ValueError):
            measured = math.nan
        if not (math.isfinite(measured) and measured > 0):
            raise InputError(f"{where}: measured {raw['measured']!r} is not a positive number")
        rows.append(
            MeasuredRow(
                raw["id"],
                test,
                raw["metric"],
                measured,
                raw["unit"],
                raw["gpu"],
                role,
                raw["source"] or "",
            )
        )
    if not rows:
        raise InputError(f"{path}: no rows")
    return rows

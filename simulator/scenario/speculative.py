"""Reading [systems.speculative] (or [defaults.speculative]) into a `SpeculativeConfig`.

    [systems.speculative]
    method = "eagle"                 # draft-model, eagle, mtp, ngram
    num_speculative_tokens = 3       # k drafts per decoding sequence per step
    acceptance_rate = 0.7            # or acceptance_rates = [0.8, 0.6, 0.4] (one per position)
                                     # or acceptance_file = "accepted.csv" (num_accepted,weight)
    draft_model = "llama-3.2-1b"     # method draft-model only: a catalog model

Every problem is one line naming the file, the key, what is wrong and the valid choices.

The same idea in other layers: simulator/policies/speculative.py schedules the drafts,
simulator/execution/speculative.py prices them.
"""

from __future__ import annotations

import math
from pathlib import Path

from pagesim.simulator.core.catalog import MODELS
from pagesim.simulator.core.config import SpecMethod, SpeculativeConfig
from pagesim.simulator.core.csv_rows import csv_rows
from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.core.numbers import Range
from pagesim.simulator.scenario.table import Table, described, display, show, suggest

MAX_SPECULATIVE_TOKENS = 64  # the simulator's bound (vLLM sets none); deployments use 1-8
MAX_ACCEPTANCE_FILE_BYTES = 1 << 20
_ACCEPTANCE_KEYS = ("acceptance_rate", "acceptance_rates", "acceptance_file")


def read_speculative(parent: Table, key: str) -> SpeculativeConfig:
    t = parent.table(key)
    method = t.choice("method", SpecMethod)
    k = t.integer("num_speculative_tokens", hi=MAX_SPECULATIVE_TOKENS)
    given = [name for name in _ACCEPTANCE_KEYS if t.has(name)]
    if len(given) != 1:
        t.fail(
            "acceptance_rate" if not given else given[1],
            "give exactly one acceptance model: acceptance_rate (one rate in [0, 1]), "
            "acceptance_rates (one rate per position, k of them) or acceptance_file (a CSV "
            f"of num_accepted,weight rows); given: {choices_text(given) if given else 'none'}",
        )
    rate = t.fraction("acceptance_rate", None)
    rates = _rates(t, k) if t.has("acceptance_rates") else ()
    path = None
    pmf: tuple[float, ...] = ()
    if t.has("acceptance_file"):
        path = t.ctx.resolve(t.text("acceptance_file"))
        pmf = _read_pmf(t, path, k)
    draft = t.text("draft_model", None)
    if method is SpecMethod.DRAFT_MODEL:
        if draft is None:
            t.fail(
                "draft_model",
                f"required by method 'draft-model': a catalog model; valid: {choices_text(MODELS)}",
            )
        if draft.lower() not in MODELS:
            t.fail(
                "draft_model",
                f"unknown model {draft!r}{suggest(draft, list(MODELS))}; valid: "
                f"{choices_text(MODELS)}",
            )
        draft = draft.lower()
    elif draft is not None:
        t.fail("draft_model", f"only method 'draft-model' reads it; the method is {method.value!r}")
    return SpeculativeConfig(method, k, rate, rates, path, draft, pmf)


def _rates(t: Table, k: int) -> tuple[float, ...]:
    value = t.data["acceptance_rates"]
    if not isinstance(value, list) or len(value) != k:
        t.fail(
            "acceptance_rates",
            f"expected an array of {k} rates in [0, 1] (one per draft position, "
            f"num_speculative_tokens = {k}), got {described(value)}",
        )
    for i, rate in enumerate(value):
        ok = isinstance(rate, int | float) and not isinstance(rate, bool)
        if not ok or not 0.0 <= rate <= 1.0 or not math.isfinite(rate):
            t.fail("acceptance_rates", f"rate {i + 1} must be in [0, 1], got {show(rate)}")
    rates = tuple(float(r) for r in value)
    for i in range(1, k):
        if rates[i] > rates[i - 1]:
            t.fail(
                "acceptance_rates",
                f"rate {i + 1} ({rates[i]:g}) exceeds rate {i} ({rates[i - 1]:g}): a draft is "
                "accepted only after every draft before it, so per-position rates (vLLM's "
                "accepted-per-position / drafts) never increase",
            )
    return rates


# A weight is a count or share of verifications: any finite number >= 0 (normalized below).
_WEIGHT = Range(0, math.inf)


def _cell(
    t: Table, where: str, cells: dict[str, str], column: str, allowed: Range, why: str = ""
) -> float:
    """The row's `column`, a number `allowed` holds, or a failure of acceptance_file."""
    value = allowed.take(cells[column])
    if value is None:
        t.fail(
            "acceptance_file",
            f"{where}: {column} must be {allowed.describe()}{why}, got {cells[column][:40]!r}",
        )
    return value


def _read_pmf(t: Table, path: Path, k: int) -> tuple[float, ...]:
    """The file's weights over 0..k accepted drafts, normalized. Read as the traces are
    (simulator/core/csv_rows.py, simulator/core/numbers.py)."""
    name = display(path)
    try:
        rows = list(csv_rows(path, repr(name), MAX_ACCEPTANCE_FILE_BYTES))
    except InputError as exc:
        t.fail("acceptance_file", str(exc))
    header = rows[0][1]
    if not {"num_accepted", "weight"} <= set(header):
        t.fail(
            "acceptance_file",
            f"{name!r} needs the columns num_accepted,weight; it has {choices_text(header)}",
        )
    accepted_range = Range(0, k, whole=True)
    weights = [0.0] * (k + 1)
    for line, row in rows[1:]:
        cells = dict(zip(header, row, strict=True))
        where = f"{name!r} line {line}"
        accepted = _cell(t, where, cells, "num_accepted", accepted_range, f" ({k} drafts)")
        weight = _cell(t, where, cells, "weight", _WEIGHT)
        weights[int(accepted)] += weight
    # Scaled by the largest first: weights near the float maximum would add up to infinity.
    largest = max(weights)
    if not largest > 0:
        t.fail("acceptance_file", f"{name!r}: the weights add up to 0; give at least one > 0")
    if math.isinf(largest):
        t.fail("acceptance_file", f"{name!r}: the weights of one num_accepted add up to infinity")
    scaled = [w / largest for w in weights]
    total = sum(scaled)
    return tuple(w / total for w in scaled)

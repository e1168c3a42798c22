"""Samplers: where each column of a request comes from, `n` values per call.

A sampler's `take(n, rng)` returns the next n values of one column (arrival times, prompt or
output lengths, priorities, prefix groups) as an array [n]. Some draw from `rng` (uniform,
lognormal, resampled and gamma ones, prefix groups); the rest (fixed, trace rows, constant rate)
draw nothing, so which sampler a config picks decides which numbers the generator hands out; the
order the columns are asked for is fixed by simulator/workload/stream.py. `length_sampler` and
`arrival_sampler` check a length distribution or arrival process and pick its sampler.

Prompt and output lengths come in pairs (`LengthPairs`): drawn each on its own (`Independent`,
prompt first), or a whole row of a file at a time (`ResampledRows`), so that a trace's long
prompts keep their short answers; `lengths_sampler` picks one and says which (`LengthSource`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd

from pagesim.simulator.core.config import (
    ArrivalKind,
    ArrivalProcess,
    EmpiricalPairing,
    LengthDist,
    LengthKind,
    WorkloadConfig,
)
from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.workload.number_checks import positive_float, positive_int
from pagesim.simulator.workload.trace_files import ARRIVAL_COLUMN, BUILTIN_TRACES
from pagesim.simulator.workload.traces import TRACE_COLUMNS, read_csv, resolve_trace, token_column

MAX_TOKENS = 2**40  # lognormal draws are clipped here so the cast to int64 never wraps


class Sampler(Protocol):
    def take(self, n: int, rng: np.random.Generator) -> np.ndarray: ...


@dataclass(slots=True)
class Fixed:
    value: int | float

    def take(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.full(n, self.value)


@dataclass(slots=True)
class Uniform:
    low: int
    high: int

    def take(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(self.low, self.high, size=n, endpoint=True, dtype=np.int64)


@dataclass(slots=True)
class Lognormal:
    mu: float
    sigma: float

    def take(self, n: int, rng: np.random.Generator) -> np.ndarray:
        draws = rng.lognormal(self.mu, self.sigma, size=n)
        return np.clip(np.rint(draws), 1, MAX_TOKENS).astype(np.int64)


@dataclass(slots=True)
class Resample:
    """Draws with replacement from `values` [num_values]."""

    values: np.ndarray

    def take(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.values[rng.integers(0, len(self.values), size=n)]


@dataclass(slots=True)
class Rows:
    """Consecutive slices of `values` [num_requests]: trace rows, explicit requests."""

    values: np.ndarray
    cursor: int = 0

    def take(self, n: int, rng: np.random.Generator) -> np.ndarray:
        out = self.values[self.cursor : self.cursor + n]
        self.cursor += n
        return out


@dataclass(slots=True)
class GammaGaps:
    """Arrival times from gamma gaps (shape 1 is exponential: numpy draws the same numbers)."""

    shape: float
    scale_s: float
    last_s: float = 0.0

    def take(self, n: int, rng: np.random.Generator) -> np.ndarray:
        times_s = self.last_s + np.cumsum(rng.gamma(self.shape, self.scale_s, size=n))
        self.last_s = float(times_s[-1])
        return times_s


@dataclass(slots=True)
class Constant:
    """Request i arrives at (i + 1) / rate, computed directly so the times stay exact."""

    rate_per_s: float
    num_done: int = 0

    def take(self, n: int, rng: np.random.Generator) -> np.ndarray:
        times_s = np.arange(self.num_done + 1, self.num_done + n + 1) / self.rate_per_s
        self.num_done += n
        return times_s


@dataclass(slots=True)
class PrefixGroups:
    """Group index per request; `len(cumulative)` means no group."""

    cumulative: np.ndarray  # [num_groups] running sum of the fractions

    def take(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if len(self.cumulative) == 0:
            return np.zeros(n, dtype=np.int64)
        return np.searchsorted(self.cumulative, rng.random(n), side="right")


class LengthPairs(Protocol):
    def take(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]: ...


@dataclass(slots=True)
class Independent:
    """Prompt lengths [n], then output lengths [n], each from its own sampler."""

    prompt: Sampler
    output: Sampler

    def take(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        return self.prompt.take(n, rng), self.output.take(n, rng)


@dataclass(slots=True)
class ResampledRows:
    """Whole rows drawn with replacement (one draw per request): prompt and output [num_rows]."""

    prompt: np.ndarray
    output: np.ndarray

    def take(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        rows = rng.integers(0, len(self.prompt), size=n)
        return self.prompt[rows], self.output[rows]


class LengthSource(Enum):
    """Where a request's prompt and output lengths came from, as a report says it."""

    TRACE_ROWS = "trace rows"  # both from the workload trace, row by row, in order
    RESAMPLED_ROWS = "resampled rows"  # both from one random row of one file
    INDEPENDENT = "independent"  # each drawn on its own
    EXPLICIT = "explicit requests"  # written out in the scenario

    @property
    def is_row(self) -> bool:
        """Whether each request's two lengths are one row of a file (and clip as one)."""
        return self in (LengthSource.TRACE_ROWS, LengthSource.RESAMPLED_ROWS)


def lengths_sampler(
    workload: WorkloadConfig, trace: pd.DataFrame | None
) -> tuple[LengthPairs, LengthSource]:
    """The prompt and output lengths of `workload`, and where they come from.

    Two `empirical` lengths read from one file are drawn a whole row at a time unless
    `empirical_pairing` is INDEPENDENT: resampling each column on its own would give the code
    trace's long prompts the conversation-length answers of other rows.
    """
    prompt, output = workload.prompt, workload.output
    pairing = workload.empirical_pairing
    both_empirical = prompt.kind is LengthKind.EMPIRICAL and output.kind is LengthKind.EMPIRICAL
    if pairing is not None and not both_empirical:
        raise InputError(
            "workload.empirical_pairing: only used when prompt and output are both "
            f'kind = "empirical" (they are {prompt.kind.value!r} and {output.kind.value!r})'
        )
    each = Independent(
        length_sampler(prompt, "prompt", trace), length_sampler(output, "output", trace)
    )
    if prompt.kind is LengthKind.TRACE and output.kind is LengthKind.TRACE:
        return each, LengthSource.TRACE_ROWS
    if not both_empirical or pairing is EmpiricalPairing.INDEPENDENT:
        return each, LengthSource.INDEPENDENT
    prompt_path = _empirical_path(prompt, "workload.prompt")
    output_path = _empirical_path(output, "workload.output")
    if prompt_path.resolve() != output_path.resolve():
        if pairing is EmpiricalPairing.ROWS:
            raise InputError(
                'workload.empirical_pairing: "rows" draws both lengths from one row of one '
                f"file, but the prompt reads {prompt_path} and the output {output_path}; read "
                'one file, or set "independent"'
            )
        return each, LengthSource.INDEPENDENT
    assert isinstance(each.prompt, Resample) and isinstance(each.output, Resample)
    return ResampledRows(each.prompt.values, each.output.values), LengthSource.RESAMPLED_ROWS


def _empirical_path(dist: LengthDist, where: str) -> Path:
    if dist.path is not None:
        return resolve_trace(dist.path, f"{where}.path")
    if dist.trace_name is not None:
        return resolve_trace(dist.trace_name, f"{where}.trace_name")
    raise InputError(
        f"{where}: kind = empirical needs path (a CSV file) or trace_name "
        f"(built-in: {choices_text(BUILTIN_TRACES)})"
    )


def length_sampler(dist: LengthDist, part: str, trace: pd.DataFrame | None) -> Sampler:
    where = f"workload.{part}"
    kind = dist.kind
    if kind is LengthKind.FIXED:
        return Fixed(positive_int(dist.value, f"{where}.value"))
    if kind is LengthKind.UNIFORM:
        low = positive_int(dist.low, f"{where}.low")
        high = positive_int(dist.high, f"{where}.high")
        if high < low:
            raise InputError(f"{where}: high ({high}) must be >= low ({low})")
        return Uniform(low, high)
    if kind is LengthKind.LOGNORMAL:
        mean = positive_float(dist.mean, f"{where}.mean")
        cv = positive_float(dist.cv, f"{where}.cv", allow_zero=True)
        sigma2 = math.log1p(cv * cv)
        return Lognormal(mu=math.log(mean) - sigma2 / 2, sigma=math.sqrt(sigma2))
    if kind is LengthKind.EMPIRICAL:
        path = _empirical_path(dist, where)
        column = dist.column or TRACE_COLUMNS[part]  # default: the trace's own column
        values = token_column(read_csv(path, where), column, path, f"{where}.column")
        if len(values) == 0:
            raise InputError(f"{where}.column: column {column!r} of {path} has no rows")
        return Resample(values)
    if kind is LengthKind.TRACE:
        assert trace is not None  # workload._plan loads the trace whenever a kind is TRACE
        return Rows(trace[TRACE_COLUMNS[part]].to_numpy())
    raise InputError(
        f"{where}.kind: unknown {kind!r}; valid: {choices_text(k.value for k in LengthKind)}"
    )


def arrival_sampler(
    arrival: ArrivalProcess, trace: pd.DataFrame | None, path: Path | None, time_scale: float
) -> Sampler:
    where = "workload.arrival"
    kind = arrival.kind
    if kind is ArrivalKind.BURST:
        return Fixed(0.0)
    if kind is ArrivalKind.TRACE:
        assert trace is not None
        if ARRIVAL_COLUMN not in trace.columns:
            raise InputError(
                f"{where}.kind = trace: {path} has no {ARRIVAL_COLUMN!r} column (it has "
                f"{choices_text(trace.columns)}); pair it with poisson, gamma or constant arrivals"
            )
        times_s = trace[ARRIVAL_COLUMN].to_numpy()
        return Rows((times_s - times_s[0]) / time_scale)
    rate = positive_float(arrival.rate_per_s, f"{where}.rate_per_s")
    if kind is ArrivalKind.POISSON:
        return GammaGaps(shape=1.0, scale_s=1.0 / rate)
    if kind is ArrivalKind.GAMMA:
        if arrival.cv == 0:
            raise InputError(f"{where}.cv must be > 0 for gamma arrivals (cv = 0: use constant)")
        cv = positive_float(arrival.cv, f"{where}.cv")
        shape = 1.0 / (cv * cv)  # mean gap = shape * scale = 1 / rate
        return GammaGaps(shape=shape, scale_s=1.0 / (rate * shape))
    if kind is ArrivalKind.CONSTANT:
        return Constant(rate)
    raise InputError(
        f"{where}.kind: unknown {kind!r}; valid: {choices_text(k.value for k in ArrivalKind)}"
    )

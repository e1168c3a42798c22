"""Reading a profile file: the schema and version it must carry, typed access to its fields with
one-line InputErrors naming file and key, whether it was measured for the scenario's model, and
every number `ProfileModel` prices with (`ProfileTerms`), each finite and within a bound no real
GPU step exceeds.

The file itself is written by calibration/profile.py (measured by pagesim) or
calibration/vidur_import.py (imported); `ProfileModel` (profile.py) prices steps from it.
`check_profile` reads and checks a profile for a scenario without building a model (`pagesim
validate` and any scenario that names a profile call it).
"""

from __future__ import annotations

import json
import math
import re
import stat as stat_mode
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from pagesim.simulator.core.catalog import KVDtype, ModelSpec
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.limits import MAX_BLOCK_SIZE
from pagesim.simulator.core.model_spec import DENSE_SHAPE_FIELDS, LayerKind
from pagesim.simulator.core.numbers import Range, short_repr

# No real step is this slow: a profile time above it is a broken file, not a measurement (it would
# otherwise price a run to infinity). Per-layer and per-unit coefficients are bounded by 1 s.
MAX_STEP_S = 3600.0
MAX_COEF_S = 1.0
PROFILE_SCHEMA = "pagesim-profile"
PROFILE_SCHEMA_VERSION = 1
# ModelSpec fields a profile must match (name, max_seq_len and num_params do not change timings).
SHAPE_FIELDS = tuple(
    f for f in DENSE_SHAPE_FIELDS if f not in ("name", "max_seq_len", "num_params")
)


# The longest a profiled piece of one step may take, per layer or per token (seconds): kernels
# are measured in micro- to milliseconds, so a minute is already absurd. Larger values are
# refused, since finite ones can still multiply (x layers, x tokens) into an infinite step.
MAX_PROFILE_SECONDS = 60.0
# Counts and rates (tokens, sequences, bytes per second) a profile may give.
MAX_PROFILE_COUNT = 1e18
_PROFILE_COUNT = Range(0, MAX_PROFILE_COUNT)
# The top of a term's range of validity: a bound, not a measurement. A term that holds without a
# bound (an attention term taken from the roofline: calibration/vidur_sections.py) writes 1e30
# there, as every shipped profile imported from Vidur does for its prefill's sum of squares.
MAX_PROFILE_RANGE = 1e30
_BLOCK_TOKENS = Range(1, MAX_BLOCK_SIZE, whole=True, unit="tokens")
# A profile file: a few hundred KB with its points, nested 5 deep; far beyond either is not one
# (and a JSON nested 50,000 deep would exhaust Python's recursion in json.loads).
MAX_PROFILE_BYTES = 64 * 2**20
MAX_PROFILE_DEPTH = 32
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")


class ProfileReader:
    """Typed access to a profile's JSON with one-line InputErrors naming file and key."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data

    def fail(self, problem: str) -> InputError:
        return InputError(f"{self.path}: {problem}")

    def get(self, dotted: str) -> Any:
        node: Any = self.data
        for key in dotted.split("."):
            if isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            elif isinstance(node, dict) and key in node:
                node = node[key]
            else:
                raise self.fail(f"missing field {dotted!r}")
        return node

    def checked(self, dotted: str, value: object, allowed: Range) -> float:
        """`value` (found at `dotted`), a JSON number `allowed` holds, or an InputError (its
        upper bound the largest plausible value: no GPU step, count or rate comes near it)."""
        number = None if isinstance(value, str) else allowed.take(value)
        if number is None:
            bound = "" if math.isinf(allowed.hi) else " (its top: the largest plausible value)"
            raise self.fail(
                f"field {dotted!r} must be {allowed.describe()}{bound}, got {short_repr(value)}"
            )
        return number

    def number(self, dotted: str, minimum: float = 0.0, maximum: float = math.inf) -> float:
        return self.checked(dotted, self.get(dotted), Range(minimum, maximum))

    def series(
        self, dotted_x: str, dotted_y: str, max_y: float = MAX_STEP_S
    ) -> tuple[list[float], list[float]]:
        """A measured curve: x from 0 up (strictly increasing), and a time above 0 at each (a
        measured kernel is never free: a zero would price steps at nothing and divide by 0 in
        MFU / MBU)."""
        xs, ys = self.get(dotted_x), self.get(dotted_y)
        if not isinstance(xs, list) or not isinstance(ys, list) or not xs or len(xs) != len(ys):
            raise self.fail(f"{dotted_x!r} and {dotted_y!r} must be non-empty lists of one length")
        times = Range(0, max_y, lo_open=True, unit="seconds")
        x = [self.checked(f"{dotted_x}.{i}", v, _PROFILE_COUNT) for i, v in enumerate(xs)]
        y = [self.checked(f"{dotted_y}.{i}", v, times) for i, v in enumerate(ys)]
        if any(b <= a for a, b in pairwise(x)):
            raise self.fail(f"{dotted_x!r} must be strictly increasing")
        return x, y

    def coefficients(self, section: str, names: Sequence[str]) -> tuple[float, ...]:
        """A fitted cost's coefficients: each from 0 to MAX_COEF_S s, not all 0 (the fit always
        prices the measured points above 0: calibration/fit.py fit_nonnegative)."""
        found = tuple(self.number(f"{section}.coef.{n}", maximum=MAX_COEF_S) for n in names)
        if not any(found):
            raise self.fail(
                f"field '{section}.coef': every coefficient is 0, which prices the term at "
                "nothing; a measured profile has at least one above 0"
            )
        return found


def json_depth(text: str) -> int:
    """How deep the arrays and objects of JSON `text` nest (brackets inside strings ignored)."""
    depth = deepest = 0
    for bracket in _BRACKET.findall(_STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def load_profile(path: str | Path) -> dict[str, Any]:
    """The profile JSON as a dict, or an InputError saying what is wrong with the file."""
    path = Path(path)
    try:
        if not stat_mode.S_ISREG(path.stat().st_mode):
            raise InputError(f"{path}: not a regular file (a folder, FIFO or device?)")
        if path.stat().st_size > MAX_PROFILE_BYTES:
            raise InputError(f"{path}: larger than {MAX_PROFILE_BYTES >> 20} MiB: not a profile")
        text = path.read_text()
        if json_depth(text) > MAX_PROFILE_DEPTH:
            raise InputError(
                f"{path}: arrays or objects nested more than {MAX_PROFILE_DEPTH} deep: not a "
                "profile"
            )
        data = json.loads(text)
    except FileNotFoundError:
        raise InputError(
            f"{path}: no such profile file (make one with `pagesim calibrate`)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read profile: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON (line {exc.lineno}): {exc.msg}") from None
    except RecursionError:  # the depth check counts brackets; a broken file may hide some
        raise InputError(f"{path}: not a profile: arrays or objects nested too deeply") from None
    except ValueError as exc:  # e.g. an integer beyond Python's digit limit
        raise InputError(f"{path}: not valid JSON: {str(exc).split(';')[0]}") from None
    if not isinstance(data, dict) or data.get("schema") != PROFILE_SCHEMA:
        raise InputError(f'{path}: not a pagesim profile (no "schema": "{PROFILE_SCHEMA}")')
    version = data.get("schema_version")
    if version != PROFILE_SCHEMA_VERSION:
        raise InputError(
            f"{path}: profile schema version {version!r}, this pagesim reads version "
            f"{PROFILE_SCHEMA_VERSION}; re-run `pagesim calibrate`"
        )
    return data


def check_shapes(
    r: ProfileReader, model: ModelSpec, tensor_parallel: int, kv_dtype: KVDtype
) -> None:
    """InputError unless the profile was measured for `model`'s shapes, at `tensor_parallel`,
    with a 16-bit KV cache."""
    measured = r.get("model")
    if not isinstance(measured, dict):
        raise r.fail("field 'model' must be an object of model shapes")
    different = [
        f"{f} {measured.get(f)!r} (model has {getattr(model, f)!r})"
        for f in SHAPE_FIELDS
        if measured.get(f) != getattr(model, f)
    ]
    if different:
        raise r.fail(
            f"measured for {measured.get('name')!r} with other shapes than {model.name!r}: "
            + "; ".join(different)
        )
    measured_tp = r.get("measured.tensor_parallel")
    if measured_tp != tensor_parallel:
        raise r.fail(
            f"measured at tensor_parallel {measured_tp!r}, the scenario uses {tensor_parallel}"
        )
    if kv_dtype.bits != 16:
        raise r.fail(
            f"measured with a 16-bit KV cache; {kv_dtype.value} KV was not measured "
            "(use the roofline model)"
        )


@dataclass(frozen=True)
class Series:
    """A piecewise-linear curve of the profile (x ascending) and its largest measured x."""

    xs: list[float]
    ys: list[float]

    @property
    def top(self) -> float:
        return self.xs[-1]


@dataclass(frozen=True)
class ProfileTerms:
    """Every number a profile prices with, per layer where the file says per layer, checked."""

    path: Path
    provenance: dict[str, Any]
    sources: dict[str, str]
    measured_block_size: int | None
    decode: tuple[float, float, float]  # a_s, b_s_per_kv_token, c_s_per_seq (per layer)
    # a_s, b_s_per_token_sq, c_s_per_token, d_s_per_new_token_sq (per layer; d is optional: the
    # causal triangle's extra cost, which imported profiles fit and pagesim's calibration does not)
    prefill: tuple[float, float, float, float]
    gemm: Series  # per layer, over tokens
    lm_head: Series  # per step, over sequences
    all_reduce: Series | None  # per call, over message bytes (None: the roofline's link)
    empty_step_s: float
    adds_host_overhead: bool  # imported profiles: the engine era's host overhead is added
    copy_bps: float
    max_decode_kv: float
    max_decode_seqs: float
    max_prefill_sq: float
    max_prefill_tokens: float
    held_out: dict[str, Any]


def read_terms(r: ProfileReader) -> ProfileTerms:
    """The profile's numbers (InputError naming the file and field when one is unusable)."""
    data = r.data
    provenance = r.get("provenance")
    if not isinstance(provenance, dict) or "device" not in provenance:
        raise r.fail("field 'provenance' must be an object naming the 'device'")
    sources = data.get("sources", {})
    if not isinstance(sources, dict) or not all(isinstance(v, str) for v in sources.values()):
        raise r.fail("field 'sources' must map terms to text")
    measured = data.get("measured")
    block = None
    if isinstance(measured, dict) and measured.get("block_size") is not None:
        block = int(r.checked("measured.block_size", measured["block_size"], _BLOCK_TOKENS))

    all_reduce = None
    if "all_reduce" in data:
        all_reduce = Series(*r.series("all_reduce.bytes", "all_reduce.time_s", max_y=60.0))
    a, b, c = r.coefficients("decode_attention", ("a_s", "b_s_per_kv_token", "c_s_per_seq"))
    prefill = ["a_s", "b_s_per_token_sq", "c_s_per_token"]
    coef = r.get("prefill_attention.coef")
    if isinstance(coef, dict) and "d_s_per_new_token_sq" in coef:
        prefill.append("d_s_per_new_token_sq")  # optional: the causal triangle's extra cost
    a_p, b_p, c_p, d_p = (*r.coefficients("prefill_attention", prefill), 0.0)[:4]
    host = r.get("overhead").get("host") if isinstance(r.get("overhead"), dict) else None
    if host not in (None, "engine"):
        raise r.fail(f"field 'overhead.host' must be \"engine\" when given, got {host!r}")
    return ProfileTerms(
        path=r.path,
        provenance=provenance,
        sources=dict(sources),
        measured_block_size=block,
        decode=(a, b, c),
        prefill=(a_p, b_p, c_p, d_p),
        gemm=Series(*r.series("gemm.tokens", "gemm.time_s")),
        lm_head=Series(*r.series("lm_head.tokens", "lm_head.time_s")),
        all_reduce=all_reduce,
        empty_step_s=r.number("overhead.empty_step_s", maximum=60.0),
        adds_host_overhead=host == "engine",
        copy_bps=r.number("copy_bandwidth.median_bps", minimum=1e6, maximum=1e15),
        max_decode_kv=r.number("decode_attention.range.kv_tokens.1", maximum=MAX_PROFILE_RANGE),
        max_decode_seqs=r.number("decode_attention.range.num_seqs.1", maximum=MAX_PROFILE_RANGE),
        max_prefill_sq=r.number("prefill_attention.range.sum_sq.1", maximum=MAX_PROFILE_RANGE),
        max_prefill_tokens=r.number("prefill_attention.range.tokens.1", maximum=MAX_PROFILE_RANGE),
        held_out={
            section: r.get(f"{section}.held_out")
            for section in ("decode_attention", "prefill_attention", "gemm", "lm_head")
        },
    )


def check_profile(
    path: Path, model: ModelSpec, tensor_parallel: int, kv_dtype: KVDtype
) -> ProfileTerms:
    """Read `path` and check it for a scenario: schema, shapes, every number (InputError)."""
    unfit = unprofiled_features(model)
    if unfit:
        raise InputError(
            f"{path}: a measured profile prices dense 16-bit models with full attention only "
            f"(its GEMMs, attention and bytes were measured on one); {model.name} has "
            f'{" and ".join(unfit)}: use execution.kind = "roofline"'
        )
    r = ProfileReader(path, load_profile(path))
    check_shapes(r, model, tensor_parallel, kv_dtype)
    return read_terms(r)


def unprofiled_features(model: ModelSpec) -> list[str]:
    """What of `model` a profile of a dense 16-bit model cannot price (empty: nothing)."""
    found = []
    if model.moe is not None:
        found.append("routed experts")
    if model.mla is not None:
        found.append("MLA attention")
    if not model.weight_dtype.is_16_bit:
        found.append(f"{model.weight_dtype.value} weights")
    if any(kind is not LayerKind.FULL for kind in model.kinds()):
        found.append("sliding-window or state layers")
    return found

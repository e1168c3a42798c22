"""Reading a profile file: the schema and version it must carry, typed access to its fields with
one-line InputErrors naming file and key, and whether it was measured for the scenario's model.

The file itself is written by calibration/profile.py; `ProfileModel` (profile.py) prices steps
from it.
"""

from __future__ import annotations

import json
import math
from itertools import pairwise
from pathlib import Path
from typing import Any

from pagesim.simulator.core.catalog import KVDtype, ModelSpec
from pagesim.simulator.core.errors import InputError

PROFILE_SCHEMA = "pagesim-profile"
PROFILE_SCHEMA_VERSION = 1
# ModelSpec fields a profile must match (name, max_seq_len and num_params do not change timings).
SHAPE_FIELDS = (
    "num_layers",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "hidden_size",
    "intermediate_size",
    "vocab_size",
    "is_gated_mlp",
)


# The longest a profiled piece of one step may take, per layer or per token (seconds): kernels
# are measured in micro- to milliseconds, so a minute is already absurd. Larger values are
# refused, since finite ones can still multiply (x layers, x tokens) into an infinite step.
MAX_PROFILE_SECONDS = 60.0
# Counts and rates (tokens, sequences, bytes per second) a profile may give.
MAX_PROFILE_COUNT = 1e18


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

    def number(
        self, dotted: str, minimum: float = 0.0, maximum: float = MAX_PROFILE_SECONDS
    ) -> float:
        """A finite number in [minimum, maximum] (by default a time in seconds)."""
        value = self.get(dotted)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise self.fail(f"field {dotted!r} must be a number, got {value!r}")
        if value < minimum:
            raise self.fail(f"field {dotted!r} must be >= {minimum}, got {value!r}")
        if value > maximum:
            raise self.fail(
                f"field {dotted!r} is {value!r}, beyond the largest plausible value, {maximum:g}"
                + (" s (a measured kernel time)" if maximum == MAX_PROFILE_SECONDS else "")
            )
        return float(value)

    def series(self, dotted_x: str, dotted_y: str) -> tuple[list[float], list[float]]:
        xs, ys = self.get(dotted_x), self.get(dotted_y)
        if not isinstance(xs, list) or not isinstance(ys, list) or not xs or len(xs) != len(ys):
            raise self.fail(f"{dotted_x!r} and {dotted_y!r} must be non-empty lists of one length")
        for name, values, top in (
            (dotted_x, xs, MAX_PROFILE_COUNT),
            (dotted_y, ys, MAX_PROFILE_SECONDS),
        ):
            if not all(
                isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= top
                for v in values
            ):
                raise self.fail(f"{name!r} must hold numbers from 0 to {top:g}")
        if any(b <= a for a, b in pairwise(xs)):
            raise self.fail(f"{dotted_x!r} must be strictly increasing")
        return [float(x) for x in xs], [float(y) for y in ys]


def load_profile(path: str | Path) -> dict[str, Any]:
    """The profile JSON as a dict, or an InputError saying what is wrong with the file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(
            f"{path}: no such profile file (make one with `pagesim calibrate`)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read profile: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON (line {exc.lineno}): {exc.msg}") from None
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
    if kv_dtype.num_bytes != 2:
        raise r.fail(
            f"measured with a 16-bit KV cache; {kv_dtype.value} KV was not measured "
            "(use the roofline model)"
        )

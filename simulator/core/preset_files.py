"""The hardware presets' data files, read by one reader: the GPUs, the roofline factors fitted to
them, the links their all-reduce crosses, and the links a disaggregated fleet moves KV over.

    presets/gpus.toml              [custom_gpu]; [gpu.<name>] and [gpu.<name>.tensor_peaks]
                                   (GPUSpec, TensorPeaks)
    presets/roofline_factors.toml  [factors.<measured GPU>] (RooflineFactors)
    presets/interconnects.toml     [custom_allreduce.<name>] (CustomAllReduce);
                                   [interconnect.<name>] and its [[...measured]] per GPU count
                                   (Interconnect)
    presets/links.toml             [link.<name>] (LinkPreset)

A table's keys are the fields of the dataclass it fills (core/hardware.py), except a figure
written in the units people write it in (`SCALED`: memory_gib for `memory_bytes`, ...), and the
names by which one table points at another (a GPU's `factors` and `interconnect`, an
interconnect's `custom`). The files are package data, read once per process (`shipped_presets`,
cached) and checked as they are read: a key no field has, a missing one, a value of the wrong
type, a name that names nothing each raise a PresetFileError naming the file, the table and the
key. A broken shipped file is a bug in pagesim, and the message says where it is.

To add a figure (say a GPU's board power): add the field to its dataclass in core/hardware.py
with a default (`power_w: float | None = None`: None where a preset does not give it), then
write it into the tables that have it (`power_w = 700` in [gpu.h100-sxm]). The reader and the
writer take keys and types from the dataclass, so nothing here changes; a figure written in
other units than its field's also gets a line in SCALED. A key that is no field is refused, so
a misspelt figure never goes unread.

core/preset_writer.py writes Presets back as these files, and reading them gives equal Presets
(tests/simulator/core/test_preset_files.py round-trips every preset).
"""

from __future__ import annotations

import functools
import tomllib
import types
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, Field, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, Union, get_args, get_origin, get_type_hints

from pagesim.simulator.core.errors import PagesimError, choices_text
from pagesim.simulator.core.hardware import (
    ALLREDUCE_KNOT_BYTES,
    GB,
    GPU_FIGURE_UNITS,
    CustomAllReduce,
    GPUSpec,
    Interconnect,
    LinkPreset,
    RooflineFactors,
    TensorPeaks,
    extrapolated,
)

PRESET_DIR = Path(__file__).resolve().parent / "presets"
GPUS_FILE, FACTORS_FILE = "gpus.toml", "roofline_factors.toml"
INTERCONNECTS_FILE, LINKS_FILE = "interconnects.toml", "links.toml"
PRESET_FILES = (GPUS_FILE, FACTORS_FILE, INTERCONNECTS_FILE, LINKS_FILE)


class PresetFileError(PagesimError):
    """A preset file pagesim cannot use: the message names the file, the table and the key."""


@dataclass(frozen=True, slots=True)
class MeasuredCount:
    """One GPU count of a measured interconnect: [[interconnect.<name>.measured]]."""

    num_gpus: int
    latency_s: float  # fitted above ALLREDUCE_KNOT_BYTES[-1]
    bus_bw_bps: float
    knots_s: tuple[float, ...]  # the measured medians at ALLREDUCE_KNOT_BYTES


# Figures written in other units than their field's: field -> (key in the file, field units per
# unit of the key).
SCALED: dict[type, dict[str, tuple[str, float]]] = {
    GPUSpec: {field: (key, unit) for key, (field, unit) in GPU_FIGURE_UNITS.items()},
    TensorPeaks: {
        "bf16": ("bf16_tflops", 1e12),
        "fp8": ("fp8_tflops", 1e12),
        "int8": ("int8_tops", 1e12),
        "fp4": ("fp4_tflops", 1e12),
    },
    LinkPreset: {"bandwidth_bytes_s": ("bandwidth_gb_s", GB)},
    MeasuredCount: {"knots_s": ("knots_us", 1e-6)},
}


@dataclass(frozen=True)
class Presets:
    """Everything the preset files hold, by name, in file order."""

    gpus: dict[str, GPUSpec]
    gpu_sources: dict[str, str]  # where each GPU's datasheet figures come from
    tensor_peaks: dict[str, TensorPeaks]  # by GPU; a GPU without them has only fp16_flops
    custom_factors: RooflineFactors  # what a GPU given by its figures alone takes
    custom_interconnect: Interconnect
    factors: dict[str, RooflineFactors]  # as fitted, by the GPU measured
    custom_allreduce: dict[str, CustomAllReduce]
    interconnects: dict[str, Interconnect]
    links: dict[str, LinkPreset]


if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")

# --- reading ----------------------------------------------------------------------------------


def field_kind(hint: Any) -> tuple[type, bool, bool] | None:
    """(scalar type, may be None, is a tuple of them) of a field a file can give; None if not."""
    optional = False
    if get_origin(hint) in (Union, types.UnionType) and type(None) in get_args(hint):
        (hint,) = (a for a in get_args(hint) if a is not type(None))
        optional = True
    if get_origin(hint) is tuple and get_args(hint) == (float, ...):
        return float, optional, True
    if hint in (bool, int, float, str):
        return hint, optional, False
    return None


_WORDS = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}


def _scalar(raw: object, kind: type, where: str) -> Any:
    if kind is bool or kind is str:
        ok = isinstance(raw, kind)
    else:  # a number; a whole one for an int field
        is_number = isinstance(raw, int | float) and not isinstance(raw, bool)
        ok = is_number and (kind is float or isinstance(raw, int))
    if not ok:
        raise PresetFileError(f"{where}: must be {_WORDS[kind]}, got {raw!r}")
    return float(raw) if kind is float else raw  # type: ignore[arg-type]


def _value(raw: object, kind: type, is_tuple: bool, unit: float | None, where: str) -> Any:
    """A field's value from the file's `raw`, in the field's units (`unit`: the key's)."""
    if unit is not None and kind is int:  # a whole field given in other units: memory_gib
        return int(_scalar(raw, float, where) * unit)
    if not is_tuple:
        value = _scalar(raw, kind, where)
        return value if unit is None else value * unit
    if not isinstance(raw, list):
        raise PresetFileError(f"{where}: must be an array of numbers, got {raw!r}")
    return tuple(_value(x, float, False, unit, f"{where}[{i}]") for i, x in enumerate(raw))


def _table(raw: object, where: str) -> dict[str, object]:
    if not isinstance(raw, dict):
        raise PresetFileError(f"{where}: must be a table, got {raw!r}")
    return dict(raw)


def _refuse_unknown(
    table: Mapping[str, object], valid: list[str], where: str, of: str | None = None
) -> None:
    """Refuse a key not `valid`; `of`: the dataclass a new key would be a field of."""
    for key in table:
        if key not in valid:
            hint = f" (a new figure is first a new field of {of}, core/hardware.py)" if of else ""
            raise PresetFileError(
                f"{where}: unknown key {key!r}; valid keys: {choices_text(valid)}{hint}"
            )


def read_fields(
    cls: type[T],
    raw: object,
    where: str,
    given: Mapping[str, object] | None = None,
    other_keys: Iterable[str] = (),
) -> T:
    """A `cls` from a file's table: every field a file can give (a scalar, optional or not, or a
    tuple of numbers) from its key, the rest from `given` or the field's default. `other_keys`:
    keys the caller reads itself (valid, so not refused here)."""
    table, values = _table(raw, where), dict(given or {})
    hints, scaled = get_type_hints(cls), SCALED.get(cls, {})
    keys: dict[str, Field[Any]] = {}  # key in the file -> its field
    for f in fields(cls):
        if f.name not in values and field_kind(hints[f.name]) is not None:
            keys[scaled[f.name][0] if f.name in scaled else f.name] = f
    _refuse_unknown(table, [*keys, *other_keys], where, cls.__name__)
    for key, f in keys.items():
        kind, optional, is_tuple = field_kind(hints[f.name]) or (object, False, False)
        if key in table:
            unit = scaled[f.name][1] if f.name in scaled else None
            values[f.name] = _value(table[key], kind, is_tuple, unit, f"{where} {key}")
        elif f.default is not MISSING or f.default_factory is not MISSING:
            continue  # the field's default
        elif optional:
            values[f.name] = None  # an optional figure this preset does not give
        else:
            raise PresetFileError(f"{where}: missing key {key!r}")
    return cls(**values)


def _name(table: dict[str, object], key: str, known: Mapping[str, object], where: str) -> str:
    """The name `table[key]` gives (popped from `table`), one of `known`'s."""
    if key not in table:
        raise PresetFileError(f"{where}: missing key {key!r}")
    name = table.pop(key)
    if not isinstance(name, str) or name not in known:
        raise PresetFileError(
            f"{where} {key}: {name!r} names nothing; valid: {choices_text(known)}"
        )
    return name


def _file(folder: Path, file_name: str, tops: tuple[str, ...]) -> dict[str, dict[str, object]]:
    """A preset file's top-level tables `tops`, each a table of named tables (missing: empty)."""
    path = folder / file_name
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PresetFileError(f"{path}: cannot read the preset file: {exc}") from None
    for key in data:
        if key not in tops:
            raise PresetFileError(f"{path}: unknown table [{key}]; valid: {choices_text(tops)}")
    return {top: _table(data.get(top, {}), f"{path}: [{top}]") for top in tops}


def _interconnect(raw: object, where: str, customs: Mapping[str, CustomAllReduce]) -> Interconnect:
    table = _table(raw, where)
    custom = customs[_name(table, "custom", customs, where)] if "custom" in table else None
    measured = table.pop("measured", [])
    if not isinstance(measured, list):
        raise PresetFileError(f"{where} measured: must be an array of tables, got {measured!r}")
    counts = [
        read_fields(MeasuredCount, m, f"{where} measured[{i}]") for i, m in enumerate(measured)
    ]
    for i, count in enumerate(counts):
        if len(count.knots_s) != len(ALLREDUCE_KNOT_BYTES):
            raise PresetFileError(
                f"{where} measured[{i}] knots_us: {len(count.knots_s)} figures; give one per "
                f"size of ALLREDUCE_KNOT_BYTES ({len(ALLREDUCE_KNOT_BYTES)}, 8 KiB to 4 MiB)"
            )
    if len({c.num_gpus for c in counts}) < len(counts):
        raise PresetFileError(f"{where} measured: a GPU count appears twice")
    given = {
        "custom": custom,
        "by_workers": tuple((c.num_gpus, c.latency_s, c.bus_bw_bps) for c in counts),
        "small_by_workers": tuple((c.num_gpus, c.knots_s) for c in counts),
        "small_s": (),  # set by Interconnect.at
    }
    return read_fields(Interconnect, table, where, given, ("custom", "measured"))


def gpu_factors(factors: Mapping[str, RooflineFactors], name: str, gpu: str) -> RooflineFactors:
    """The set `name` as the GPU `gpu` uses it: extrapolated unless fitted to that GPU."""
    return factors[name] if name == gpu else extrapolated(factors[name], name)


def _text(table: dict[str, object], key: str, where: str) -> str:
    """The string `table[key]` (popped from `table`)."""
    if key not in table:
        raise PresetFileError(f"{where}: missing key {key!r}")
    text: str = _scalar(table.pop(key), str, f"{where} {key}")
    return text


def _gpu(
    name: str,
    raw: object,
    file: Path,
    factors: Mapping[str, RooflineFactors],
    interconnects: Mapping[str, Interconnect],
) -> tuple[GPUSpec, str, TensorPeaks | None]:
    """A [gpu.<name>] table: the GPU, the source of its figures, its tensor peaks (if given)."""
    at = f"{file}: [gpu.{name}]"
    table = _table(raw, at)
    given = {
        "name": name,
        "factors": gpu_factors(factors, _name(table, "factors", factors, at), name),
        "interconnect": interconnects[_name(table, "interconnect", interconnects, at)],
    }
    source = _text(table, "source", at)
    peaks = table.pop("tensor_peaks", None)
    if peaks is not None:
        peaks = read_fields(TensorPeaks, peaks, f"{file}: [gpu.{name}.tensor_peaks]")
    other = ("factors", "interconnect", "source", "tensor_peaks")
    return read_fields(GPUSpec, table, at, given, other), source, peaks


def read_presets(folder: Path) -> Presets:
    """Every preset in `folder`'s preset files, checked (PresetFileError says what is wrong)."""
    file = folder / FACTORS_FILE
    raw = _file(folder, FACTORS_FILE, ("factors",))
    factors = {
        n: read_fields(RooflineFactors, t, f"{file}: [factors.{n}]")
        for n, t in raw["factors"].items()
    }
    file = folder / INTERCONNECTS_FILE
    raw = _file(folder, INTERCONNECTS_FILE, ("custom_allreduce", "interconnect"))
    customs = {
        n: read_fields(CustomAllReduce, t, f"{file}: [custom_allreduce.{n}]")
        for n, t in raw["custom_allreduce"].items()
    }
    interconnects = {
        n: _interconnect(t, f"{file}: [interconnect.{n}]", customs)
        for n, t in raw["interconnect"].items()
    }
    file = folder / LINKS_FILE
    raw = _file(folder, LINKS_FILE, ("link",))
    links = {n: read_fields(LinkPreset, t, f"{file}: [link.{n}]") for n, t in raw["link"].items()}
    file = folder / GPUS_FILE
    raw = _file(folder, GPUS_FILE, ("custom_gpu", "gpu"))
    custom, at = raw["custom_gpu"], f"{file}: [custom_gpu]"
    custom_factors = _name(custom, "factors", factors, at)
    custom_link = interconnects[_name(custom, "interconnect", interconnects, at)]
    _refuse_unknown(custom, ["factors", "interconnect"], at)
    gpus, sources, peaks = {}, {}, {}
    for name, table in raw["gpu"].items():
        gpus[name], sources[name], peak = _gpu(name, table, file, factors, interconnects)
        if peak is not None:
            peaks[name] = peak
    return Presets(
        gpus,
        sources,
        peaks,
        extrapolated(factors[custom_factors], custom_factors),
        custom_link,
        factors,
        customs,
        interconnects,
        links,
    )


@functools.cache
def shipped_presets() -> Presets:
    """The presets pagesim ships (package data), read once per process."""
    return read_presets(PRESET_DIR)

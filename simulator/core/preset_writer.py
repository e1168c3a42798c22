"""The hardware presets written back as the preset files core/preset_files.py reads: its inverse,
so a round trip (read, write, read) gives equal Presets (tests/simulator/core/test_preset_files.py)
and `pagesim calibrate fit-roofline` prints its fit as the files write it.

Each figure is written in the units of its key (`SCALED`), as the shortest decimal that reads back
to exactly the same float; a table that points at another (a GPU's factors and interconnect, an
interconnect's custom all-reduce) is written with that table's name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import get_type_hints

from pagesim.simulator.core.errors import choices_text
from pagesim.simulator.core.hardware import Interconnect, extrapolated
from pagesim.simulator.core.preset_files import (
    FACTORS_FILE,
    GPUS_FILE,
    INTERCONNECTS_FILE,
    LINKS_FILE,
    SCALED,
    MeasuredCount,
    PresetFileError,
    Presets,
    field_kind,
    gpu_factors,
)
from pagesim.simulator.core.toml_text import toml_document


def _figure(value: float, unit: float, is_whole: bool, where: str) -> int | float:
    """`value` in units of `unit`: the shortest decimal the reader turns back into `value`."""
    for digits in range(17):
        figure = round(value / unit, digits)
        back = int(figure * unit) if is_whole else figure * unit
        if back == value:
            return int(figure) if figure.is_integer() else figure
    raise PresetFileError(f"{where}: {value!r} has no exact figure in units of {unit!r}")


def field_table(obj: object, skip: Iterable[str] = ()) -> dict[str, object]:
    """The keys and values a file gives `obj` (a dataclass instance): `read_fields`' inverse for
    every field but those in `skip` (None: not written)."""
    cls = type(obj)
    hints, scaled, out = get_type_hints(cls), SCALED.get(cls, {}), {}
    for f in fields(obj):  # type: ignore[arg-type]
        value, kind = getattr(obj, f.name), field_kind(hints[f.name])
        if f.name in skip or kind is None or value is None:
            continue
        if f.name not in scaled:
            out[f.name] = list(value) if kind[2] else value
            continue
        key, unit = scaled[f.name]
        where = f"{cls.__name__}.{f.name}"
        whole = kind[0] is int
        out[key] = (
            [_figure(v, unit, whole, where) for v in value]
            if kind[2]
            else _figure(value, unit, whole, where)
        )
    return out


def _name_of(obj: object, named: Mapping[str, object], what: str) -> str:
    found = next((name for name, other in named.items() if other == obj), None)
    if found is None:
        raise PresetFileError(f"{what} is none of the presets' ({choices_text(named)})")
    return found


def interconnect_table(link: Interconnect, custom: str | None) -> dict[str, object]:
    """An [interconnect.<name>] table; `custom`: the name of its [custom_allreduce] table."""
    table = field_table(link, ("custom", "by_workers", "small_by_workers", "small_s"))
    if custom is not None:
        table["custom"] = custom
    knots = dict(link.small_by_workers)
    measured = [MeasuredCount(n, lat, bw, knots[n]) for n, lat, bw in link.by_workers]
    if len(measured) != len(knots):
        raise PresetFileError(f"{link.name}: measured GPU counts differ from the knots'")
    if measured:
        table["measured"] = [field_table(m) for m in measured]
    return table


def preset_tables(presets: Presets) -> dict[str, dict[str, object]]:
    """Each preset file's tables (file name -> TOML tables), as `write_presets` writes them."""
    p = presets
    customs = {n: field_table(c) for n, c in p.custom_allreduce.items()}
    interconnects = {
        n: interconnect_table(
            ic, None if ic.custom is None else _name_of(ic.custom, p.custom_allreduce, n)
        )
        for n, ic in p.interconnects.items()
    }
    as_custom = {n: extrapolated(f, n) for n, f in p.factors.items()}
    gpus: dict[str, object] = {}
    for name, gpu in p.gpus.items():
        uses = {n: gpu_factors(p.factors, n, name) for n in p.factors}
        table = field_table(gpu, ("name", "factors", "interconnect"))
        table["factors"] = _name_of(gpu.factors, uses, f"{name}'s factors")
        table["interconnect"] = _name_of(gpu.interconnect, p.interconnects, f"{name}'s link")
        table["source"] = p.gpu_sources[name]
        if name in p.tensor_peaks:
            table["tensor_peaks"] = field_table(p.tensor_peaks[name])
        gpus[name] = table
    custom_gpu = {
        "factors": _name_of(p.custom_factors, as_custom, "the custom GPU's factors"),
        "interconnect": _name_of(p.custom_interconnect, p.interconnects, "the custom GPU's link"),
    }
    return {
        GPUS_FILE: {"custom_gpu": custom_gpu, "gpu": gpus},
        FACTORS_FILE: {"factors": {n: field_table(f) for n, f in p.factors.items()}},
        INTERCONNECTS_FILE: {"custom_allreduce": customs, "interconnect": interconnects},
        LINKS_FILE: {"link": {n: field_table(link) for n, link in p.links.items()}},
    }


def write_presets(presets: Presets, folder: Path) -> list[Path]:
    """`presets` as preset files in `folder` (without the shipped files' comments: their
    sources are the `source` and `basis` keys)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for file_name, tables in preset_tables(presets).items():
        path = folder / file_name
        path.write_text(toml_document(tables, "Written by pagesim (core/preset_files.py)."))
        written.append(path)
    return written

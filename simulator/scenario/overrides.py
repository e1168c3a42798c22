"""Overrides (`--set path=value`) and sweep axes (`--param path=v1,v2`, [sweep] axes).

A path is a dotted key into the schema: `systems.block_size` names the key in every [[systems]]
entry, `systems[0].block_size` in one. `check_path` checks one against the schema; `with_value`
and `apply_overrides` set values in a raw TOML table before it is parsed, and `blame` adds to a
`ScenarioError` which override set the key it is about. `read_sweep` reads a file's [sweep] axes.
"""

from __future__ import annotations

import copy
import re
import tomllib
from collections.abc import Sequence
from typing import Any

from pagesim.simulator.core.config import SweepAxis
from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.scenario.schema import MAX_AXES, MAX_SWEEP_POINTS, SCHEMA
from pagesim.simulator.scenario.table import (
    MAX_DEPTH,
    Ctx,
    ScenarioError,
    Table,
    deepest_key,
    described,
    suggest,
)

_SEGMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[(\d{1,6})\])?")


def _segments(path: str) -> list[tuple[str, int | None]]:
    parts = []
    for part in path.split("."):
        match = _SEGMENT.fullmatch(part.strip())
        if match is None:
            raise InputError(f"{path!r} is not a dotted key like systems[0].block_size")
        parts.append((match[1], None if match[2] is None else int(match[2])))
    return parts


def check_path(path: str) -> list[tuple[str, int | None]]:
    """The segments of a dotted key, checked against the schema, or an InputError."""
    segments = _segments(path)
    node: Any = SCHEMA
    where = ""
    for key, index in segments:
        if not isinstance(node, dict):
            raise InputError(f"{where!r} is a value, not a table: nothing inside it to set")
        if key not in node:
            here = f"in {where}" if where else "at the top level"
            raise InputError(
                f"unknown key {key!r}{suggest(key, list(node))} {here}; valid: {choices_text(node)}"
            )
        node = node[key]
        where = f"{where}.{key}" if where else key
        if isinstance(node, list):
            node = node[0]
        elif index is not None:
            raise InputError(f"{where!r} is not an array of tables: it takes no [index]")
    return segments


def with_value(raw: dict[str, Any], path: str, value: object, ctx: Ctx, what: str) -> Any:
    """A deep copy of `raw` with `path` set to `value` (in every entry of an unindexed array)."""
    raw = copy.deepcopy(raw)
    _set(raw, path, value, ctx, what)
    return raw


def _set(raw: dict[str, Any], path: str, value: object, ctx: Ctx, what: str) -> list[str]:
    """Set `path` to `value` in `raw` in place; returns the concrete keys set (for messages)."""
    try:
        segments = check_path(path)
    except InputError as exc:
        ctx.fail("", f"{what}: {exc}")
    targets: list[tuple[dict[str, Any], str]] = [(raw, "")]
    node: Any = SCHEMA
    for depth, (key, index) in enumerate(segments):
        is_last = depth == len(segments) - 1
        node = node[key]
        is_array = isinstance(node, list)
        node = node[0] if is_array else node
        following: list[tuple[dict[str, Any], str]] = []
        for table, where in targets:
            here = f"{where}.{key}" if where else key
            if is_last and index is None:
                table[key] = copy.deepcopy(value)
                following.append((table, here))
                continue
            child = table.get(key)
            if not is_array:
                if child is None:
                    child = table[key] = {}
                if not isinstance(child, dict):
                    ctx.fail("", f"{what}: {here} is {described(child)} in the file, not a table")
                following.append((child, here))
                continue
            if not isinstance(child, list) or not child:
                ctx.fail("", f"{what}: the file has no [[{here}]] entries to set")
            indices = range(len(child)) if index is None else [index]
            if index is not None and index >= len(child):
                ctx.fail(
                    "", f"{what}: {here} has {len(child)} entries (indices 0-{len(child) - 1})"
                )
            for i in indices:
                if is_last:
                    child[i] = copy.deepcopy(value)
                    following.append((table, f"{here}[{i}]"))  # as above: the table set in
                elif not isinstance(child[i], dict):
                    ctx.fail("", f"{what}: {here}[{i}] is {described(child[i])}, not a table")
                else:
                    following.append((child[i], f"{here}[{i}]"))
        targets = following
    return [where for _, where in targets]


def parse_value(text: str) -> object:
    """A TOML value when `text` is one (`2`, `2.5`, `true`, `"x"`, `[1, 2]`), else the bare text."""
    try:
        table = tomllib.loads(f"v = {text}")
    except (tomllib.TOMLDecodeError, ValueError, RecursionError):
        return text
    if list(table) != ["v"]:
        return text
    if deepest_key(table["v"]) is not None:
        raise InputError(f"value {text[:40]!r}: nested more than {MAX_DEPTH} deep")
    return table["v"]


def _split_assignment(text: str, what: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise InputError(f"{what} {text!r}: expected dotted.key=value, e.g. systems.block_size=32")
    return key.strip(), value.strip()


def parse_param(text: str) -> SweepAxis:
    """A sweep axis from `path=v1,v2,...` (CLI `--param`); values parse like override values."""
    path, values_text = _split_assignment(text, "sweep parameter")
    try:
        check_path(path)
    except InputError as exc:
        raise InputError(f"sweep parameter {text!r}: {exc}") from None
    as_array = parse_value(f"[{values_text}]")
    if isinstance(as_array, list):
        values = as_array
    else:
        values = [parse_value(v.strip()) for v in values_text.split(",") if v.strip()]
    if not values:
        raise InputError(f"sweep parameter {text!r}: no values; write path=v1,v2,...")
    return SweepAxis(path, tuple(values))


def apply_overrides(
    raw: dict[str, Any], overrides: Sequence[str], ctx: Ctx
) -> tuple[dict[str, Any], list[tuple[str, list[str]]]]:
    raw = copy.deepcopy(raw)
    applied = []
    for text in overrides:
        what = f"override {text!r}"
        try:
            path, value_text = _split_assignment(text, "override")
        except InputError as exc:
            ctx.fail("", str(exc))
        applied.append((text, _set(raw, path, parse_value(value_text), ctx, what)))
    return raw, applied


def blame(exc: ScenarioError, applied: Sequence[tuple[str, list[str]]]) -> ScenarioError:
    """The same error, saying which override set the key it is about (if one did)."""
    for text, keys in applied:
        for key in keys:
            if exc.key == key or exc.key.startswith((key + ".", key + "[")):
                return ScenarioError(
                    exc.label, exc.key, f"{exc.problem} (set by override {text!r})"
                )
    return exc


def read_sweep(t: Table) -> tuple[SweepAxis, ...]:
    axes_raw = t.data.get("axes", [])
    if not isinstance(axes_raw, list):
        t.fail("axes", f"expected an array of {{ path, values }} tables, got {described(axes_raw)}")
    if len(axes_raw) > MAX_AXES:
        t.fail("axes", f"at most {MAX_AXES} axes, got {len(axes_raw)}")
    axes: list[SweepAxis] = []
    schema = {"path": None, "values": None}
    for i, item in enumerate(axes_raw):
        a = Table(t.ctx, f"{t.path('axes')}[{i}]", item, schema)
        path = a.text("path")
        try:
            check_path(path)
        except InputError as exc:
            a.fail("path", str(exc))
        if path.split(".")[0].split("[")[0] == "sweep":
            a.fail("path", "a sweep axis cannot change [sweep] itself")
        values = a.data.get("values")
        if not isinstance(values, list) or not values:
            got = "nothing" if values is None else described(values)
            a.fail("values", f"expected a non-empty array of values, got {got}")
        if len(values) > MAX_SWEEP_POINTS:
            a.fail("values", f"at most {MAX_SWEEP_POINTS} values, got {len(values)}")
        if any(path == other.path for other in axes):
            a.fail("path", f"{path!r} is already an axis")
        axes.append(SweepAxis(path, tuple(values)))
    return tuple(axes)

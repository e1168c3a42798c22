"""Scenario files on disk: finding one (a path or a built-in's name), listing the built-ins,
reading the TOML with a message for every way it can be unreadable, and the text as run."""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.scenario.table import MAX_DEPTH, Ctx, deepest_key, display, is_file, suggest

# The scenario library (package data).
BUILTIN_DIR = Path(str(resources.files("pagesim.scenarios")))

MAX_FILE_BYTES = 16 * 2**20  # a scenario file


def read_toml(path: Path) -> dict[str, Any]:
    """The file's TOML table; a ScenarioError naming the file says why it cannot be read."""
    ctx = Ctx(display(path), path.parent)
    text = _read_text(path, ctx)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        ctx.fail("", f"not valid TOML: {exc}")
    except ValueError as exc:  # e.g. an integer beyond Python's digit limit
        ctx.fail("", f"not valid TOML: {str(exc).split(';')[0]}")
    except RecursionError:
        ctx.fail("", "not valid TOML: arrays or tables nested too deeply")
    deep = deepest_key(raw)
    if deep is not None:
        ctx.fail(deep, f"tables or arrays nested more than {MAX_DEPTH} deep: not a scenario key")
    return raw


def resolve_scenario(name_or_path: str | Path) -> Path:
    """A scenario file: an existing path, or the name of a built-in (with or without .toml)."""
    path = Path(name_or_path)
    if is_file(path):
        return path
    stem = str(name_or_path).removesuffix(".toml")
    builtin = BUILTIN_DIR / f"{stem}.toml"
    if "/" not in stem and "\\" not in stem and is_file(builtin):
        return builtin
    builtins = [name for name, _ in list_builtin()]
    raise InputError(
        f"{str(name_or_path)!r}: no such scenario file or built-in"
        f"{suggest(Path(stem).name, builtins)}; built-ins: {choices_text(builtins)}"
    )


def builtin_commands(name: str) -> tuple[str, ...]:
    """What a built-in is made for: `run` always; `sweep` with a [sweep] table (its axes);
    `capacity` with a [capacity] table (a fleet search; any scenario takes a rate search)."""
    try:
        raw = tomllib.loads((BUILTIN_DIR / f"{name}.toml").read_text("utf-8"))
    except (OSError, ValueError):
        return ("run",)
    return ("run", *(command for command in ("sweep", "capacity") if command in raw))


def list_builtin() -> list[tuple[str, str]]:
    """(name, first line of its description) of every built-in scenario, sorted by name."""
    found = []
    for path in sorted(BUILTIN_DIR.glob("*.toml")):
        try:
            description = tomllib.loads(path.read_text("utf-8")).get("description", "")
        except (OSError, ValueError):
            description = ""
        lines = str(description).strip().splitlines()
        found.append((path.stem, lines[0].strip() if lines else ""))
    return found


def scenario_text(name_or_path: str | Path) -> str:
    """A scenario file's text, for `pagesim scenarios show`: it must be a readable UTF-8 text
    file of a scenario file's size (a ScenarioError says why not)."""
    path = resolve_scenario(name_or_path)
    return _read_text(path, Ctx(display(path), path.parent))


def _read_text(path: Path, ctx: Ctx) -> str:
    """The file as UTF-8 text, if it is of a scenario file's size; else a ScenarioError (ctx)."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            ctx.fail("", f"larger than {MAX_FILE_BYTES >> 20} MiB: not a scenario file")
        data = path.read_bytes()
    except OSError as exc:
        ctx.fail("", f"cannot read: {exc.strerror or exc}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        ctx.fail("", f"not UTF-8 text (byte 0x{data[exc.start]:02x} at line {line})")


def scenario_to_toml_text(path: Path | str, overrides: Sequence[str] = ()) -> str:
    """The scenario file's text as run: the overrides applied on top, as leading comments."""
    path = resolve_scenario(path)
    text = path.read_bytes().decode("utf-8", errors="replace")
    if not overrides:
        return text
    header = "".join(f"#   {o}\n" for o in overrides)
    return f"# pagesim: overrides applied on top of this file:\n{header}\n{text}"

"""Every command's --help reads whole: no text lost to rich markup (help strings are rendered
as rich markup, where "[default: 0.02]" or "[sweep]" is a style tag and vanishes, leaving "the
max ." or "see )."), no empty parentheses, no stray escapes."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from pagesim.cli import app

HOLES = {
    "empty brackets": re.compile(r"\(\s*\)|\[\s*\]"),
    "a space before a stop or comma": re.compile(r"\w\s+[.,;:](\s|$)"),
    "an opening bracket closed at once by a stop": re.compile(r"\(\s*[.,;]"),
    "a word missing before a bracket's close": re.compile(r"(see|e\.g\.|of|the|a)\s*\)"),
    "a markup escape shown": re.compile(r"\\\["),
}


def commands(command: object = None, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command's path, the root's and the groups' included."""
    command = command or get_command(app)
    yield path
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from commands(sub, (*path, name))


PATHS = list(commands())


def help_text(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "1000", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    # One line per row of rich's boxes, their borders dropped, so a sentence is whole.
    return " ".join(line.strip(" │╭╮╰╯─") for line in result.output.splitlines())


def test_every_command_is_found() -> None:
    assert {("run",), ("sweep",), ("capacity",), ("scenarios", "list"), ("calibrate",)} <= set(
        PATHS
    )


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "pagesim")
def test_help_has_no_holes(path: tuple[str, ...]) -> None:
    text = re.sub(r"\s+", " ", help_text(path))
    found = [
        f"{what}: ...{text[max(0, m.start() - 60) : m.end() + 10]}..."
        for what, pattern in HOLES.items()
        for m in pattern.finditer(text)
    ]
    assert not found, "\n".join(found)


def test_the_holes_are_found() -> None:
    """The patterns catch what rich markup made of the texts once (issue 34)."""
    for broken in (
        "stop when the failed rate is within this share of the max .",
        "a Ray cluster; see ).",
        "marks ()",
    ):
        assert any(p.search(broken) for p in HOLES.values()), broken


# rich's markup: a tag is "[" then a letter, "#", "/" or "@" (rich.markup's RE_TAGS), unless
# escaped with a backslash.
MARKUP_TAG = re.compile(r"(?<!\\)\[[a-z#/@][^\]\[]*\]")


def help_strings(command: object = None) -> Iterator[tuple[str, str]]:
    """(where, text) of every help string the CLI renders: commands' and options'."""
    command = command or get_command(app)
    name = getattr(command, "name", "pagesim")
    for text in (getattr(command, "help", None), getattr(command, "epilog", None)):
        if text:
            yield name, text
    for param in getattr(command, "params", []):
        if getattr(param, "help", None):
            yield f"{name} {param.name}", param.help
    for sub in getattr(command, "commands", {}).values():
        yield from help_strings(sub)


def test_no_help_string_holds_unescaped_markup() -> None:
    """A tag rich would swallow: write it as \\[sweep] (the cause of the holes above)."""
    found = [
        f"{where}: {m.group()!r} in {text[:80]!r}"
        for where, text in help_strings()
        for m in MARKUP_TAG.finditer(text)
    ]
    assert not found, "\n".join(found)

"""The documents a reader meets: the README stays short, every guide is reached from it, the
scenario reference is what `pagesim scenarios reference` prints (so it lists every key the loader
accepts and every model and GPU the catalog has), and nothing cites a file outside the repository.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from cli_helpers import run_cli

from pagesim.simulator.core.catalog import GPUS, MODELS
from pagesim.simulator.core.config import Scenario
from pagesim.simulator.scenario.key_docs import KEY_DOCS, SAME_AS, TABLE_DOCS
from pagesim.simulator.scenario.load import parse_scenario
from pagesim.simulator.scenario.reference import (
    COMMAND,
    documented_as,
    render_reference,
    schema_tables,
)
from pagesim.simulator.scenario.schema import SCHEMA

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
GUIDES = [README, ROOT / "CHANGELOG.md", ROOT / "scenarios" / "README.md", *DOCS]
REFERENCE = ROOT / "docs" / "scenario-reference.md"
MAX_README_WORDS = 800
MAX_LINE_CHARS = 200
# What ships in the package or documents it: none of it may cite a file a user does not have.
PACKAGE_DIRS = ("pagesim", "simulator", "calibration", "reports", "scenarios", "kernels", "docs")
TEXT_SUFFIXES = {".py", ".md", ".toml", ".json", ".sh", ".cu", ".txt", ".js", ".css", ".csv"}
OUTSIDE = re.compile(r"DESIGN\.md|FACTS\.md|\.\./shared|/work/|(?<![\w.-])shared/")


def _section(text: str, heading: str) -> str:
    """The body of `## heading` in `text`, up to the next `## `."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : None if end < 0 else end]


def test_the_readme_has_at_most_800_words() -> None:
    assert len(README.read_text().split()) <= MAX_README_WORDS


@pytest.mark.parametrize("path", GUIDES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_line_is_longer_than_200_characters(path: Path) -> None:
    long = [n for n, line in enumerate(path.read_text().splitlines(), 1) if len(line) > 200]
    assert not long, f"{path.name}: lines {long}"


def test_the_readmes_gpu_list_is_the_catalogs() -> None:
    line = next(p for p in README.read_text().split("\n\n") if "GPU presets:" in p)
    named = re.findall(r"`([a-z0-9-]+)`", line.split("GPU presets:")[1])
    assert named == list(GPUS)


def _links(path: Path) -> set[Path]:
    """The local files `path` links to (markdown links and reference definitions)."""
    text = path.read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    targets += re.findall(r"(?m)^\[[^\]]+\]: (\S+)", text)
    return {
        (path.parent / t).resolve() for t in targets if not re.match(r"[a-z]+:", t) and t.strip()
    }


def test_every_guide_is_reached_from_the_readme_and_every_link_resolves() -> None:
    seen, todo = {README.resolve()}, [README.resolve()]
    while todo:
        for target in _links(todo.pop()):
            assert target.exists(), target
            if target.suffix == ".md" and target not in seen:
                seen.add(target)
                todo.append(target)
    unreached = {p.resolve() for p in GUIDES} - seen
    assert not unreached


def test_the_committed_reference_is_what_the_command_prints() -> None:
    assert REFERENCE.read_text() == render_reference(), f"stale: run `{COMMAND}`"


def test_the_command_prints_the_reference(capsys: pytest.CaptureFixture[str]) -> None:
    done = run_cli(capsys, "scenarios", "reference")
    assert (done.exit_code, done.err) == (0, "")
    assert done.out == REFERENCE.read_text()


def test_every_schema_key_has_words_and_every_word_a_key() -> None:
    tables = {path: keys for path, _, keys in schema_tables()}
    documented = {path: keys for path, keys in tables.items() if documented_as(path) == path}
    assert {p: set(k) for p, k in documented.items()} == {
        p: set(words) for p, words in KEY_DOCS.items()
    }
    for path, keys in tables.items():  # a table documented as another takes a subset of its keys
        assert set(keys) <= set(KEY_DOCS[documented_as(path)]), path
    assert set(TABLE_DOCS) <= set(tables) and set(SAME_AS) <= set(tables)


def test_the_reference_lists_every_schema_key_model_and_gpu() -> None:
    text = REFERENCE.read_text()
    for path, is_array, keys in schema_tables():
        heading = "### Top level" if not path else f"### `[{path}]`"
        if is_array:
            heading = f"### `[[{path}]]`"
        start = text.index(f"\n{heading}\n") + 1
        body = text[start : text.index("\n##", start)]
        missing = [k for k in keys if f"`{k}`" not in body]
        assert not missing, (path, missing)
    assert len(list(schema_tables())) > len(SCHEMA) // 2  # the walk found the nested tables
    models = _section(text, "Models")
    assert [m for m in MODELS if f"| `{m}` |" not in models] == []
    gpus = _section(text, "GPUs")
    assert [g for g in GPUS if f"| `{g}` |" not in gpus] == []


def test_the_example_scenario_is_valid_and_has_every_top_level_key() -> None:
    text = (ROOT / "docs" / "scenario-files.md").read_text()
    block = re.search(r"```toml\n(.*?)```", text, re.S)
    assert block is not None
    table = tomllib.loads(block[1])
    scenario = parse_scenario(table, ROOT / "scenarios" / "example.toml")
    assert isinstance(scenario, Scenario)
    assert set(table) == set(SCHEMA)


def _shipped_text_files() -> list[Path]:
    files = [README, ROOT / "CHANGELOG.md", ROOT / "pyproject.toml"]
    for folder in PACKAGE_DIRS:
        files += [p for p in (ROOT / folder).rglob("*") if p.suffix in TEXT_SUFFIXES]
    return files


def test_nothing_shipped_cites_a_file_outside_the_repository() -> None:
    cited = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in _shipped_text_files()
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not cited, "\n".join(cited)


def test_the_outside_citation_pattern_finds_each_form() -> None:
    for line in ("see DESIGN.md", "(FACTS.md)", "../shared/traces", "/work/shared/x", "shared/x"):
        assert OUTSIDE.search(line), line
    for line in ("a shared system prompt", "prefix-shared/", "kv_shared.py"):
        assert not OUTSIDE.search(line), line

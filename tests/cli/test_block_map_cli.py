"""`pagesim run --block-map` and `pagesim explain` at the command line: the pages land in the run
folder and the report links them (also after `pagesim report`); bad input is one `error:` line
naming --block-map (or the stop), exit 2, before any output is written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_helpers import refused, run_cli, tiny_scenario


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text(tiny_scenario("mapped"))
    return tmp_path


def test_a_run_writes_its_block_maps_and_the_report_links_them(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(capsys, "run", "s.toml", "--out", "out", "--block-map", "0:6").exit_code == 0
    page = here / "out" / "block_maps" / "v0.html"
    assert page.is_file() and (here / "out" / "block_maps" / "v0.png").is_file()
    data = re.search(r'id="block-map-data">(.*?)</script>', page.read_text(), re.S)
    assert data and len(json.loads(data.group(1))["steps"]) == 6
    for _ in range(2):  # as written, then as `pagesim report` draws it again
        report = (here / "out" / "report.html").read_text()
        assert 'href="block_maps/v0.html"' in report and 'href="block_maps/v0.png"' in report
        assert run_cli(capsys, "report", "out").exit_code == 0
    assert page.is_file()


@pytest.mark.parametrize(
    ("spec", "needles"),
    [
        ("every", ["--block-map 'every': not all, N"]),
        ("9:3", ["needs 0 <= START < END"]),
        ("0:99999", ["a block map holds at most 2,000"]),
        ("500:600", ["system 'v0' ran", "the window must start before step"]),
    ],
)
def test_bad_windows(
    here: Path, capsys: pytest.CaptureFixture[str], spec: str, needles: list[str]
) -> None:
    refused(
        run_cli(capsys, "run", "s.toml", "--out", "out", "--block-map", spec),
        "--block-map",
        *needles,
    )
    assert not (here / "out").exists()


def test_a_long_run_needs_a_window(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (here / "long.toml").write_text(tiny_scenario("long").replace("value = 8", "value = 2100"))
    refused(
        run_cli(capsys, "run", "long.toml", "--out", "out", "--block-map", "all"),
        "--block-map all: system 'v0' runs past 2,000 steps",
        "give a window",
    )
    assert (
        run_cli(capsys, "run", "long.toml", "--out", "out", "--block-map", "2050:2060").exit_code
        == 0
    )


def test_what_a_block_map_cannot_draw(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = (
        tiny_scenario("fleet")
        + '[cluster.router]\nkind = "round-robin"\n[[cluster.pools]]\nname = "p"\ncount = 2\n'
    )
    (here / "fleet.toml").write_text(fleet)
    refused(
        run_cli(capsys, "run", "fleet.toml", "--block-map", "all"), "--block-map", "runs a fleet"
    )
    hybrid = (
        tiny_scenario("hybrid")
        .replace('preset = "llama-2-7b"', 'preset = "gpt-oss-20b"')
        .replace('preset = "a100-80gb"', 'preset = "h100-sxm"')
        .replace('policy = "vllm-v0"', 'policy = "vllm-v1"')
    )
    (here / "hybrid.toml").write_text(hybrid)
    refused(
        run_cli(capsys, "run", "hybrid.toml", "--block-map", "all"), "--block-map", "sliding-window"
    )


def test_explain_writes_one_stop_opening_on_its_moment(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_cli(capsys, "explain", "2", "--out", "tour")
    assert result.exit_code == 0, result.err
    assert "2. A block table filling" in result.out
    index = (here / "tour" / "index.html").read_text()
    assert 'href="02_block_table/vllm-v1.html"' in index
    page = (here / "tour" / "02_block_table" / "vllm-v1.html").read_text()
    data = re.search(r'id="block-map-data">(.*?)</script>', page, re.S)
    assert data is not None
    opened = json.loads(data.group(1))["open_at"]
    assert f"Open the block map at step {opened}" in index
    refused(run_cli(capsys, "explain", "nine", "--out", "tour2"), "explain: no stop 'nine'")
    assert not (here / "tour2").exists()

"""Output folders that never lie (issue 14 item 5; reproducers 01, 05, 09, 18, 20): checked
before any work, written whole or not at all, labelled with what wrote them, and re-rendered only
from data that agrees with itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import CliResult, read_only, run_cli, tiny_scenario

from pagesim.reports.output_folder import MANIFEST_FILE, OutputFolder

SCENARIO = tiny_scenario("repro")


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text(SCENARIO)
    renamed = SCENARIO.replace('name = "repro"', 'name = "scenario_B"')
    (tmp_path / "b.toml").write_text(renamed.replace('name = "v0"', 'name = "b-system"'))
    return tmp_path


def refused(result: CliResult, *needles: str) -> None:
    assert result.exit_code == 2, (result.out, result.err)
    lines = [line for line in result.err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and all(n in lines[0] for n in needles), result.err
    assert "Traceback" not in result.err


def leftovers(work: Path) -> list[str]:
    return sorted(p.name for p in work.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_01_an_out_that_cannot_be_a_folder_is_refused_before_simulating(
    work: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    (work / "afile").write_text("precious")
    extra = ["--param", "seed=1,2", "--jobs", "1"] if command == "sweep" else ["--no-report"]
    for out, needle in (
        ("afile", "exists and is not a folder"),
        ("/dev/null", "exists and is not a folder"),
        ("o" * 300, "File name too long"),
        ("", "the current folder"),
        (".", "the current folder"),
    ):
        result = run_cli(capsys, command, "s.toml", "--out", out, *extra)
        refused(result, f"--out {str(Path(out))!r}", needle)  # typer reads "" as "."
        assert "simulating" not in result.err and "sweeping" not in result.err
    assert (work / "afile").read_text() == "precious"
    assert leftovers(work) == []


def test_01_an_unwritable_parent_is_refused(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (work / "ro").mkdir()
    with read_only(work / "ro"):
        refused(run_cli(capsys, "run", "s.toml", "--out", "ro/x"), "--out 'ro/x'", "cannot")


def test_a_folder_pagesim_did_not_write_is_never_replaced(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (work / "mine").mkdir()
    (work / "mine" / "thesis.tex").write_text("years of work")
    refused(run_cli(capsys, "run", "s.toml", "--out", "mine"), "pagesim did not write", "thesis")
    assert (work / "mine" / "thesis.tex").read_text() == "years of work"
    (work / "empty").mkdir()
    assert run_cli(capsys, "run", "s.toml", "--out", "empty", "--no-report").exit_code == 0


def test_05_report_on_damaged_folders_names_the_file(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, text in (("a", ""), ("b", "{}"), ("c", "[]")):
        (work / name).mkdir()
        (work / name / "report.json").write_text(text)
    (work / "d").mkdir()
    (work / "d" / "report.json").write_bytes(bytes(range(256)))
    inputs = {"title": "t", "scenario_text": "", "provenance": {}, "findings": None}
    (work / "e").mkdir()
    (work / "e" / "report.json").write_text(
        json.dumps(inputs | {"calibration": None, "folders": ["../../.."]})
    )
    refused(run_cli(capsys, "report", "a"), "a/report.json", "not valid JSON")
    refused(run_cli(capsys, "report", "b"), "b/report.json", "missing key 'title'")
    refused(run_cli(capsys, "report", "c"), "c/report.json", "expected a JSON object")
    refused(run_cli(capsys, "report", "d"), "d/report.json", "cannot be read")
    refused(run_cli(capsys, "report", "e"), "'../../..', not the name of a folder")
    assert run_cli(capsys, "run", "s.toml", "--out", "r").exit_code == 0
    summary = (work / "r" / "v0" / "summary.json").read_text()
    for file, text, needle in (
        ("steps.csv", "", "r/v0/steps.csv: empty"),
        ("summary.json", summary[: len(summary) // 2], "r/v0/summary.json: not valid JSON"),
        ("requests.csv", None, "r/v0/requests.csv: missing"),
    ):
        saved = (work / "r" / "v0" / file).read_text()
        if text is None:
            (work / "r" / "v0" / file).unlink()
        else:
            (work / "r" / "v0" / file).write_text(text)
        refused(run_cli(capsys, "report", "r"), needle)
        (work / "r" / "v0" / file).write_text(saved)
    assert run_cli(capsys, "report", "r").exit_code == 0


def test_09_a_system_named_like_a_report_file(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for i, name in enumerate(("summary.csv", "report.html", "plots", MANIFEST_FILE)):
        (work / f"n{i}.toml").write_text(SCENARIO.replace('name = "v0"', f'name = "{name}"'))
        result = run_cli(capsys, "run", f"n{i}.toml", "--out", f"o{i}")
        assert result.exit_code == 0, result.err
        assert (work / f"o{i}" / f"{name}-2" / "summary.json").is_file()
    assert (work / "o0" / "summary.csv").is_file()


def test_18_a_second_run_replaces_the_whole_folder_and_says_so(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(capsys, "run", "s.toml", "--out", "out").exit_code == 0
    second = run_cli(capsys, "run", "b.toml", "--out", "out", "--no-report")
    assert second.exit_code == 0, second.err
    assert "replaced out: it held the run of scenario 'repro'" in second.err
    names = sorted(p.name for p in (work / "out").iterdir())
    assert names == ["b-system", "overrides.json", MANIFEST_FILE, "scenario.toml"]
    manifest = json.loads((work / "out" / MANIFEST_FILE).read_text())
    assert manifest["kind"] == "run" and manifest["scenario"] == "scenario_B"
    assert manifest["complete"] is True
    assert leftovers(work) == []


def test_18_a_sweep_keeps_its_cache_across_reruns_and_a_run_takes_the_folder(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = ["sweep", "s.toml", "--out", "out", "--param", "seed=1,2", "--jobs", "1"]
    assert run_cli(capsys, *sweep).exit_code == 0
    again = run_cli(capsys, *sweep)
    assert "0 simulated, 2 from the cache" in again.out and "replaced" not in again.err
    run = run_cli(capsys, "run", "s.toml", "--out", "out")
    assert run.exit_code == 0 and "it held the sweep of scenario 'repro'" in run.err
    assert not (work / "out" / "sweep.csv").exists() and not (work / "out" / "cache").exists()


def test_18_a_folder_being_written_is_refused_to_a_second_command(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OutputFolder.open(work / "out", "sweep") as busy:
        refused(run_cli(capsys, "run", "s.toml", "--out", "out"), "another pagesim command")
        assert busy.staging.is_dir()
    assert not (work / "out").exists()  # created for the command, which wrote nothing
    assert leftovers(work) == []


def test_20_report_refuses_truncated_frames_and_incomplete_folders(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(capsys, "run", "s.toml", "--out", "r").exit_code == 0
    requests = work / "r" / "v0" / "requests.csv"
    requests.write_text(requests.read_text().splitlines()[0] + "\n")  # the header alone
    refused(run_cli(capsys, "report", "r"), "requests.csv", "0 requests", "counts 3")
    (work / "i").mkdir()
    (work / "i" / MANIFEST_FILE).write_text('{"kind": "sweep", "complete": false}')
    refused(run_cli(capsys, "report", "i"), "incomplete output", "sweep")


@contextmanager
def immutable(folder: Path) -> Iterator[None]:
    """`folder` with the immutable flag, which stops even root from renaming it; skips the test
    where it cannot be set (not root, no chattr, a file system without the flag)."""
    done = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip("cannot set the immutable flag here (chattr +i needs root and ext4 or alike)")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=False)


@pytest.mark.skipif(sys.platform != "linux" or shutil.which("chattr") is None, reason="chattr")
@pytest.mark.parametrize("command", ["run", "sweep"])
def test_19_an_immutable_out_is_refused_before_simulating(
    work: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """Reproducer 19: it used to simulate, then fail to commit with a PermissionError traceback."""
    (work / "ro").mkdir()
    extra = ["--param", "seed=1,2", "--jobs", "1"] if command == "sweep" else ["--no-report"]
    with immutable(work / "ro"):
        result = run_cli(capsys, command, "s.toml", "--out", "ro", *extra)
    refused(result, "--out 'ro'", "immutable")
    assert "simulating" not in result.err and "sweeping" not in result.err
    assert leftovers(work) == [] and list((work / "ro").iterdir()) == []


def test_19_a_commit_the_file_system_refuses_leaves_out_as_it_was(
    work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The swap fails half-way (here: the file system refuses to rename `out`, after its cache
    was carried into the new output): every step is undone, one clear error, exit 2."""
    sweep = ["sweep", "s.toml", "--out", "out", "--param", "seed=1,2", "--jobs", "1"]
    assert run_cli(capsys, *sweep).exit_code == 0
    before = {p.relative_to(work): p.read_bytes() for p in (work / "out").rglob("*") if p.is_file()}
    real_replace = os.replace

    def replace(source: Any, target: Any) -> None:
        if Path(source) == Path("out"):
            raise PermissionError(1, "Operation not permitted")
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", replace)
    refused(run_cli(capsys, *sweep), "--out 'out'", "cannot replace it", "Operation not permitted")
    monkeypatch.undo()
    after = {p.relative_to(work): p.read_bytes() for p in (work / "out").rglob("*") if p.is_file()}
    assert after == before  # the cache came back too
    assert leftovers(work) == []


def test_an_interrupted_sweep_resumed_says_nothing_about_replacing(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An interrupted sweep leaves its folder labelled with its scenario and unfinished; its
    rerun resumes without "replaced out: it held the sweep of scenario ''", and another
    command on it names what it held."""
    with OutputFolder.open(work / "out", "sweep", scenario="repro") as unfinished:
        (work / "out" / "cache").mkdir()
        (work / "out" / "cache" / "point.json").write_text("{}")  # a point worth resuming
        assert unfinished.created
    manifest = json.loads((work / "out" / MANIFEST_FILE).read_text())
    assert manifest["scenario"] == "repro" and manifest["complete"] is False
    resumed = run_cli(capsys, "sweep", "s.toml", "--out", "out", "--param", "seed=1,2")
    assert resumed.exit_code == 0 and "replaced" not in resumed.err, resumed.err
    (work / "other").mkdir()
    (work / "other" / MANIFEST_FILE).write_text(
        '{"kind": "sweep", "scenario": "", "complete": false}'
    )
    other = run_cli(capsys, "run", "s.toml", "--out", "other", "--no-report")
    assert "replaced other: it held an unfinished sweep\n" in other.err

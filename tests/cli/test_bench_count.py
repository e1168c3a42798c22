"""`pagesim bench sim --instructions` (simulator/studies/bench_count.py): the simulation's
instructions counted under valgrind, setup subtracted, this tree alone or against a revision."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

import pytest
from cli_helpers import run_cli

from pagesim.simulator.core.errors import InputError
from pagesim.simulator.studies.bench_compare import compile_tree
from pagesim.simulator.studies.bench_count import VALGRIND, instructions_of

# What valgrind 3.19's cachegrind prints at the end of a run, on stderr.
REPORT = """==4242== Cachegrind, a cache and branch-prediction profiler
==4242== Command: python -S timing.py
==4242==
==4242== I   refs:      5,898,013,566
"""

# Stands in for valgrind: drops its options, runs the command, and reports 1,000 instructions
# for a run that stops before simulating ("setup", the command's last word) and 5,000 otherwise.
FAKE_VALGRIND = f"""#!{sys.executable}
import subprocess, sys
command = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
done = subprocess.run(command)
count = "1,000" if command[-1] == "setup" else "5,000"
print(f"==1== I   refs:      {{count}}", file=sys.stderr)
sys.exit(done.returncode)
"""


def test_the_count_is_read_from_valgrinds_report() -> None:
    assert instructions_of(REPORT) == 5_898_013_566
    with pytest.raises(InputError, match="no instruction count"):
        instructions_of("==1== Cachegrind\n")


@pytest.fixture
def fake_valgrind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / VALGRIND[0]
    script.write_text(FAKE_VALGRIND)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.usefixtures("fake_valgrind")
def test_counts_subtract_the_setup_on_each_side_and_compare_the_summaries(
    capsys: pytest.CaptureFixture[str],
) -> None:
    alone = run_cli(capsys, "bench", "sim", "--requests", "5", "--instructions")
    assert alone.exit_code == 0, alone.err
    lines = alone.out.splitlines()
    assert lines[0].startswith("azure-conv, vllm-v1: instructions of the simulation")
    assert lines[1] == "  this tree: 4,000 (0.000 G; the whole run 0.000 G, setup 0.000 G)"
    both = run_cli(capsys, "bench", "sim", "--requests", "5", "--against", "HEAD", "--instructions")
    assert both.exit_code == 0, both.err
    lines = both.out.splitlines()
    assert lines[1].startswith("  HEAD (before): 4,000 ") and lines[2].startswith(
        "  this tree (after): 4,000 "
    )
    assert lines[3] == "after/before: 1.0000 (+0.00% instructions); summaries agree (rel 1e-9)"


def test_without_valgrind_it_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no valgrind there
    result = run_cli(capsys, "bench", "sim", "--requests", "5", "--instructions")
    assert result.exit_code == 2
    assert "--instructions needs valgrind on the PATH" in result.err
    assert "Traceback" not in result.err


def test_a_tree_is_compiled_but_for_its_tests(tmp_path: Path) -> None:
    for name in ("simulator/engine.py", "tests/test_x.py"):
        (tmp_path / name).parent.mkdir(parents=True)
        (tmp_path / name).write_text("X = 1\n")
    compile_tree(tmp_path)
    assert list((tmp_path / "simulator" / "__pycache__").glob("engine.*.pyc"))
    assert not (tmp_path / "tests" / "__pycache__").exists()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which(VALGRIND[0]) is None, reason="valgrind is not on the PATH")
def test_a_real_count_repeats_to_a_few_thousand_instructions(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Two valgrind runs a count (about 12 s apiece here). Seen: 30,155,701, 30,159,834 and
    # 30,156,505 for this simulation of ~30 M instructions (without COUNT_ENV's one BLAS
    # thread, the import alone moved by ~5 M).
    counts = []
    for _ in range(2):
        result = run_cli(capsys, "bench", "sim", "--synthetic", "3", "--instructions")
        assert result.exit_code == 0, result.err
        line = result.out.splitlines()[1]
        assert line.startswith("  this tree: ")
        counts.append(int(line.split(": ")[1].split(" (")[0].replace(",", "")))
    assert counts[0] > 1_000_000  # a simulation ran
    assert abs(counts[0] - counts[1]) < 50_000

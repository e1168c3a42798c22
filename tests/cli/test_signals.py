"""Kill tests: SIGINT and SIGTERM during the simulation and during the writing of the report, for
`run` and for `sweep`. Each must leave --out holding the previous complete output (a sweep may
add cached points, which a rerun resumes from), no staging folder beside it, one line saying
what happened, exit 128 + the signal, and no process behind (reproducer 17: SIGTERM used to
orphan a sweep's fork server and workers).

The phase is found by watching the file system: the staging folder appears before anything is
simulated and fills only once the report is written; a sweep's cache fills point by point.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_helpers import run_quiet

from pagesim.reports.saved import read_saved

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc; POSIX signals")

# Slow enough that each phase lasts well over the 5 ms the watcher sleeps between looks.
SCENARIO = """name = "slow"
[model]
preset = "llama-2-7b"
[gpu]
preset = "a100-80gb"
[workload]
num_requests = 1500
[workload.arrival]
kind = "poisson"
rate_per_s = 20
[workload.prompt]
kind = "fixed"
value = 32
[workload.output]
kind = "fixed"
value = 64
[[systems]]
name = "v0"
policy = "vllm-v0"
"""
QUICK = ["--set", "workload.num_requests=20"]
SWEEP = ["--param", "seed=1,2,3", "--jobs", "2"]
TIMEOUT_S = 120


def pagesim(*args: str, cwd: Path) -> subprocess.Popen[str]:
    """The CLI in a session of its own, so that what it leaves behind can be found."""
    return subprocess.Popen(
        [sys.executable, "-c", "from pagesim.cli import main; main()", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    _, err = proc.communicate(timeout=TIMEOUT_S)
    return proc.returncode, err


def session_processes(sid: int) -> dict[int, str]:
    """The live processes of session `sid` (zombies excluded): pid -> command line."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            fields = text[text.rindex(")") + 2 :].split()
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            found[int(stat.parent.name)] = cmdline[:120]
    return found


def in_session(sid: int) -> list[str]:
    """Command lines of the live processes of session `sid` (zombies excluded)."""
    return list(session_processes(sid).values())


def stop_session(sid: int) -> None:
    """Kill what a failed test left in session `sid` (processes it started), one by one."""
    for pid in session_processes(sid):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def digest(folder: Path) -> dict[str, str]:
    """Every file of an output folder but its sweep cache, by content."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.relative_to(folder).parts[0] != "cache"
    }


def staging(work: Path) -> list[Path]:
    return list(work.glob(".out.staging-*"))


def cached(work: Path) -> int:
    return len(list((work / "out" / "cache").glob("*.json")))


def simulating(work: Path, num_cached: int) -> bool:
    """The command opened its output and is simulating (a sweep: a point is done, more run)."""
    return bool(staging(work)) and (num_cached == 0 or cached(work) > num_cached)


def writing(work: Path, _num_cached: int) -> bool:
    """The staged output has files: the report is being written."""
    return any(any(s.iterdir()) for s in staging(work) if s.is_dir())


PHASES: dict[str, Callable[[Path, int], bool]] = {"simulation": simulating, "report": writing}


@pytest.fixture(scope="module")
def previous_outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each command's complete output of the QUICK scenario, made once (`out` beside `s.toml`,
    paths relative): each test starts from a copy of it."""
    made = {}
    for command in ("run", "sweep"):
        work = tmp_path_factory.mktemp(f"previous-{command}")
        (work / "s.toml").write_text(SCENARIO)
        extra = SWEEP if command == "sweep" else []
        with pytest.MonkeyPatch.context() as patch:
            patch.chdir(work)
            done = run_quiet(command, "s.toml", "--out", "out", *extra, *QUICK)
        assert done.exit_code == 0, done.err
        made[command] = work
    return made


@pytest.mark.parametrize("command", ["run", "sweep"])
@pytest.mark.parametrize("phase", list(PHASES))
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_leaves_the_previous_output_and_no_process(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    previous_outputs: dict[str, Path],
    command: str,
    phase: str,
    signum: int,
) -> None:
    shutil.copytree(previous_outputs[command], tmp_path, dirs_exist_ok=True)
    monkeypatch.chdir(tmp_path)
    extra = SWEEP if command == "sweep" else []
    before, num_cached = digest(tmp_path / "out"), cached(tmp_path)

    proc = pagesim(command, "s.toml", "--out", "out", *extra, cwd=tmp_path)
    deadline = time.monotonic() + TIMEOUT_S
    while not PHASES[phase](tmp_path, num_cached):
        assert proc.poll() is None, f"ended before the {phase}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"never reached the {phase}"
        time.sleep(0.005)
    proc.send_signal(signum)
    code, err = finish(proc)

    name = signal.Signals(signum).name
    assert code == 128 + signum, err
    lines = [line for line in err.splitlines() if line.startswith("interrupted")]
    assert len(lines) == 1 and lines[0].startswith(f"interrupted by {name}: out is as it was")
    assert "Traceback" not in err
    assert digest(tmp_path / "out") == before
    assert staging(tmp_path) == [] and not list(tmp_path.glob(".out.*"))
    deadline = time.monotonic() + 15
    while in_session(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert in_session(proc.pid) == []
    assert read_saved(tmp_path / "out").kind == command  # `pagesim report` takes it


def test_sigkill_of_a_sweep_leaves_no_process(tmp_path: Path) -> None:
    """Reproducer 18: SIGKILL (kill -9, the OOM killer) runs no cleanup in the sweep, yet its
    workers, its fork server and its resource tracker must not outlive it."""
    (tmp_path / "s.toml").write_text(SCENARIO)
    seeds = ["--param", "seed=" + ",".join(str(s) for s in range(1, 9)), "--jobs", "2"]
    proc = pagesim("sweep", "s.toml", "--out", "out", *seeds, cwd=tmp_path)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        # Killed once a point is cached (the workers are up) and while more are simulated:
        # the driver, its tracker, its fork server and at least one worker.
        while not (cached(tmp_path) >= 1 and len(in_session(proc.pid)) >= 4):
            assert proc.poll() is None, f"ended before the kill: {proc.communicate()}"
            assert time.monotonic() < deadline, "never reached the simulation"
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(TIMEOUT_S) == -signal.SIGKILL  # not `finish`: the rest holds its pipes
        deadline = time.monotonic() + 30
        while in_session(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert in_session(proc.pid) == []
    finally:
        stop_session(proc.pid)
        finish(proc)


def test_sigterm_while_the_workers_start_prints_no_traceback(tmp_path: Path) -> None:
    """Reproducer 22: SIGTERM as the pool starts its workers once left a worker the pool had
    not recorded, which found the driver's queues gone and printed a traceback after the
    "interrupted" line. The signal is sent the moment the fork server is up."""
    (tmp_path / "s.toml").write_text(SCENARIO)
    proc = pagesim("sweep", "s.toml", "--out", "out", *SWEEP, cwd=tmp_path)
    deadline = time.monotonic() + TIMEOUT_S
    while len(in_session(proc.pid)) < 3:  # the driver, its tracker and its fork server
        assert proc.poll() is None, f"ended before the pool started: {proc.communicate()}"
        assert time.monotonic() < deadline, "the pool never started"
        time.sleep(0.002)
    proc.send_signal(signal.SIGTERM)
    code, err = finish(proc)
    assert code == 128 + signal.SIGTERM, err
    deadline = time.monotonic() + 15
    while in_session(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert in_session(proc.pid) == []
    lines = [line for line in err.splitlines() if line.startswith("interrupted")]
    assert len(lines) == 1 and lines[0].startswith("interrupted by SIGTERM"), err
    assert "Traceback" not in err and "Error" not in err, err

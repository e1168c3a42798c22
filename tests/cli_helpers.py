"""Run the `pagesim` entry point in-process, as a shell would, capturing exit code and output."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from pagesim.cli import main

# For tests that run `pagesim bench sim --against` (a `git worktree add` of the revision): one
# worker runs them one after another, since two adds at once can fail (tests/conftest.py).
MAKES_GIT_WORKTREES = pytest.mark.xdist_group("git-worktree")


@dataclass
class CliResult:
    exit_code: int
    out: str
    err: str


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> CliResult:
    code = _exit_code(*args)
    captured = capsys.readouterr()
    return CliResult(code, captured.out, captured.err)


def run_quiet(*args: str) -> CliResult:
    """`run_cli` without capsys (for a fixture of wider scope than a test): the output is
    captured by redirecting sys.stdout and sys.stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = _exit_code(*args)
    return CliResult(code, out.getvalue(), err.getvalue())


def _exit_code(*args: str) -> int:
    """Run `pagesim ARGS` in this process, as a shell would; its exit code."""
    argv = sys.argv
    sys.argv = ["pagesim", *args]
    try:
        main()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = argv
    return 0


def refused(result: CliResult, *needles: str) -> str:
    """Exit 2, one `error:` line holding every needle, no traceback; the line."""
    assert result.exit_code == 2, (result.exit_code, result.out, result.err)
    lines = [line for line in result.err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert "Traceback" not in result.err + result.out
    return lines[0]


@contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """`folder` unwritable for this process: chmod 555, and as root (whom modes do not stop)
    the immutable flag too; skips the test where neither can be had."""
    folder.chmod(0o555)
    immutable = False
    try:
        if os.geteuid() == 0:
            done = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, check=False)
            if done.returncode != 0:
                pytest.skip(
                    "root, and chattr +i is not available here: cannot make a folder read-only"
                )
            immutable = True
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=False)
        folder.chmod(0o755)


def tiny_scenario(name: str = "repro") -> str:
    """A scenario TOML that runs in a blink: 3 requests of 32 + 8 tokens, one vLLM V0 system
    on Llama-2-7B / A100-80GB (the reproducers', the output tests' and the fuzzers' base)."""
    return f"""name = "{name}"
[model]
preset = "llama-2-7b"
[gpu]
preset = "a100-80gb"
[workload]
num_requests = 3
[workload.arrival]
kind = "burst"
[workload.prompt]
kind = "fixed"
value = 32
[workload.output]
kind = "fixed"
value = 8
[[systems]]
name = "v0"
policy = "vllm-v0"
"""

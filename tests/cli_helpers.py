"""Run the `pagesim` entry point in-process, as a shell would, capturing exit code and output."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pytest

from pagesim.cli import main


@dataclass
class CliResult:
    exit_code: int
    out: str
    err: str


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> CliResult:
    argv = sys.argv
    sys.argv = ["pagesim", *args]
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = argv
    captured = capsys.readouterr()
    return CliResult(code, captured.out, captured.err)

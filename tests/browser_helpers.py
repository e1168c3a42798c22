"""Headless Chromium for the page tests (tests/reports/test_*browser*.py): where it is, the flags
every run takes, and one call that runs it with a profile folder of the test's own."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="/usr/bin/chromium is absent (CI installs Debian's chromium)"
)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
TIMEOUT_S = 90


def chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )

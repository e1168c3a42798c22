"""The scenario file the loader tests start from, as a fixture shared by their files."""

from __future__ import annotations

from pathlib import Path

import pytest
from scenario_helpers import MINIMAL, write


@pytest.fixture
def mini(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # messages name the file relative to the working directory
    return write(tmp_path, MINIMAL)

"""Scenario files for the loader's tests (tests/simulator/scenario/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pagesim.simulator.core.errors import InputError
from pagesim.simulator.scenario.load import load_scenario

MINIMAL = """
name = "mini"
[model]
preset = "llama-2-7b"
[gpu]
preset = "a100-80gb"
[workload]
num_requests = 10
[workload.arrival]
kind = "poisson"
rate_per_s = 2.0
[workload.prompt]
kind = "fixed"
value = 64
[workload.output]
kind = "uniform"
low = 8
high = 32
[defaults]
policy = "vllm-v0"
block_size = 32
[[systems]]
name = "a"
[[systems]]
name = "b"
policy = "orca"
reservation = "pow2"
block_size = 8
"""


def write(folder: Path, text: str, name: str = "s.toml") -> Path:
    """`text` written to the file `name` in `folder`; its path."""
    path = folder / name
    path.write_text(text)
    return path


def error_of(path: Path | str, overrides: tuple[str, ...] = ()) -> str:
    """The message of the InputError that loading the scenario `path` raises."""
    with pytest.raises(InputError) as info:
        load_scenario(path, overrides)
    return str(info.value)


def replaced(old: str, new: str) -> str:
    """MINIMAL with `old`, which must be in it, replaced by `new`."""
    assert old in MINIMAL
    return MINIMAL.replace(old, new)

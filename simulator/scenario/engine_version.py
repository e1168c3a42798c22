"""Reading a [[systems]] `vllm_version`: the vLLM release a vllm-v1 system follows."""

from __future__ import annotations

from pagesim.simulator.core.config import VllmVersion
from pagesim.simulator.core.errors import choices_text
from pagesim.simulator.scenario.table import Table, described

VALID = choices_text(f'"{v.value}"' for v in VllmVersion)


def read_vllm_version(t: Table, key: str) -> VllmVersion:
    """ "0.34", "0.34.0" or "v0.34.0" (a release pagesim models), as a quoted string: a TOML
    number would read 0.30 as 0.3."""
    value = t.data[key]
    if not isinstance(value, str):
        t.fail(
            key, f'expected a quoted release such as "0.34", got {described(value)}; valid: {VALID}'
        )
    text = value.strip().lower().removeprefix("v")
    if text.count(".") == 2 and text.endswith(".0"):
        text = text[: -len(".0")]
    for version in VllmVersion:
        if version.value == text:
            return version
    t.fail(key, f"unknown vLLM release {value!r}; valid: {VALID}")

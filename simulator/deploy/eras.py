"""Which vLLM release a system's command lines are written for, and that release's flags.

A vllm-v1 system follows the release in its `vllm_version` knob (0.11, 0.33 or 0.34; none set:
the newest, v0.34.0, as its run does); a vllm-v0 system is vLLM's V0 engine, whose commands are
written for v0.6.4, the last V0 release pagesim's V0 rules were read from. Static batching and
Orca are the vLLM paper's baselines: vLLM has no command for them.

Flags come from `vllm_flags.json` beside this module: every option string of `vllm serve` and of
the serving benchmark of each release, as vLLM's own parsers build them (the file says how they
were extracted). `unknown_flags` checks a command line against them.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from pagesim.simulator.core.config import NEWEST_VLLM, Policy, SystemConfig, VllmVersion
from pagesim.simulator.core.errors import InputError

FLAGS_FILE = Path(__file__).with_name("vllm_flags.json")


class Era(Enum):
    """A vLLM release whose command lines pagesim writes."""

    V0_6_4 = "0.6.4"
    V0_11_0 = "0.11.0"
    V0_33_0 = "0.33.0"
    V0_34_0 = "0.34.0"

    @property
    def release(self) -> tuple[int, int, int]:
        major, minor, patch = self.value.split(".")
        return int(major), int(minor), int(patch)

    @property
    def is_v1(self) -> bool:
        return self is not Era.V0_6_4

    def has(self, since: tuple[int, int, int]) -> bool:
        """Whether this release is `since` or later."""
        return self.release >= since


NEWEST = Era.V0_34_0
# A vllm-v1 system's `vllm_version` knob and the release whose commands it gets.
V1_ERAS = {
    VllmVersion.V0_11: Era.V0_11_0,
    VllmVersion.V0_33: Era.V0_33_0,
    VllmVersion.V0_34: Era.V0_34_0,
}


def era_of(system: SystemConfig) -> Era | None:
    """The release a system's commands are written for; None for a policy vLLM never ran."""
    if system.policy is Policy.VLLM_V0:
        return Era.V0_6_4
    if system.policy is not Policy.VLLM_V1:
        return None
    return V1_ERAS[system.vllm_version or NEWEST_VLLM]


def vllm_version(era: Era) -> VllmVersion:
    """The `vllm_version` knob of a V1 release (what a vllm-v1 system is run as)."""
    return next(version for version, e in V1_ERAS.items() if e is era)


def parse_v1_era(text: str, where: str) -> Era:
    """A vLLM V1 release given as 0.11, 0.11.0 or v0.11.0 (InputError naming `where`)."""
    given = text.strip().lower().removeprefix("v")
    for era in Era:
        if era.is_v1 and given in (era.value, era.value.rsplit(".", 1)[0]):
            return era
    valid = ", ".join(e.value.rsplit(".", 1)[0] for e in Era if e.is_v1)
    raise InputError(f"{where}: unknown vLLM release {text!r}; valid: {valid}")


@dataclass(frozen=True)
class EraFlags:
    """One release's option strings and where they were read."""

    era: Era
    serve: frozenset[str]
    bench: frozenset[str]
    bench_tool: str  # "vllm bench serve" or "python benchmarks/benchmark_serving.py"
    serve_source: str
    bench_source: str
    wheel: str


@functools.cache
def era_flags(era: Era) -> EraFlags:
    data = json.loads(FLAGS_FILE.read_text(encoding="utf-8"))["eras"][era.value]
    return EraFlags(
        era,
        frozenset(data["serve"]),
        frozenset(data["bench"]),
        data["bench_tool"],
        data["serve_source"],
        data["bench_source"],
        data["wheel"],
    )


def unknown_flags(argv: Sequence[str], known: frozenset[str]) -> list[str]:
    """The option strings of `argv` (tokens starting with '-', before any '=') that `known`
    lacks; a value that starts with '-' (a negative number) is not an option."""
    found = []
    for token in argv:
        if not token.startswith("-") or is_number(token):
            continue
        flag = token.split("=", 1)[0]
        if flag not in known:
            found.append(flag)
    return found


def is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True

"""Which steps a block map records (`BlockMapWindow`, from --block-map), and what it can draw
(`check_mappable`): bad input is one line naming --block-map (InputError, exit 2).

    --block-map all | N | START:END     every step of a run of at most MAX_STEPS; the first N;
                                        steps START..END-1 (0-based, as the engine counts them)

A block map draws one replica's paged cache (one block table per sequence) or contiguous cache,
of at most MAX_BLOCKS blocks: not a fleet, not a hybrid model's layer groups.
"""

from __future__ import annotations

from dataclasses import dataclass

from pagesim.simulator.core.config import Scenario, SystemConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.kv.block_budget import Capacity, kv_capacity

MAX_STEPS = 2_000  # steps one block map holds: a page a browser opens at once
MAX_BLOCKS = 32_768  # GPU blocks one block map draws
FIELD = "--block-map"


@dataclass(frozen=True, slots=True)
class BlockMapWindow:
    """Steps `start` .. `end` - 1 (0-based); `end` None: to the run's end, which must come
    within MAX_STEPS. `spec` is how it was asked for, for messages."""

    start: int = 0
    end: int | None = None
    spec: str = "all"

    @classmethod
    def parse(cls, text: str) -> BlockMapWindow:
        """`all`, `N` (the first N steps) or `START:END`; InputError naming --block-map."""
        spec = text.strip()
        how = "all, N (the first N steps) or START:END (steps START..END-1, e.g. 0:200)"
        if spec == "all":
            return cls(spec=spec)
        head, colon, tail = spec.partition(":")
        try:
            start, end = (int(head), int(tail)) if colon else (0, int(head))
        except ValueError:
            raise InputError(f"{FIELD} {text!r}: not {how}") from None
        if start < 0 or end <= start:
            raise InputError(f"{FIELD} {text!r}: needs 0 <= START < END; give {how}")
        if end - start > MAX_STEPS:
            raise InputError(
                f"{FIELD} {text!r}: {end - start:,} steps; a block map holds at most "
                f"{MAX_STEPS:,} (e.g. {FIELD} {start}:{start + MAX_STEPS})"
            )
        return cls(start, end, spec)


def unmappable_reason(capacity: Capacity, system: SystemConfig) -> str | None:
    """Why a block map cannot draw `system`'s KV cache (one line naming --block-map), or None."""
    if capacity.layout is not None:
        return (
            f"{FIELD}: system {system.name!r} serves a model with sliding-window or state "
            "layers (one block table per layer group), which a block map does not draw; use a "
            "model of full attention only"
        )
    if capacity.num_gpu_blocks > MAX_BLOCKS:
        return (
            f"{FIELD}: system {system.name!r} has {capacity.num_gpu_blocks:,} KV blocks, more "
            f"than a block map draws ({MAX_BLOCKS:,}); set num_kv_blocks or a larger block_size"
        )
    return None


def check_mappable(scenario: Scenario) -> None:
    """Before any run: InputError unless a block map can draw every system of `scenario` (one
    replica, not a fleet; KV caches `unmappable_reason` accepts)."""
    if scenario.cluster is not None or scenario.workload.sessions is not None:
        raise InputError(
            f"{FIELD}: scenario {scenario.name!r} runs a fleet ([cluster] or "
            "[workload.sessions]); a block map draws one replica's KV cache: use a scenario "
            "without them"
        )
    for system in scenario.systems:
        reason = unmappable_reason(kv_capacity(scenario, system), system)
        if reason is not None:
            raise InputError(reason)

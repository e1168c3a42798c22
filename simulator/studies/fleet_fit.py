"""Whether one replica can run a system at all: the weights fit at its GPU and degree, at least
one KV block fits beside them, and its execution model prices that GPU (a profile measured on
another GPU or degree does not) (the fleet searches list a shape that cannot as "cannot run",
never simulated)."""

from __future__ import annotations

from pagesim.simulator.core.config import Scenario, SystemConfig
from pagesim.simulator.core.defaults import resolve_runnable
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.execution.factory import make_execution_model
from pagesim.simulator.kv.block_budget import kv_capacity


def unfit_reason(scenario: Scenario, system: SystemConfig) -> str | None:
    """Why one replica of `scenario` (its GPU and degree) cannot run `system`, or None."""
    try:
        resolved = resolve_runnable(system, scenario).system
        capacity = kv_capacity(scenario, resolved)
        make_execution_model(scenario, resolved)  # what each replica builds first
    except InputError as exc:
        return str(exc)
    if capacity.num_gpu_blocks < 1:
        return f"system {system.name!r}: no KV block fits beside the weights"
    return None

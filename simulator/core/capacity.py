"""Frozen configuration of a fleet search: what `pagesim capacity` varies when it sizes a fleet.

Parsed at the edge by simulator/scenario/capacity.py from a scenario's [capacity] section; the
search itself is simulator/studies/fleet_search.py. A scenario without one is searched for its
highest sustainable request rate instead (simulator/studies/capacity_search.py).

The same idea in other layers: reports/capacity.py renders a capacity search.
"""

from __future__ import annotations

from dataclasses import dataclass

from pagesim.simulator.core.catalog import GPUSpec
from pagesim.simulator.core.cluster import RouterKind


@dataclass(frozen=True, slots=True)
class CapacityConfig:
    """The fleets to try: one pool of `min_replicas`..`max_replicas` identical replicas, for
    every GPU x tensor-parallel degree x router listed (empty: the scenario's own), or for a
    disaggregated scenario its prefill and decode pools' sizes and degrees; and what a GPU-hour
    of each GPU costs (by GPU name; empty: no cost figures)."""

    min_replicas: int = 1
    max_replicas: int = 64
    gpus: tuple[GPUSpec, ...] = ()
    tensor_parallel: tuple[int, ...] = ()
    routers: tuple[RouterKind, ...] = ()
    price_per_gpu_hour: tuple[tuple[str, float], ...] = ()  # (GPU name, currency units / hour)
    currency: str = "USD"
    # A disaggregated scenario's search (simulator/studies/disagg_search.py): every prefill count
    # x decode count (each in min..max_replicas) x prefill degree x decode degree of at most
    # `max_gpus` GPUs (empty degrees: the pool's own).
    max_gpus: int | None = None
    prefill_tensor_parallel: tuple[int, ...] = ()
    decode_tensor_parallel: tuple[int, ...] = ()

    def price_of(self, gpu: str) -> float | None:
        return dict(self.price_per_gpu_hour).get(gpu)

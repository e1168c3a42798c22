"""Capacity search: the highest sustainable request rate of each configuration, and a ranking.

A *configuration* is one system of one variant of a scenario (the variants come from one or two
`--param` axes, as for a sweep: block size, max sequences, token budget, preemption mode, GPU,
tensor parallelism...). For each, the search varies `workload.arrival.rate_per_s` only.

Sustainable, precisely: a run at rate r (the scenario's workload, seed and stop rules, with the
arrival rate set to r, and enough requests that they arrive over at least `window_s` seconds,
default 60: num_requests = max(the scenario's, ceil(r x window_s)); without that, a fixed
request count at a high rate is one burst, which a big enough batch absorbs however fast
requests keep coming) sustains r when both hold over the requests that arrive after warm-up:

1. SLO attainment: (requests that finished meeting the scenario's [slo] TTFT and TPOT bounds)
   / (requests offered) >= `min_slo_share` (default 0.9). Rejected requests, and requests still
   unfinished at `stop.max_time_s`, count as misses.
2. Bounded queue: the 99th percentile of the queueing delay (arrival to first admission) is at
   most `max_queue_delay_s` (default 5 s, Vidur's capacity criterion); a request never admitted
   waits forever. Past capacity the waiting queue grows for as long as requests arrive, and so
   does the wait of the later ones, without bound as the run lengthens; this catches that even
   when the SLO bounds TPOT only.

The search assumes sustainability is monotone in the rate (true in expectation; arrivals at
every rate come from the same random draws, scaled, so it is usually exact in practice too). It
starts at the scenario's rate, doubles or halves until one rate is sustained and one is not,
then bisects until the two are within `rel_tol` of each other (the studies' one bisection:
simulator/studies/bisection.py, `RateSearch`). It reports both rates: the
highest sustained and the lowest failed, each one simulated. Configurations search in lockstep,
one round of points at a time, so a round runs on every worker at once and every point lands in
the sweep cache (simulator.studies.point_cache): a rerun, or a wider search, resumes.

Configurations are ranked by goodput per GPU at their highest sustained rate r: the requests per
second that meet the SLO in steady state, r x SLO share, divided by the replica's tensor-parallel
GPUs. (The run's own `goodput_req_s` divides by the whole run, drain included, so a short run
understates it; it is kept as `measured_goodput_req_s`.) Keep `window_s` well above
`max_queue_delay_s`, or the queue criterion has too little time to see a queue grow.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from pagesim.simulator.core.config import ArrivalKind, Scenario, SystemConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.scenario.load import expand_sweep, load_scenario, parse_param
from pagesim.simulator.studies.bisection import RateSearch, search_in_rounds
from pagesim.simulator.studies.executors import PointExecutor
from pagesim.simulator.studies.point_cache import PointCache
from pagesim.simulator.studies.points import Point, point_key
from pagesim.simulator.studies.sweep import PointRecord

RATE_PATH = "workload.arrival.rate_per_s"
_RATED = (ArrivalKind.POISSON, ArrivalKind.GAMMA, ArrivalKind.CONSTANT)


@dataclass(frozen=True)
class Criteria:
    """When a run sustains its rate (see the module docstring)."""

    min_slo_share: float = 0.9
    max_queue_delay_s: float = 5.0

    def __post_init__(self) -> None:
        if not 0 < self.min_slo_share <= 1:
            raise InputError(f"--slo-share: must be in (0, 1], got {self.min_slo_share}")
        if not self.max_queue_delay_s > 0:
            raise InputError(f"--max-queue-delay-s: must be > 0, got {self.max_queue_delay_s}")

    def problems(self, metrics: Mapping[str, Any]) -> list[str]:
        """Why a run does not sustain its rate (empty when it does)."""
        found = []
        share, delay = float(metrics["slo_share"]), float(metrics["queue_delay_p99_s"])
        if share < self.min_slo_share:
            found.append(f"SLO met by {share:.1%} < {self.min_slo_share:.0%}")
        if delay > self.max_queue_delay_s:
            found.append(f"p99 queueing delay {delay:.3g} s > {self.max_queue_delay_s:g} s")
        return found

    def is_sustained(self, metrics: Mapping[str, Any]) -> bool:
        return not self.problems(metrics)


# --- configurations ------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """One configuration to size: `system` of `scenario`, the variant at axis values `axes`."""

    axes: dict[str, object]
    scenario: Scenario
    system: SystemConfig

    @property
    def label(self) -> str:
        values = " ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in self.axes.items())
        return f"{self.system.name} {values}".strip()

    @property
    def num_gpus(self) -> int:
        return self.scenario.tensor_parallel

    def at_rate(self, rate: float, window_s: float = 0.0) -> Point:
        """The point that runs this configuration at `rate`, offering requests for at least
        `window_s` seconds (more requests than the scenario's when the rate needs them)."""
        w = self.scenario.workload
        num_requests = w.num_requests
        if num_requests is not None and window_s > 0:
            num_requests = max(num_requests, math.ceil(rate * window_s))
        workload = replace(
            w, arrival=replace(w.arrival, rate_per_s=rate), num_requests=num_requests
        )
        scenario = replace(self.scenario, workload=workload)
        return Point(
            self.axes | {RATE_PATH: rate}, scenario, self.system, point_key(scenario, self.system)
        )


def configurations(
    scenario: str | Path, overrides: Sequence[str] = (), params: Sequence[str] = ()
) -> list[Config]:
    """Every system of every variant (`params` as for a sweep; none: the scenario's systems),
    checked for what a rate search needs: an SLO, and arrivals with a rate."""
    if any(parse_param(text).path == RATE_PATH for text in params):
        raise InputError(f"--param {RATE_PATH}: the search sets the rate itself; give other axes")
    if params:
        variants = expand_sweep(scenario, overrides, params=params)
    else:
        variants = [({}, load_scenario(scenario, overrides))]
    base = variants[0][1]
    where = base.source or base.name
    if base.slo.ttft_s is None and base.slo.tpot_s is None:
        raise InputError(
            f"{where}: slo: a capacity search needs an SLO; add [slo] ttft_s and/or tpot_s, "
            "e.g. --set slo.ttft_s=2 --set slo.tpot_s=0.1"
        )
    for _, variant in variants:
        w = variant.workload
        if w.explicit or w.arrival.kind not in _RATED:
            kind = "explicit requests" if w.explicit else f"kind {w.arrival.kind.value!r}"
            raise InputError(
                f"{where}: workload.arrival: a capacity search varies rate_per_s, but the "
                f"arrivals are {kind}; valid kinds: {', '.join(k.value for k in _RATED)}; "
                "or add a [capacity] section to size a fleet for these arrivals as they are "
                "(docs/fleets.md)"
            )
    return [
        Config(axes, variant, system) for axes, variant in variants for system in variant.systems
    ]


# --- the search ----------------------------------------------------------------------------


@dataclass
class CapacityRun:
    """Per configuration: the bracket found, and every evaluation made."""

    configs: list[Config]
    searches: list[RateSearch]
    evaluations: list[tuple[Config, PointRecord, bool]] = field(default_factory=list)
    num_cached: int = 0
    num_computed: int = 0

    def _at(self, config: Config, rate: float | None) -> PointRecord | None:
        return next(
            (r for c, r, _ in self.evaluations if c is config and r.point.axes[RATE_PATH] == rate),
            None,
        )

    def ranking(self) -> pd.DataFrame:
        """One row per configuration, best goodput per GPU first (unsustainable ones last)."""
        rows = []
        for config, search in zip(self.configs, self.searches, strict=True):
            rate = search.ok
            best = self._at(config, rate)  # None when rate is None: no point has that rate
            share = float(best.summary["slo_share"]) if best is not None else None
            goodput = None if share is None or rate is None else rate * share
            rows.append(
                {
                    "config": config.label,
                    **config.axes,
                    "system": config.system.name,
                    "num_gpus": config.num_gpus,
                    "max_rate_per_s": search.ok,
                    "failed_rate_per_s": search.bad,
                    "goodput_req_s": goodput,
                    "goodput_per_gpu": None if goodput is None else goodput / config.num_gpus,
                    "slo_share": share,
                    "queue_delay_p99_s": best.summary["queue_delay_p99_s"] if best else None,
                    "measured_goodput_req_s": best.summary.get("goodput_req_s") if best else None,
                    # metrics/energy.py, at the highest sustained rate (--objective energy)
                    "energy_per_output_token_j": _at(best, "energy_per_output_token_j"),
                    "power_mean_w": _at(best, "power_mean_w"),
                    "num_evaluations": search.num_evaluations,
                }
            )
        table = pd.DataFrame(rows)
        order = table.sort_values(
            ["goodput_per_gpu", "max_rate_per_s"],
            ascending=False,
            na_position="last",
            kind="stable",
        )
        return order.reset_index(drop=True)

    def best(self, n: int, ranking: pd.DataFrame | None = None) -> list[tuple[Config, float]]:
        """The top `n` configurations of the ranking (default: by goodput per GPU) that
        sustained some rate, with that rate."""
        order = self.ranking() if ranking is None else ranking
        rank = {label: i for i, label in enumerate(order["config"])}
        found = [
            (config, search.ok)
            for config, search in zip(self.configs, self.searches, strict=True)
            if search.ok is not None
        ]
        return sorted(found, key=lambda pair: rank[pair[0].label])[:n]

    def evaluation_table(self, criteria: Criteria) -> pd.DataFrame:
        """Every simulated (configuration, rate): axes, rate, config label as `system`, verdict,
        summary keys; sorted by configuration and rate (a latency-vs-rate sweep table)."""
        rows = [
            {
                "system": c.label,
                **r.point.axes,
                "sustained": ok,
                "why_not": "; ".join(criteria.problems(r.summary)),
            }
            | r.summary
            for c, r, ok in self.evaluations
        ]
        table = pd.DataFrame(rows)
        order = {c.label: i for i, c in enumerate(self.configs)}
        table = table.assign(_order=table["system"].map(order))
        return table.sort_values(["_order", RATE_PATH], kind="stable").drop(columns="_order")


def _at(record: PointRecord | None, key: str) -> object:
    return None if record is None else record.summary.get(key)


def search_capacity(
    configs: Sequence[Config],
    executor: PointExecutor,
    *,
    criteria: Criteria | None = None,
    cache: PointCache | None = None,
    use_cache: bool = True,
    min_rate: float = 0.01,
    max_rate: float = 1e4,
    rel_tol: float = 0.02,
    window_s: float = 60.0,
    on_round: Callable[[int, int], None] | None = None,
) -> CapacityRun:
    """Search every configuration's highest sustainable rate, in lockstep rounds of points (see
    the module docstring). `on_round(round, points)` is told each round's size as it starts."""
    if not window_s >= 0:
        raise InputError(f"--window-s: must be >= 0, got {window_s}")
    criteria = criteria or Criteria()
    searches = [
        RateSearch(
            c.scenario.workload.arrival.rate_per_s,
            min_rate=min_rate,
            max_rate=max_rate,
            rel_tol=rel_tol,
        )
        for c in configs
    ]
    done = search_in_rounds(
        list(zip(configs, searches, strict=True)),
        lambda config, rate: config.at_rate(rate, window_s),
        criteria.is_sustained,
        executor,
        cache=cache,
        use_cache=use_cache,
        on_round=on_round,
    )
    return CapacityRun(
        list(configs), searches, done.evaluations, done.num_cached, done.num_computed
    )

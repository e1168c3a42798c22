"""The frontier points of a finished fleet search or disaggregated search (simulator/studies/
frontier.py says what a frontier is): every fleet the search simulated that met the SLO, each
labelled by its shape and size, priced at the scenario's [capacity] prices."""

from __future__ import annotations

import pandas as pd

from pagesim.simulator.studies.disagg_ranking import cost_per_hour
from pagesim.simulator.studies.disagg_search import DECODE, PREFILL, DisaggSearchRun
from pagesim.simulator.studies.fleet_search import REPLICAS, FleetSearchRun
from pagesim.simulator.studies.frontier import frontier_table, record_row


def fleet_frontier(run: FleetSearchRun) -> pd.DataFrame:
    """Every (shape, replicas) that met the SLO, as a frontier table."""
    rows = []
    for shape, record, ok in run.evaluations:
        if not ok:
            continue
        size = int(record.point.axes[REPLICAS])  # type: ignore[call-overload]
        rows.append(
            record_row(
                f"{shape.label} x{size}",
                record.summary,
                system=shape.system.name,
                gpu=shape.gpu.name,
                tensor_parallel=shape.tensor_parallel,
                router=shape.router.value,
                replicas=size,
                price_per_gpu_hour=run.settings.price_of(shape.gpu.name),
            )
        )
    keep = ["system", "gpu", "tensor_parallel", "router", REPLICAS]
    return frontier_table(pd.DataFrame(rows), run.settings.currency, keep)


def disagg_frontier(run: DisaggSearchRun) -> pd.DataFrame:
    """Every (shape, prefill, decode) that met the SLO, as a frontier table; a fleet of two
    GPUs priced differently gets their mean price per GPU-hour (the cost per hour is exact)."""
    rows = []
    for shape, record, ok in run.evaluations:
        if not ok:
            continue
        axes = record.point.axes
        p, d = int(axes[PREFILL]), int(axes[DECODE])  # type: ignore[call-overload]
        hourly = cost_per_hour(run, shape, p, d)
        gpus = shape.num_gpus(p, d)
        rows.append(
            record_row(
                f"{shape.label} {p}P{d}D",
                record.summary,
                system=shape.system.name,
                prefill_replicas=p,
                decode_replicas=d,
                price_per_gpu_hour=None if hourly is None else hourly / gpus,
            )
        )
    keep = ["system", PREFILL, DECODE]
    return frontier_table(pd.DataFrame(rows), run.settings.currency, keep)

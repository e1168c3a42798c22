"""Glossary entries of a run's energy (simulator/metrics/energy.py, power.py): `reports.glossary`
appends ENERGY_METRICS to its SUMMARY_METRICS, the per-replica draws to REPLICA_METRICS."""

from __future__ import annotations

from pagesim.reports.glossary_types import SummaryMetric, Unit

ENERGY = "Energy"
_MODEL = (
    " The GPUs draw their idle floor between steps and, during a step, their memory-bound "
    "(token phase) draw plus the share of the step's ideal time its FLOPs take times the rise "
    "to their compute-bound (prompt phase) draw; the draws are Splitwise's measurements on "
    "A100 and H100, ESTIMATES scaled by TDP on other GPUs (the run's power_model provenance "
    "says which)."
)
ENERGY_METRICS: tuple[SummaryMetric, ...] = (
    SummaryMetric(
        "energy_j",
        "GPU energy",
        Unit.JOULES,
        ENERGY,
        "Energy of every GPU of the run, from time 0 to its end, idle time included." + _MODEL,
    ),
    SummaryMetric(
        "energy_per_output_token_j",
        "Energy per output token",
        Unit.JOULES,
        ENERGY,
        "GPU energy / output tokens produced (every request's, unfinished ones' so far).",
    ),
    SummaryMetric(
        "energy_per_request_j",
        "Energy per request",
        Unit.JOULES,
        ENERGY,
        "GPU energy / finished requests.",
    ),
    SummaryMetric(
        "power_mean_w",
        "Mean power",
        Unit.WATTS,
        ENERGY,
        "GPU energy / the run's duration: the mean draw of all its GPUs.",
    ),
    SummaryMetric(
        "power_peak_w",
        "Peak power",
        Unit.WATTS,
        ENERGY,
        "The highest draw of all the run's GPUs at any instant (a fleet: of their sum, each "
        "replica at its idle floor between its steps).",
    ),
)
REPLICA_ENERGY_METRICS: tuple[SummaryMetric, ...] = (
    SummaryMetric(
        "replica_<i>_power_mean_w",
        "mean power",
        Unit.WATTS,
        "Fleet",
        "Mean draw of replica i's GPUs over the run.",
    ),
    SummaryMetric(
        "replica_<i>_power_peak_w",
        "peak power",
        Unit.WATTS,
        "Fleet",
        "Highest draw of replica i's GPUs, at its hungriest step.",
    ),
)

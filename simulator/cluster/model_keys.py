"""Summary keys only some runs have, for one replica and pooled over a fleet.

- `moe_*`: a mixture of experts' expert reads, means over the priced steps (the execution
  model's `describe()["summary"]`, execution/moe_cost.py).
- `spec_*`: speculative decoding's counts and draft time (policies/spec_decoder.py SpecStats,
  execution/speculative.py).

A single run (engine.simulate) and each replica of a fleet carry the same keys
(`replica_keys`). A fleet's summary pools them (`fleet_keys`): counts and draft time add up over
the replicas; the rates are those of the pooled counts (accepted / drafted over all replicas, not
a mean of the replicas' rates); the draft share is the fleet's draft time over its busy time; the
`moe_*` means are weighted by each replica's priced steps. With one replica the pooled values are
the replica's own, so a fleet of one keeps the single run's summary.
"""

from __future__ import annotations

from collections.abc import Sequence

from pagesim.simulator.cluster.replica import Replica
from pagesim.simulator.core.config import SystemConfig
from pagesim.simulator.core.scheduler import Scheduler
from pagesim.simulator.execution.model import ExecutionModel
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.policies.spec_decoder import SpecStats

Summary = dict[str, float | int | str | None]

# The per-replica rows a fleet's summary adds for these runs (`replica_<i>_<key>`), beside
# cluster/result.py's: the figure each kind of run is read by.
REPLICA_FIGURES = ("spec_acceptance_rate", "moe_experts_touched_per_layer")


def speculative_summary(
    scheduler: Scheduler, execution: ExecutionModel, summary: Summary
) -> Summary:
    """The verifications' counts (policies/speculative.py SpecStats) and the draft's time
    (execution/speculative.py), with its share of the busy time."""
    stats = _spec_stats(scheduler)
    out: Summary = {} if stats is None else dict(stats.summary())
    draft_s = getattr(execution, "draft_s", None)
    if isinstance(draft_s, float):
        busy = summary.get("busy_s")
        out["spec_draft_s"] = draft_s
        out["spec_draft_share"] = draft_s / busy if isinstance(busy, float) and busy > 0 else None
    return out


def replica_keys(replica: Replica, result: RunResult) -> Summary:
    """The keys of this kind a replica's run adds to its summary (`result` is its own, with its
    provenance): the execution model's figures, then speculative decoding's."""
    out: Summary = {}
    extra = _described(result).get("summary")
    if isinstance(extra, dict):
        out.update(extra)
    if replica.system.speculative is not None:
        out.update(speculative_summary(replica.scheduler, replica.execution, result.summary))
    if any(s.pipeline_parallel > 1 or s.tensor_parallel for s in replica.scenario.systems):
        out.update(per_gpu_keys(replica.scenario.tensor_parallel, replica.system, result.summary))
    return out


def per_gpu_keys(tensor_parallel: int, system: SystemConfig, summary: Summary) -> Summary:
    """A scenario whose systems may run on different numbers of GPUs (one with pipeline stages
    or its own tensor_parallel) compares them per GPU: the replica's GPUs (tensor_parallel x
    pipeline_parallel) and its output tokens per second (throughput_tok_s) per GPU."""
    num_gpus = tensor_parallel * system.pipeline_parallel
    tokens_s = summary.get("throughput_tok_s")
    per_gpu = tokens_s / num_gpus if isinstance(tokens_s, int | float) else None
    return {"num_gpus": num_gpus, "output_tok_s_per_gpu": per_gpu}


def add_replica_keys(replicas: Sequence[Replica], results: Sequence[RunResult]) -> None:
    """Give each replica's result the keys a single run of it would have."""
    for replica, result in zip(replicas, results, strict=True):
        result.summary.update(replica_keys(replica, result))


def fleet_keys(
    replicas: Sequence[Replica], results: Sequence[RunResult], busy_s: object
) -> Summary:
    """The fleet's values of the keys its replicas' results carry (after `add_replica_keys`);
    `busy_s`: the fleet's busy time (the sum over replicas)."""
    if len(results) == 1:  # exactly the replica's own, not a pooled figure of one
        own = results[0].summary
        return {k: own[k] for k in replica_keys(replicas[0], results[0])}
    out: Summary = {}
    # Means over priced steps, weighted by each replica's priced steps.
    weighted: dict[str, list[tuple[float, float]]] = {}
    for result in results:
        described = _described(result)
        extra, steps = described.get("summary"), described.get("summary_steps")
        if not isinstance(extra, dict):
            continue
        for key, value in extra.items():
            pairs = weighted.setdefault(key, [])
            if isinstance(value, int | float) and isinstance(steps, int) and steps > 0:
                pairs.append((float(value), float(steps)))
    for key, pairs in weighted.items():
        total = sum(w for _, w in pairs)
        out[key] = sum(v * w for v, w in pairs) / total if total else None
    # Speculative decoding: the replicas' counts pooled, then the rates of the pooled counts.
    stats = [
        s for r in replicas if r.system.speculative is not None and (s := _spec_stats(r.scheduler))
    ]
    if stats:
        pooled = SpecStats(
            num_verifications=sum(s.num_verifications for s in stats),
            num_draft_tokens=sum(s.num_draft_tokens for s in stats),
            num_accepted_tokens=sum(s.num_accepted_tokens for s in stats),
            num_emitted_tokens=sum(s.num_emitted_tokens for s in stats),
        )
        out.update(pooled.summary())
    drafts = [
        d
        for r in replicas
        if r.system.speculative is not None
        and isinstance(d := getattr(r.execution, "draft_s", None), float)
    ]
    if drafts:
        draft_s = sum(drafts)
        out["spec_draft_s"] = draft_s
        out["spec_draft_share"] = (
            draft_s / busy_s if isinstance(busy_s, float) and busy_s > 0 else None
        )
    return out


def replica_figures(index: int, own: Summary) -> Summary:
    """`replica_<index>_<key>` for the REPLICA_FIGURES this replica's summary has."""
    return {f"replica_{index}_{key}": own[key] for key in REPLICA_FIGURES if key in own}


def _described(result: RunResult) -> dict[str, object]:
    described = result.provenance.get("execution_model")
    return described if isinstance(described, dict) else {}


def _spec_stats(scheduler: Scheduler) -> SpecStats | None:
    spec = getattr(getattr(scheduler, "state", None), "spec", None)
    stats = getattr(spec, "stats", None)
    return stats if isinstance(stats, SpecStats) else None

"""A fleet run as one `RunResult`: every request with the replica it ran on, every step with its
replica, and a summary of the cluster beside each replica's own figures.

Cluster metrics (the request-level ones are docs/design.md's, over all replicas' requests):

- `num_replicas`, `num_gpus` (replicas x tensor-parallel degree).
- `goodput_req_s_per_gpu`: goodput over the number of GPUs.
- `load_imbalance`: time-averaged max / mean of requests in flight across replicas, sampled at
  every arrival (1 is perfect balance; N is everything on one of N replicas).
- `prefix_hit_rate`: prompt tokens served from the prefix caches over those looked up, pooled
  over the replicas (first admissions, as a single replica counts it).
- `replica_<i>_*`: each replica's requests, throughput, busy share, time-averaged KV use and
  prefix hit rate; its draft acceptance rate (speculative decoding) and routed experts read per
  MoE layer (a mixture of experts) where it has them.
- `spec_*`, `moe_*`: as a single run has them, pooled over the replicas (cluster/model_keys.py);
  each replica's result (`FleetRun.results`) gets its own, as its single run would.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pagesim.simulator.cluster.fleet import FleetRun
from pagesim.simulator.cluster.model_keys import add_replica_keys, fleet_keys, replica_figures
from pagesim.simulator.metrics.energy import fleet_energy_keys
from pagesim.simulator.metrics.recorder import summarize
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.metrics.step_log import StepTotals


def _pooled_hit_rate(run: FleetRun) -> float | None:
    if len(run.replicas) == 1:
        return run.replicas[0].scheduler.prefix_hit_rate()
    hits = queries = 0
    for replica in run.replicas:
        state = getattr(replica.scheduler, "state", None)
        stats = getattr(state, "prefix_stats", None)
        if stats is None or replica.scheduler.prefix_hit_rate() is None:
            continue
        hits += stats.num_hit_tokens
        queries += stats.num_query_tokens
    if not queries:
        return None if all(r.scheduler.prefix_hit_rate() is None for r in run.replicas) else 0.0
    return hits / queries


# Summary figures that come from the steps: counts add up over replicas; time averages are
# averaged over replicas weighted by their busy time.
_STEP_SUMS = (
    "num_steps",
    "busy_s",
    "swapped_blocks",
    "swapped_bytes",
    "swap_time_s",
    "num_cow_copies",
    "kv_capacity_tokens",
    "num_kv_blocks",
)
_STEP_MEANS = (
    "kv_token_share",
    "kv_reserved_share",
    "kv_internal_frag_share",
    "kv_external_frag_share",
    "kv_free_share",
    "peak_kv_used_share",
    "kv_waste_share",
    "kv_waste_of_used_share",
    "slot_utilization",
    "mfu",
    "mbu",
    "mean_batch_requests",
    "mean_batch_seqs",
    "kv_prefix_saved_share",
    "kv_fork_saved_share",
    "kv_saved_share",
    "peak_kv_saved_share",
    "kv_saved_of_unshared_share",
)


def _step_figures(results: list[RunResult]) -> dict[str, float | int | str | None]:
    if len(results) == 1:  # exactly the replica's own figures, not a weighted mean of one
        own = results[0].summary
        return {key: own[key] for key in (*_STEP_SUMS, *_STEP_MEANS, "block_size") if key in own}
    out: dict[str, float | int | str | None] = {}
    for key in _STEP_SUMS:
        values = [r.summary.get(key) for r in results]
        out[key] = sum(v for v in values if isinstance(v, int | float))
    weights = [float(r.summary.get("busy_s") or 0.0) for r in results]
    for key in _STEP_MEANS:
        pairs = [
            (float(v), w)
            for r, w in zip(results, weights, strict=True)
            if isinstance(v := r.summary.get(key), int | float) and w > 0
        ]
        total = sum(w for _, w in pairs)
        out[key] = sum(v * w for v, w in pairs) / total if total else None
    out["block_size"] = results[0].summary.get("block_size")
    return out


def _pooled_readmit_rate(run: FleetRun) -> float | None:
    if len(run.replicas) == 1:
        return run.replicas[0].scheduler.prefix_readmit_hit_rate()
    hits = queries = 0
    for replica in run.replicas:
        stats = getattr(getattr(replica.scheduler, "state", None), "prefix_stats", None)
        if stats is not None and replica.scheduler.prefix_readmit_hit_rate() is not None:
            hits += stats.num_readmit_hit_tokens
            queries += stats.num_readmit_query_tokens
    return hits / queries if queries else None


def _fleet_steps(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """The replicas' step tables as one, a `replica` column added, ordered by (start_s, replica)
    with ties kept in table order; the index is each row's position in the tables concatenated.

    The same table as `pd.concat([t.assign(replica=i) ...], ignore_index=True)
    .sort_values(["start_s", "replica"], kind="stable")`, built a column at a time and taking
    the columns out of `tables` as it goes (they are left empty: `fleet_result` and
    disagg_result.py's `disagg_result` read only the replicas' summaries after this). The
    pandas expression held three copies of every row at once besides the replicas' own
    (`assign`'s, the concatenation, the sorted result): the largest allocation of a long fleet
    run. This holds one, plus a column: on the whole Azure trace x 8 replicas the run's peak
    falls by about the table's size.
    """
    if not all(len(t) for t in tables):  # an idle replica's empty table: pandas' own dtypes
        return pd.concat(
            [t.assign(replica=i) for i, t in enumerate(tables)], ignore_index=True
        ).sort_values(["start_s", "replica"], kind="stable")
    replica = np.repeat(np.arange(len(tables), dtype=np.int64), [len(t) for t in tables])
    start_s = np.concatenate([t["start_s"].to_numpy() for t in tables])
    order = np.lexsort((replica, start_s))  # stable: the last key sorts first
    del start_s
    columns = {}
    for name in list(tables[0].columns):
        # `pop` frees the replica's column (StepLog.frame stores each as its own array)
        columns[name] = np.concatenate([t.pop(name).to_numpy() for t in tables])[order]
    columns["replica"] = replica[order]
    return pd.DataFrame(columns, index=pd.Index(order), copy=False)


def fleet_result(run: FleetRun, scenario: str, system: str, warmup_s: float) -> RunResult:
    frames = []
    for i, result in enumerate(run.results):
        requests = result.requests.copy()
        requests.insert(1, "replica", i)
        frames.append(requests)
    requests = pd.concat(frames, ignore_index=True).sort_values("request_id", kind="stable")
    requests = requests.reset_index(drop=True)
    if run.session_of:
        sessions = requests["request_id"].map(run.session_of)
        requests.insert(2, "session_id", sessions.astype("Int64"))
    steps = _fleet_steps([r.steps for r in run.results])
    first = run.replicas[0].capacity
    start, last = run.window_tokens
    window_tokens = None if start is None or last is None else last - start
    summary = summarize(
        requests, StepTotals(window_start_s=warmup_s), first.block_bytes, run.end_s, window_tokens
    )
    num_gpus = sum(r.scenario.tensor_parallel * r.system.pipeline_parallel for r in run.replicas)
    summary["num_replicas"] = len(run.replicas)
    summary["num_gpus"] = num_gpus
    goodput = summary.get("goodput_req_s")
    summary["goodput_req_s_per_gpu"] = (
        None if not isinstance(goodput, float | int) else goodput / num_gpus
    )
    summary["load_imbalance"] = imbalance(
        np.frombuffer(run.in_flight_samples, dtype=np.int64).reshape(-1, len(run.replicas))
    )
    summary |= _step_figures(run.results)
    add_replica_keys(run.replicas, run.results)  # the keys each replica's single run would have
    summary |= fleet_keys(run.replicas, run.results, summary["busy_s"])
    summary |= fleet_energy_keys([r.energy for r in run.replicas], requests)
    summary["prefix_hit_rate"] = _pooled_hit_rate(run)
    summary["prefix_readmit_hit_rate"] = _pooled_readmit_rate(run)
    for i, result in enumerate(run.results):
        own = result.summary
        kv_free = own.get("kv_free_share")
        summary[f"replica_{i}_num_requests"] = own["num_requests"]
        summary[f"replica_{i}_throughput_tok_s"] = own["throughput_tok_s"]
        summary[f"replica_{i}_busy_share"] = (
            float(own["busy_s"]) / run.end_s if run.end_s > 0 else None  # type: ignore[arg-type]
        )
        summary[f"replica_{i}_kv_used_share"] = (
            None if not isinstance(kv_free, float) else 1.0 - kv_free
        )
        summary[f"replica_{i}_prefix_hit_rate"] = own["prefix_hit_rate"]
        summary |= replica_figures(i, own)
    provenance = dict(run.results[0].provenance)
    provenance["replicas"] = [
        {
            "pool": r.pool,
            "gpu": r.scenario.gpu.name,
            "tensor_parallel": r.scenario.tensor_parallel,
            "system": r.system.name,
            "num_kv_blocks": r.capacity.num_gpu_blocks,
        }
        for r in run.replicas
    ]
    provenance["router"] = type(run.router).__name__
    return RunResult(scenario, system, requests, steps, summary, provenance)


def imbalance(samples: np.ndarray) -> float | None:
    """Mean over samples [num_samples, num_replicas] of max / mean in flight (samples where
    nothing is in flight are skipped)."""
    if samples.size == 0:
        return None
    means = samples.mean(axis=1)
    busy = means > 0
    if not busy.any():
        return None
    return float((samples[busy].max(axis=1) / means[busy]).mean())

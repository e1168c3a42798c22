"""A disaggregated fleet's run as one `RunResult`.

Requests: one row per request as the client sees it (TTFT is the decode replica's first token,
the one vLLM's proxy streams back; `admitted_s` its admission on the prefill replica), with

| column | meaning |
|---|---|
| `replica` | the decode replica (fleet index: prefill replicas first); empty until KV lands |
| `prefill_replica` | the prefill replica |
| `ttft_queue_s` | arrival -> admitted on the prefill replica, plus a served fleet's front end |
| `ttft_prefill_s` | admitted -> its last prompt chunk computed (chunks, preemptions included) |
| `ttft_transfer_s` | prefill end -> the KV landed on the decode replica (waits included) |
| `transfer_wait_s` | of which waiting for decode memory and for the link's ports |
| `ttft_first_decode_s` | KV landed -> first token: decode queueing, the last prompt token's step |
| `transfer_start_s`, `transfer_end_s`, `transfer_bytes` | the transfer on the link |

The four `ttft_*` parts add up to `ttft_s` exactly.

Summary: docs/design.md's metrics over all requests, the fleet figures of cluster/result.py
(`num_gpus`, `goodput_req_s_per_gpu`, step figures, `replica_<i>_*`, a mixture of experts'
`moe_*` pooled over prefill and decode replicas), and `num_prefill_gpus`,
`num_decode_gpus`, the mean and p99 of each TTFT part, `num_transfers`, `transfer_bytes_total`,
`link_busy_share` (the ports' mean share of the run carrying data) and `link_busy_share_max`
(the busiest port's). `link_utilization` bins the ports' busy time over the run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from pagesim.simulator.cluster.disagg import DisaggRun
from pagesim.simulator.cluster.model_keys import (
    Summary,
    add_replica_keys,
    fleet_keys,
    replica_figures,
)
from pagesim.simulator.cluster.replica import Replica
from pagesim.simulator.cluster.result import _fleet_steps, _step_figures, imbalance
from pagesim.simulator.metrics.energy import fleet_energy_keys
from pagesim.simulator.metrics.recorder import summarize
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.metrics.step_log import StepTotals

TTFT_PARTS = ("ttft_queue_s", "ttft_prefill_s", "ttft_transfer_s", "ttft_first_decode_s")


def _handoff_columns(run: DisaggRun, ids: np.ndarray) -> dict[str, np.ndarray]:
    nan = np.nan
    frontend_s = run.log.frontend_s  # in TTFT (execution/frontend.py): counted in the queue part
    rows = []
    for rid in ids:
        h = run.handoffs.get(int(rid))
        if h is None:
            rows.append((nan,) * 11)
            continue
        clone, first = h.clone, h.request.first_token_s
        admitted = clone.admitted_s
        rows.append(
            (
                # the decode replica holds the request once its KV landed there; routed but not
                # landed (the run stopped first), it is still the prefill replica's
                nan
                if h.decode is None or h.transfer_end_s is None
                else len(run.prefills) + h.decode,
                h.prefill,
                nan if admitted is None else admitted - h.request.arrival_s + frontend_s,
                nan
                if admitted is None or h.prefill_done_s is None
                else h.prefill_done_s - admitted,
                _gap(h.prefill_done_s, h.transfer_end_s),
                _gap(h.prefill_done_s, h.transfer_start_s),
                _gap(h.transfer_end_s, first),
                nan if h.transfer_start_s is None else h.transfer_start_s,
                nan if h.transfer_end_s is None else h.transfer_end_s,
                h.num_bytes if h.transfer_end_s is not None else nan,
                nan if admitted is None else admitted,
            )
        )
    names = (
        "replica",
        "prefill_replica",
        "ttft_queue_s",
        "ttft_prefill_s",
        "ttft_transfer_s",
        "transfer_wait_s",
        "ttft_first_decode_s",
        "transfer_start_s",
        "transfer_end_s",
        "transfer_bytes",
        "prefill_admitted_s",
    )
    table = np.array(rows, dtype=np.float64).reshape(-1, len(names))
    return {name: table[:, i] for i, name in enumerate(names)}


def _gap(start: float | None, end: float | None) -> float:
    return np.nan if start is None or end is None else end - start


def _stats(values: pd.Series) -> tuple[float | None, float | None]:
    clean = values.dropna()
    if clean.empty:
        return None, None
    return float(clean.mean()), float(np.percentile(clean, 99))


def disagg_result(run: DisaggRun, scenario: str, system: str, warmup_s: float) -> RunResult:
    requests = run.log.frame()
    extra = _handoff_columns(run, requests["request_id"].to_numpy())
    # Admitted = first admitted anywhere: on the prefill replica (the decode admission comes
    # after the transfer, in ttft_first_decode_s).
    prefill_admitted = extra.pop("prefill_admitted_s")
    has = ~np.isnan(prefill_admitted)
    requests.loc[has, "admitted_s"] = prefill_admitted[has]
    requests.insert(1, "replica", pd.Series(extra.pop("replica")).astype("Int64"))
    requests.insert(2, "prefill_replica", pd.Series(extra.pop("prefill_replica")).astype("Int64"))
    for name, values in extra.items():
        requests[name] = values
    replicas = [*run.prefills, *run.decodes]
    results = [r.result(scenario, run.end_s, run.workload.provenance()) for r in replicas]
    steps = _fleet_steps([r.steps for r in results])  # empties the replicas' step tables
    start, last = run.window_tokens
    window_tokens = None if start is None or last is None else last - start
    block_bytes = run.decodes[0].capacity.block_bytes
    summary = summarize(
        requests, StepTotals(window_start_s=warmup_s), block_bytes, run.end_s, window_tokens
    )
    num_prefill_gpus = sum(r.scenario.tensor_parallel for r in run.prefills)
    num_decode_gpus = sum(r.scenario.tensor_parallel for r in run.decodes)
    num_gpus = num_prefill_gpus + num_decode_gpus
    goodput = summary.get("goodput_req_s")
    summary |= {
        "num_replicas": len(replicas),
        "num_gpus": num_gpus,
        "goodput_req_s_per_gpu": None
        if not isinstance(goodput, float | int)
        else goodput / num_gpus,
        "load_imbalance": imbalance(
            np.frombuffer(run.in_flight_samples, dtype=np.int64).reshape(-1, len(run.prefills))
        ),
        "num_prefill_replicas": len(run.prefills),
        "num_decode_replicas": len(run.decodes),
        "num_prefill_gpus": num_prefill_gpus,
        "num_decode_gpus": num_decode_gpus,
    }
    summary |= _step_figures(results)
    summary |= fleet_energy_keys([r.energy for r in replicas], requests)
    add_replica_keys(replicas, results)  # a mixture of experts' and speculation's figures
    summary |= fleet_keys(replicas, results, summary["busy_s"])
    summary |= _handoff_keys(run, requests)
    summary |= _replica_keys(replicas, results, run.end_s)
    return RunResult(scenario, system, requests, steps, summary, _provenance(run, results))


def _handoff_keys(run: DisaggRun, requests: pd.DataFrame) -> Summary:
    """The TTFT parts' means and p99s over finished requests, the transfers and the link."""
    keys: Summary = {}
    done = requests[requests["status"] == "finished"]
    for part in (*TTFT_PARTS, "transfer_wait_s"):
        stem = part.removesuffix("_s")
        keys[f"{stem}_mean_s"], keys[f"{stem}_p99_s"] = _stats(done[part])
    sent = requests["transfer_end_s"].notna()
    keys["num_transfers"] = int(sent.sum())
    keys["transfer_bytes_total"] = int(requests.loc[sent, "transfer_bytes"].sum())
    busy = np.array(run.ports.busy_s) / run.end_s if run.end_s > 0 else np.zeros(1)
    keys["link_busy_share"] = float(busy.mean())
    keys["link_busy_share_max"] = float(busy.max())
    return keys


def _replica_keys(
    replicas: Sequence[Replica], results: Sequence[RunResult], end_s: float
) -> Summary:
    """Each replica's requests, busy share, KV use and own figures, prefill replicas first."""
    keys: Summary = {}
    for i, result in enumerate(results):
        own = result.summary
        kv_free = own.get("kv_free_share")
        keys[f"replica_{i}_num_requests"] = replicas[i].num_routed
        keys[f"replica_{i}_busy_share"] = (
            float(own["busy_s"]) / end_s if end_s > 0 else None  # type: ignore[arg-type]
        )
        keys[f"replica_{i}_kv_used_share"] = (
            None if not isinstance(kv_free, float) else 1.0 - kv_free
        )
        keys |= replica_figures(i, own)
    return keys


def _provenance(run: DisaggRun, results: list[RunResult]) -> dict[str, object]:
    """The first replica's provenance, with every replica's role, the link and the routers."""
    provenance = dict(results[0].provenance)
    provenance["replicas"] = [
        {
            "pool": r.pool,
            "role": "prefill" if i < len(run.prefills) else "decode",
            "gpu": r.scenario.gpu.name,
            "tensor_parallel": r.scenario.tensor_parallel,
            "system": r.system.name,
            "num_kv_blocks": r.capacity.num_gpu_blocks,
        }
        for i, r in enumerate([*run.prefills, *run.decodes])
    ]
    link = run.link
    provenance["link"] = {
        "preset": link.preset,
        "bandwidth_bytes_s": link.bandwidth_bytes_s,
        "latency_s": link.latency_s,
        "layerwise": link.layerwise,
    }
    provenance["routers"] = [type(router).__name__ for router in run.routers]
    return provenance


def link_utilization(requests: pd.DataFrame, num_ports: int, bin_s: float) -> pd.DataFrame:
    """Ports' busy share per time bin: `start_s`, `busy_share` (transfer-seconds in the bin,
    each counted at both its ports, over num_ports x bin_s)."""
    sent = requests.dropna(subset=["transfer_start_s", "transfer_end_s"])
    starts = sent["transfer_start_s"].to_numpy()
    ends = sent["transfer_end_s"].to_numpy()
    end = float(ends.max()) if ends.size else 0.0
    edges = np.arange(0.0, end + bin_s, bin_s)
    if edges.size < 2:
        edges = np.array([0.0, bin_s])
    lo, hi = edges[:-1, None], edges[1:, None]
    overlap = np.clip(np.minimum(hi, ends[None, :]) - np.maximum(lo, starts[None, :]), 0, None)
    busy = 2 * overlap.sum(axis=1) / (num_ports * bin_s)
    return pd.DataFrame({"start_s": edges[:-1], "busy_share": busy})

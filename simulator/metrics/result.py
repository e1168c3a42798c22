"""The typed result of one simulated system: per-request and per-step frames and a summary.

Reports render a `RunResult` and never recompute simulation logic. The column glossaries below are
the contract with `reports/` (and the metrics glossary in the HTML report is built from them).

The same idea in the cluster layer: simulator/cluster/result.py makes a fleet run one RunResult.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

REQUEST_COLUMNS: dict[str, str] = {
    "request_id": "id within the run",
    "arrival_s": "arrival time (s)",
    "admitted_s": "first admission to the running batch (s); NaN if never admitted",
    "first_token_s": "time the first output token was produced (s)",
    "last_token_s": "time the last output token was produced (s)",
    "finish_s": "time the response was complete: the last token, or for static batching the end "
    "of its batch, which returns all members together (s)",
    "prompt_len": "prompt tokens",
    "output_len": "output tokens per sequence (the longest sample's when samples differ)",
    "num_seqs": "sequences decoded (parallel samples or beams)",
    "num_output_tokens": "output tokens of all its sequences at the end (output_len x num_seqs, "
    "or the samples' own lengths summed)",
    "status": "finished, rejected, or unfinished (still pending at the run's time limit)",
    "rejection_reason": "why a rejected request could never be served; empty otherwise",
    "num_preemptions": "times preempted (swap or recompute)",
    "num_swaps": "times swapped out to CPU memory",
    "num_recomputed_tokens": "tokens computed again after recompute preemptions",
    "num_cached_tokens": "prompt tokens served from the prefix cache",
    "ttft_s": "time to first token as the client sees it = first token - arrival (s), plus a "
    "served system's front end and, under vllm-v0, the step after the token (its outputs are "
    "returned then: execution/frontend.py)",
    "tpot_s": "time per output token = (finish - first token) / (output tokens - 1) (s), both "
    "as the client sees them",
    "e2e_s": "end-to-end latency = finish - arrival (s), as the client sees it (as TTFT)",
    "normalized_latency_s": "E2E / output tokens (s/token), the vLLM paper's metric",
    "meets_slo": "finished within the scenario's TTFT and TPOT bounds",
    "in_window": "arrived after warm-up (counted in the summary)",
}

STEP_COLUMNS: dict[str, str] = {
    "start_s": "step start (s)",
    "duration_s": "step duration (s): compute + swap + copy-on-write copies",
    "compute_s": "model forward time (s)",
    "swap_s": "time on the host link swapping KV blocks (s)",
    "num_running": "requests holding KV on the GPU after the step",
    "num_waiting": "requests waiting for admission (including recompute-preempted)",
    "num_swapped": "requests swapped out to CPU memory",
    "num_seqs": "sequences computed in the step",
    "num_batch_requests": "requests computed in the step: the batch that ran (finished ones "
    "included)",
    "num_prefill_tokens": "prompt (or recompute) tokens computed",
    "num_decode_tokens": "decode tokens computed",
    "num_preemptions": "preemptions decided in the step",
    "num_swap_in_blocks": "blocks copied CPU -> GPU",
    "num_swap_out_blocks": "blocks copied GPU -> CPU",
    "num_cow_copies": "copy-on-write block copies",
    "kv_token_slots": "KV slots holding computed tokens",
    "kv_reserved_slots": "KV slots held for tokens still to be produced",
    "kv_internal_frag_slots": "KV slots held that will never be used",
    "kv_external_frag_slots": "free KV slots unusable by the next request (not contiguous)",
    "kv_free_slots": "free KV slots",
    "kv_prefix_saved_slots": "KV slots prefix caching saved: copies of blocks in use that "
    "prefix-cache hits share instead of holding (blocks x block size)",
    "kv_fork_saved_slots": "KV slots forks saved: copies of blocks that forked sequences "
    "(parallel samples, beams) share instead of holding (blocks x block size)",
    "slot_utilization": "useful batch slots / the policy's own batch capacity (static: its batch "
    "size; the others: max_num_seqs): how full its batches are, not comparable across policies "
    "and not GPU utilization (that is MFU and MBU)",
    "mfu": "model FLOPs / (peak FLOP/s x duration)",
    "mbu": "HBM bytes / (peak bandwidth x duration)",
    "row_steps": "engine steps the row stands for: 1, unless a long run's table was compacted "
    "(then times and counts are sums over its steps, states and utilizations their "
    "duration-weighted means)",
}

KV_CATEGORIES: dict[str, str] = {
    "kv_token_slots": "token states",
    "kv_reserved_slots": "reservation",
    "kv_internal_frag_slots": "internal fragmentation",
    "kv_external_frag_slots": "external fragmentation",
    "kv_free_slots": "free",
}


@dataclass(frozen=True)
class RunResult:
    """One system's run. `summary` holds scalars only (JSON-safe); its keys are defined in
    `reports.glossary.SUMMARY_METRICS`."""

    scenario: str
    system: str
    requests: pd.DataFrame
    steps: pd.DataFrame
    summary: dict[str, float | int | str | None]
    provenance: dict[str, object] = field(default_factory=dict)

    def write(self, folder: Path) -> None:
        """CSV of requests and steps, JSON of summary and provenance, under `folder`."""
        folder.mkdir(parents=True, exist_ok=True)
        self.requests.to_csv(folder / "requests.csv", index=False)
        self.steps.to_csv(folder / "steps.csv", index=False)
        payload = {
            "scenario": self.scenario,
            "system": self.system,
            "summary": self.summary,
            "provenance": self.provenance,
        }
        (folder / "summary.json").write_text(json.dumps(payload, indent=2, default=str) + "\n")

    @classmethod
    def read(cls, folder: Path) -> RunResult:
        payload = json.loads((folder / "summary.json").read_text())
        return cls(
            scenario=payload["scenario"],
            system=payload["system"],
            requests=pd.read_csv(folder / "requests.csv", keep_default_na=False, na_values=[""]),
            steps=pd.read_csv(folder / "steps.csv"),
            summary=payload["summary"],
            provenance=payload.get("provenance", {}),
        )

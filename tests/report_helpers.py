"""Made-up RunResults shaped like the simulator's, for report tests and layout work.

NOT a simulation: request times come from a toy slot model and the step frame is sampled from
those times, so that plots and pages can be built and looked at before (and independently of)
the simulator. Only tests and demos import this module.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.reports.render import write_report
from pagesim.simulator.metrics.result import REQUEST_COLUMNS, STEP_COLUMNS, RunResult

MAX_LEN = 2048  # toy model's maximum sequence length (contiguous reservation size)
CAPACITY_TOKENS = 40_000
_KINDS = {  # system -> (slots, contiguous?, static?)
    "static": (8, True, True),
    "orca-max": (16, True, False),
    "vllm-paged": (48, False, False),
}


def empty_result(system: str, scenario: str = "synthetic") -> RunResult:
    """A system that served nothing: zero-row frames with the contract's columns."""
    return RunResult(
        scenario=scenario,
        system=system,
        requests=pd.DataFrame({c: [] for c in REQUEST_COLUMNS}),
        steps=pd.DataFrame({c: [] for c in STEP_COLUMNS}, dtype=float),
        summary={"num_requests": 0, "num_finished": 0, "num_rejected": 0},
    )


def synthetic_results(
    num_requests: int = 300,
    num_steps: int = 3000,
    seed: int = 0,
    systems: tuple[str, ...] = tuple(_KINDS),
) -> list[RunResult]:
    """One RunResult per system; names not in the toy table behave like the paged system."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1 / 4.0, num_requests))
    prompt = np.clip(rng.lognormal(np.log(180), 0.8, num_requests), 4, 1500).astype(int)
    output = np.clip(rng.lognormal(np.log(120), 0.9, num_requests), 2, 500).astype(int)
    prompt[7::150] = 50_000  # prompts that can never fit: rejected
    results = []
    for system in systems:
        slots, contiguous, static = _KINDS.get(system, _KINDS["vllm-paged"])
        requests = _requests(arrival, prompt, output, slots, static)
        steps = _steps(requests, num_steps, slots, contiguous, rng)
        results.append(
            RunResult("synthetic", system, requests, steps, _summary(requests, steps, contiguous))
        )
    return results


def _requests(
    arrival: np.ndarray, prompt: np.ndarray, output: np.ndarray, slots: int, static: bool
) -> pd.DataFrame:
    n = len(arrival)
    admitted, first, finish = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    fits = prompt + output <= MAX_LEN
    free_at = np.zeros(slots)
    served = np.flatnonzero(fits)
    batch = slots if static else 1
    for k in range(0, len(served), batch):
        group = served[k : k + batch]
        if static:  # the whole batch starts together and holds its slots until the last finishes
            start = max(arrival[group].max(), free_at.max())
            admitted[group] = start
            first[group] = start + 2e-4 * prompt[group].max()
            finish[group] = first[group] + 0.03 * (1 + prompt[group] / 1500) * (output[group] - 1)
            free_at[:] = finish[group].max()
        else:
            slot = int(np.argmin(free_at))
            i = group[0]
            admitted[i] = max(arrival[i], free_at[slot])
            first[i] = admitted[i] + 2e-4 * prompt[i] + 0.01
            finish[i] = first[i] + 0.025 * (1 + prompt[i] / 1500) * (output[i] - 1)
            free_at[slot] = finish[i]
    ok = ~np.isnan(finish)
    frame = pd.DataFrame(
        {
            "request_id": np.arange(n),
            "arrival_s": arrival,
            "admitted_s": admitted,
            "first_token_s": first,
            "last_token_s": finish,
            "finish_s": finish,
            "prompt_len": prompt,
            "output_len": output,
            "num_seqs": 1,
            "num_output_tokens": output,
            "status": np.where(ok, "finished", "rejected"),
            "rejection_reason": np.where(ok, "", "prompt + output exceed the KV capacity"),
            "num_preemptions": 0,
            "num_swaps": 0,
            "num_recomputed_tokens": 0,
            "num_cached_tokens": 0,
            "ttft_s": first - arrival,
            "tpot_s": (finish - first) / np.maximum(output - 1, 1),
            "e2e_s": finish - arrival,
            "normalized_latency_s": (finish - arrival) / output,
        }
    )
    frame["meets_slo"] = ok & (frame["ttft_s"] < 2.0)
    frame["in_window"] = arrival > 5.0
    return frame[list(REQUEST_COLUMNS)]


def _steps(
    requests: pd.DataFrame, num_steps: int, slots: int, contiguous: bool, rng: np.random.Generator
) -> pd.DataFrame:
    served = requests[requests["status"] == "finished"]
    end = float(served["finish_s"].max())
    start = np.linspace(0.0, end, num_steps, endpoint=False)
    t = start[:, None]
    a, f = served["admitted_s"].to_numpy()[None, :], served["finish_s"].to_numpy()[None, :]
    ft = served["first_token_s"].to_numpy()[None, :]
    p, o = served["prompt_len"].to_numpy()[None, :], served["output_len"].to_numpy()[None, :]
    running = (a <= t) & (t < f)
    done = np.clip((t - ft) / np.maximum(f - ft, 1e-9), 0, 1)
    tokens = np.where(running, p + done * o, 0).sum(axis=1)
    final = np.where(running, p + o, 0).sum(axis=1)
    num_running = running.sum(axis=1)
    internal = num_running * (MAX_LEN if contiguous else 8) - (final if contiguous else 0)
    held = final + internal
    external = (
        (CAPACITY_TOKENS - held) * rng.uniform(0.1, 0.4, num_steps) if contiguous else 0 * held
    )
    preempt = (rng.random(num_steps) < 0.05 * (num_running > 0.3 * slots)).astype(int)
    util = num_running / slots
    return pd.DataFrame(
        {
            "start_s": start,
            "duration_s": np.full(num_steps, end / num_steps),
            "compute_s": np.full(num_steps, end / num_steps * 0.95),
            "swap_s": preempt * 0.002,
            "num_running": num_running,
            "num_waiting": rng.poisson(2, num_steps),
            "num_swapped": np.minimum(np.cumsum(preempt) % 4, num_running),
            "num_seqs": num_running,
            "num_batch_requests": num_running,
            "num_prefill_tokens": rng.poisson(30, num_steps),
            "num_decode_tokens": num_running,
            "num_preemptions": preempt,
            "num_swap_in_blocks": np.roll(preempt, 40) * 12,
            "num_swap_out_blocks": preempt * 12,
            "num_cow_copies": 0,
            "kv_token_slots": tokens.round(),
            "kv_reserved_slots": (final - tokens).round(),
            "kv_internal_frag_slots": internal,
            "kv_external_frag_slots": external.round(),
            "kv_free_slots": np.maximum(CAPACITY_TOKENS - held - external, 0).round(),
            # the paged system shares prompt blocks (a prefix cache); contiguous ones never do
            "kv_prefix_saved_slots": (0 if contiguous else 0.15) * tokens.round(),
            "kv_fork_saved_slots": 0,
            "slot_utilization": util,
            "mfu": 0.03 + 0.35 * util * rng.uniform(0.8, 1.0, num_steps),
            "mbu": 0.2 + 0.6 * util * rng.uniform(0.9, 1.0, num_steps),
            "row_steps": 1,
        }
    )[list(STEP_COLUMNS)]


def _summary(
    requests: pd.DataFrame, steps: pd.DataFrame, contiguous: bool
) -> dict[str, float | int | str | None]:
    window = requests[requests["in_window"]]
    done = window[window["status"] == "finished"]
    duration = float(steps["start_s"].iloc[-1] + steps["duration_s"].iloc[-1])
    kv = steps[["kv_token_slots", "kv_reserved_slots", "kv_internal_frag_slots"]]
    shares = {
        key: float(steps[col].mean() / CAPACITY_TOKENS)
        for key, col in (
            ("kv_token_share", "kv_token_slots"),
            ("kv_reserved_share", "kv_reserved_slots"),
            ("kv_internal_frag_share", "kv_internal_frag_slots"),
            ("kv_external_frag_share", "kv_external_frag_slots"),
            ("kv_free_share", "kv_free_slots"),
        )
    }
    summary: dict[str, float | int | str | None] = {
        "num_requests": len(window),
        "num_finished": len(done),
        "num_rejected": int((window["status"] == "rejected").sum()),
        "duration_s": duration,
        "throughput_req_s": len(done) / duration,
        "throughput_tok_s": float(done["output_len"].sum()) / duration,
        "goodput_req_s": float(done["meets_slo"].sum()) / duration,
    }
    for stem in ("ttft", "tpot", "e2e", "normalized_latency"):
        column = done[f"{stem}_s"]
        summary[f"{stem}_mean_s"] = float(column.mean())
        for q in (50, 90, 99):
            summary[f"{stem}_p{q}_s"] = float(column.quantile(q / 100))
    summary |= shares
    summary |= {
        "kv_waste_share": 1 - shares["kv_token_share"] - shares["kv_free_share"],
        "kv_saved_share": float(steps["kv_prefix_saved_slots"].mean() / CAPACITY_TOKENS),
        "peak_kv_saved_share": float(steps["kv_prefix_saved_slots"].max() / CAPACITY_TOKENS),
        "peak_kv_used_share": float(kv.sum(axis=1).max() / CAPACITY_TOKENS),
        "slot_utilization": float(steps["slot_utilization"].mean()),
        "mfu": float(steps["mfu"].mean()),
        "mbu": float(steps["mbu"].mean()),
        "num_preemptions": int(steps["num_preemptions"].sum()),
        "num_swaps": int(steps["num_preemptions"].sum()),
        "swapped_bytes": float(steps["num_swap_out_blocks"].sum() * 2 * 2**20),
        "swap_time_s": float(steps["swap_s"].sum()),
        "num_recomputed_tokens": 0,
        "prefix_hit_rate": None,
        "num_steps": len(steps),
        "num_kv_blocks": CAPACITY_TOKENS // 16,
        "block_size": 16 if not contiguous else None,
        "kv_capacity_tokens": CAPACITY_TOKENS,
    }
    return summary


def synthetic_sweep() -> pd.DataFrame:
    """A sweep table as the CLI writes it: a rate sweep for three systems, a block-size sweep."""
    rows: list[dict[str, object]] = []
    for system, capacity in (("static", 1.0), ("orca-max", 3.0), ("vllm-paged", 8.0)):
        for rate in (0.5, 1.0, 2.0, 4.0, 6.0):
            latency = 0.03 / max(1 - rate / capacity, 0.02)
            rows.append(
                {
                    "system": system,
                    "rate": rate,
                    "normalized_latency_mean_s": latency,
                    "normalized_latency_p90_s": 1.6 * latency,
                }
            )
    for block_size in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        rows.append(
            {
                "system": "vllm-paged",
                "block_size": block_size,
                "kv_waste_share": 0.02 + 0.002 * block_size,
                "throughput_tok_s": 900 - 300 / np.sqrt(block_size),
            }
        )
    return pd.DataFrame(rows)


def synthetic_calibration() -> dict[str, object]:
    """Calibration curves in the `reports.calibration_plots.parse_calibration` format."""
    kv_tokens = np.array([1e3, 4e3, 1.6e4, 6.4e4, 2.56e5])
    decode = 2e-6 * kv_tokens**0.9 + 2e-5
    return {
        "device": "synthetic GPU",
        "panels": [
            {
                "title": "decode attention",
                "x_label": "total KV tokens",
                "x": kv_tokens,
                "measured_s": decode,
                "measured_p10_s": 0.92 * decode,
                "measured_p90_s": 1.1 * decode,
                "fitted_s": 1.02 * decode,
                "roofline_s": 0.75 * decode,
                "log_x": True,
                "log_y": True,
            },
            {
                "title": "GEMMs",
                "x_label": "tokens in the step",
                "x": [1, 8, 64, 512, 4096],
                "measured_s": [0.010, 0.0101, 0.0105, 0.014, 0.06],
                "fitted_s": [0.0099, 0.0101, 0.0106, 0.0139, 0.061],
                "log_x": True,
            },
        ],
    }


SYSTEMS = ("static", "orca-max", "vllm-paged")
HOSTILE_SYSTEM = "<script>alert('x')</script>"  # a system name that must come out escaped


def synthetic_report_results() -> list[RunResult]:
    """The systems of `write_synthetic_report`: three toy systems and one that served nothing."""
    return [*synthetic_results(systems=SYSTEMS), empty_result(HOSTILE_SYSTEM)]


def write_synthetic_report(out_dir: Path) -> Path:
    """A full report (every plot, sweep, calibration) of made-up data, with HTML in its strings."""
    return write_report(
        synthetic_report_results(),
        out_dir,
        title="Report <i>test</i>",
        scenario_text='[model]\nname = "<llama & friends>"\n',
        provenance={"execution_model": "roofline", "pagesim_version": "0.1.0", "seed": 7},
        sweep=synthetic_sweep(),
        calibration=synthetic_calibration(),
        detail="the last rate",
    )

"""Where prompts' KV came from: the GPU prefix cache, the CPU tier (simulator/policies/
offload.py), or recomputation, per system; and each system's TTFT beside it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pagesim.reports.frames import as_number
from pagesim.reports.style import figure, label, legend_below, save
from pagesim.simulator.metrics.result import RunResult

_TIERS = (("GPU prefix cache", "#2b6cb0"), ("CPU tier", "#38a169"), ("recomputed", "#e2e8f0"))


def has_offload(results: Sequence[RunResult]) -> bool:
    """Whether some system ran a CPU tier (its summary has offload keys)."""
    return any("offload_hit_rate" in r.summary for r in results)


def _share(result: RunResult, key: str) -> float:
    value = as_number(result.summary.get(key))
    return 0.0 if value is None or np.isnan(value) else float(value)


def plot_hits_by_tier(results: Sequence[RunResult], path: Path) -> Path:
    """Left: each system's prompt tokens by where their KV came from (shares of the tokens
    looked up at first admission). Right: its TTFT median and p99."""
    names = [label(r.system, 28) for r in results]
    y = np.arange(len(results))[::-1]
    with figure(1, 2, max(2.6, 0.5 * len(results) + 1.6)) as (fig, axes):
        left, right = axes[0]
        gpu = np.array([_share(r, "prefix_hit_rate") for r in results])
        cpu = np.array([_share(r, "offload_hit_rate") for r in results])
        rest = np.clip(1.0 - gpu - cpu, 0.0, 1.0)
        start = np.zeros(len(results))
        for (name, color), part in zip(_TIERS, (gpu, cpu, rest), strict=True):
            left.barh(y, part, left=start, color=color, height=0.6, label=name)
            start += part
        for yi, g, c in zip(y, gpu, cpu, strict=True):
            left.text(1.01, yi, f"{g:.1%} + {c:.1%}", va="center", fontsize=8)
        left.set_xlim(0, 1.25)
        left.set_yticks(y, names)
        left.set_xlabel("share of prompt tokens looked up (first admissions)")
        p50 = [_share(r, "ttft_p50_s") for r in results]
        p99 = [_share(r, "ttft_p99_s") for r in results]
        right.barh(y + 0.17, p50, height=0.32, color="#2b6cb0", label="TTFT p50")
        right.barh(y - 0.17, p99, height=0.32, color="#90cdf4", label="TTFT p99")
        right.set_yticks(y, names)
        right.set_xlabel("time to first token (s)")
        handles, labels = left.get_legend_handles_labels()
        more, more_labels = right.get_legend_handles_labels()
        legend_below(fig, [*handles, *more], [*labels, *more_labels], 5)
        fig.suptitle("Prompt KV by tier, and TTFT")
        return save(fig, path)
